"""Predicted speed of one resolved launch on one machine at one workload: the cost model of `accord tune`.

The model is a roofline with fixed costs, and every number in it is data (`rules/<system>/data/
costs.yaml`): the device's datasheet figures, the efficiencies and fixed costs (each fitted on
published serving measurements, benchmarks/data/serving_figures.yaml, or stated as an assumption),
a factor per serving engine and release where the measurements show one, and the flag and
derived-value names it reads. The code knows the shape of the computation only, in three small
modules: `cost_launch` (the layout, bytes per GPU, KV room, the running batch), `cost_steps` (a
decode step with its per-layer floor, a prefill, the collectives, MoE costs) and `cost_load`
(closed loop, open loop and burst workloads: throughput, TPOT and TTFT).

`benchmarks/tune_accuracy.py` scores it against the published figures and refits its constants,
in-sample and held out by source; `accord tune --measure` scores the ranking on this machine.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, Mapping

from accord.resolver.errors import UsageError
from accord.resolver.exploring.cost_launch import GIB, launch_of
from accord.resolver.exploring.cost_load import Server, Served, burst, closed_loop, open_loop
from accord.resolver.exploring.cost_steps import engine_factors, rates_of, reference_engine
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files

COSTS_FILE = "data/costs.yaml"
LENGTHS = ("fixed", "uniform", "exponential")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the users send: prompt and output lengths, and one of: a number of users that each send
    their next request when the last one finishes (closed loop), a request rate (open loop, Poisson
    arrivals), or a burst of requests all sent at once (throughput averaged over the drain)."""

    input_len: int
    output_len: int
    concurrency: int | None = None
    request_rate: float | None = None
    burst: int | None = None
    lengths: str = "fixed"    # how output lengths spread around output_len (the mean): LENGTHS

    def spread(self, n: float) -> tuple[float, float]:
        """(mean output length of a request caught running, expected longest of `n` requests), each
        relative to the mean: requests that generate more stay longer, so a running batch holds more
        than the mean (E[L^2]/E[L]), and a batch drains when its longest request ends."""
        if self.lengths == "exponential":   # a long tail, as chat datasets have: E[L^2] = 2 m^2, max ~ m H_n
            return 2.0, sum(1.0 / k for k in range(1, max(1, int(n)) + 1))
        if self.lengths == "uniform":       # uniform over 1 .. 2m: E[L^2] = 4/3 m^2, max ~ 2m n / (n + 1)
            return 4.0 / 3.0, 2.0 * n / (n + 1.0)
        return 1.0, 1.0

    def describe(self) -> str:
        if self.burst is not None:
            load = f"burst of {self.burst} at once"
        elif self.request_rate is not None:
            load = f"{self.request_rate:g} req/s"
        else:
            load = f"{self.concurrency} concurrent"
        return f"{self.input_len} in / {self.output_len} out tokens, {load}"


@functools.lru_cache(maxsize=None)
def load_costs(system: str = "llm") -> dict:
    """The cost data of a system (read once; callers never change it), with the values of its
    `fitted:` constants put in place."""
    path = RULES_DIR / system / COSTS_FILE
    if not path.is_file():
        raise UsageError(f"`accord tune` has no cost model for the {system} system ({path} is missing).")
    (data,), = read_yaml_files([path])
    return with_fitted(data)


def with_fitted(data: Mapping[str, Any]) -> dict:
    """A copy of the cost data with each `fitted:` constant's value at its path (`a/b/c`)."""
    data = copy.deepcopy(dict(data))
    for name, entry in ((data.get("fitted") or {}).get("constants") or {}).items():
        *parents, last = name.split("/")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = entry["value"]
    return data


