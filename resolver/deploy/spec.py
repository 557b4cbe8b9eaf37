"""What a deployment reads from rules/deploy/<system>.yaml: the settings that name the node count,
the rank, the rendezvous address and the HTTP endpoint, the environment variables schedulers set, and
the defaults a file written for other machines needs.

Why a file of its own: those names are the engine's (rules/ holds them as data); the modules of this
package only follow them, so a second engine is a second YAML file.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.expr import parse
from accord.resolver.language.expr_runtime import UnknownFact

DEPLOY_DIR = RULES_DIR / "deploy"
SETTINGS = ("nodes", "rank", "init_addr", "host", "port", "model")


@dataclasses.dataclass(frozen=True)
class DeploySpec:
    system: str
    settings: Mapping[str, str]         # role ("nodes", "rank", ...) -> the system's setting name
    gpus_per_node: str                  # expression over resolved values
    rank_env: tuple[Mapping[str, str], ...]
    deployment: Mapping[str, Any]
    disaggregation: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def name(self, role: str) -> str:
        return self.settings[role]

    def per_node_gpus(self, values: Mapping[str, Any]) -> int:
        """GPUs each node's processes use (the spec's expression over the resolved values)."""
        return int(evaluate(self.gpus_per_node, values))


@functools.lru_cache(maxsize=None)
def load_deploy_spec(system: str) -> DeploySpec:
    """The deploy spec of `system`; a system without one cannot be deployed over machines."""
    import yaml

    path = DEPLOY_DIR / f"{system}.yaml"
    if not path.is_file():
        raise UsageError(f"the {system} system has no deployment description (rules/deploy/{system}.yaml), "
                         f"so it cannot be written for several machines or as a Kubernetes or Slurm "
                         f"deployment; launch it on one machine with `accord launch` instead.")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    missing = [role for role in SETTINGS if role not in (data.get("settings") or {})]
    if missing:
        raise ValueError(f"{path}: settings lacks {missing}")
    parse(data["gpus_per_node"])  # a typo is a load error, not a wrong deployment
    return DeploySpec(system=system, settings=dict(data["settings"]), gpus_per_node=data["gpus_per_node"],
                      rank_env=tuple(data.get("rank_env") or ()), deployment=dict(data.get("deployment") or {}),
                      disaggregation=dict(data.get("disaggregation") or {}))


class _Values:
    """The expression environment over resolved values (facts are not read by deploy expressions)."""

    def __init__(self, values: Mapping[str, Any]):
        self._values = values

    def flag(self, name: str) -> Any:
        return self._values.get(name)

    def fact(self, key: str) -> Any:
        raise UnknownFact(key)

    def is_set(self, name: str) -> bool:
        return self._values.get(name) is not None

    def user_value(self, name: str) -> Any:
        return self._values.get(name)

    def default(self, name: str) -> Any:
        return None


@functools.lru_cache(maxsize=None)
def _parsed(source: str):
    return parse(source)


def evaluate(source: str, values: Mapping[str, Any]) -> Any:
    return _parsed(source)(_Values(values))