class CostModel:
    """The cost data of a system, with a calibration overlay (`family_speed`) on top."""

    def __init__(self, data: Mapping[str, Any], calibration: Mapping[str, Any] | None = None):
        self.data = data
        self.roles = data["roles"]
        self.derived_names = data["derived"]
        self.family_speed = dict((calibration or {}).get("family_speed") or {})

    @classmethod
    def for_system(cls, system: str = "llm", calibration_file: str | None = None) -> "CostModel":
        return cls(load_costs(system), read_calibration(calibration_file) if calibration_file else None)

    def device(self, facts: Mapping[str, Any]) -> tuple[str, dict]:
        """(entry name, constants) of the device the facts describe; a clear error when unknown."""
        devices = self.data["devices"]
        if facts.get("platform") == "cpu":
            return "cpu", devices["cpu"]
        name = str(facts.get("gpu.name") or "")
        for key, entry in devices.items():
            if any(word.lower() in name.lower() for word in entry.get("match") or ()):
                return key, entry
        raise UsageError(f"`accord tune` has no cost constants for the GPU {name or '(unnamed)'}; add an entry "
                         f"with its datasheet figures to rules/llm/{COSTS_FILE} (devices:), or tune with a "
                         f"preset such as --facts h100.")

    def predict(self, read: Callable[[str], Any], facts: Mapping[str, Any], workload: Workload,
                model_extra: Mapping[str, Any] | None = None,
                engine: tuple[str, str] | None = None) -> dict[str, Any] | None:
        """Predicted figures for the launch whose flag and derived values `read(name)` gives, or
        None when the model does not fit (no KV room for one request). `engine` is the serving
        engine and release the figures are for (default: the engine of rules/packages.yaml at its package fact's release)."""
        engine = engine or (reference_engine(), str(facts.get("packages." + reference_engine()) or ""))
        launch = launch_of(self.data, self.roles, self.derived_names, read, facts, workload.input_len,
                           workload.output_len, model_extra or {}, engine_factors(self.data, engine)["admits"],
                           workload.spread(1)[0])
        if launch is None:
            return None
        rates = rates_of(self.data, self.device(facts)[1], launch, facts, engine, self.family_speed)
        server = Server(launch, rates, workload.input_len, workload.output_len, workload.spread)
        if workload.burst is not None:
            served = burst(server, workload.burst)
        elif workload.request_rate is not None:
            served = open_loop(server, workload.request_rate)
        else:
            served = closed_loop(server, workload.concurrency or 1)
        return report(launch, served)


def report(launch, served: Served) -> dict[str, Any]:
    """The figures `accord tune` shows and ranks by, rounded so equal inputs print equal bytes."""
    return {
        "throughput_tok_s": round(served.throughput, 1),
        "throughput_per_gpu": round(served.throughput / launch.gpus, 1),
        "tok_s_per_user": round(1.0 / served.tpot, 2),
        "ttft_ms": None if served.ttft is None else round(served.ttft * 1e3, 2),
        "tpot_ms": round(served.tpot * 1e3, 3),
        "decode_step_ms": round(served.step * 1e3, 3),
        "prefill_ms": round(served.prefill * 1e3, 2),
        "comm_ms": round(served.parts["comm_ms"], 3),
        "bound": served.parts["bound"],
        "gpus": launch.gpus,
        "weights_gib_per_gpu": round(launch.weights_gpu / GIB, 2),
        "kv_gib_per_gpu": round(max(launch.room, 0) / GIB, 2),
        "kv_bytes_per_token_per_gpu": round(launch.kv_token_gpu, 1),
        "kv_capacity_tokens": launch.kv_tokens,
        "concurrency_fits": launch.fits_per_rank * launch.dp,
        "running_per_rank": round(served.batch, 1),
        "saturated": served.saturated,
    }


def read_calibration(path: str) -> dict:
    """A calibration overlay written by `accord tune --calibrate` (YAML or JSON)."""
    import yaml

    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"cannot read calibration file {path}: {err.strerror or err}; write one with "
                         "`accord tune --measure K --calibrate FILE`.") from None
    except yaml.YAMLError as err:
        raise UsageError(f"{path} is not a YAML calibration file ({err}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("family_speed"), dict):
        raise UsageError(f"{path}: expected a mapping with `family_speed: {{backend: factor}}`, as "
                         "`accord tune --calibrate` writes.")
    for name, value in data["family_speed"].items():
        if not isinstance(value, (int, float)) or value <= 0:
            raise UsageError(f"{path}: family_speed.{name} = {value!r}; each factor must be a positive number.")
    return data


def model_config_extra(model_path: str | None, system: str = "llm", revision: str | None = None) -> dict[str, Any]:
    """Numbers the cost model reads from the model's config.json beyond the `model.*` facts
    (the experts each token visits, MLA's latent width), spelled as costs.yaml lists them. The
    config comes from wherever the model's facts came from (a folder, the Hugging Face cache, the
    hub or a built-in card)."""
    from accord.resolver.facts.model_sources import find_model

    if model_path is None:
        return {}
    try:
        source = find_model(model_path, system, revision).source
        config = source.read("config.json") if source is not None and source.kind != "gguf" else None
    except UsageError:
        return {}  # the facts loader reports an unreadable config; the cost model just lacks its extras
    if config is None:
        return {}
    sources = [config] + [config[k] for k in ("text_config", "llm_config", "language_config")
                          if isinstance(config.get(k), dict)]
    found: dict[str, Any] = {}
    for key, spellings in load_costs(system)["model_config"].items():
        for source in sources:
            value = next((source[s] for s in spellings if isinstance(source.get(s), int)), None)
            if value is not None:
                found[key] = value
                break
    return found
