"""One launch prepared for a deployment file: resolved for every node, with what a file written for
other machines must say differently from a launch on this one.

Why a step of its own: Kubernetes, Slurm and plain per-node commands all need the same answers
(how many nodes, GPUs per node, the HTTP port, each node's command) and the same adjustments:
- the HTTP server listens on every interface unless a host was typed (the default loopback address
  answers no Service, router or client on another machine);
- the rendezvous address is node 0's, which only the scheduler knows: it is resolved as a
  placeholder host (`HOST`) on the typed port or the default one, and each writer fills in its
  scheduler's variable;
- a typed node rank has no meaning in a file for every node, so it is refused.
Each adjustment is reported as a note, so the file says what Accord chose for it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from accord.resolver.commandline.flagparse import ParsedFlags
from accord.resolver.deploy.nodes import (
    DEPLOY_SOURCE,
    HOST_PLACEHOLDER,
    NodeLaunch,
    differences,
    flag_spelling,
    init_port,
    node_launches,
)
from accord.resolver.deploy.spec import DeploySpec, load_deploy_spec
from accord.resolver.errors import AccordError, UsageError

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 40  # LeaderWorkerSet pods are NAME-GROUP-INDEX and the Service NAME-leader: room for both


@dataclasses.dataclass(frozen=True)
class Deployment:
    """A launch resolved for every node of a deployment."""

    spec: DeploySpec
    name: str
    nodes: tuple[NodeLaunch, ...]
    nnodes: int
    gpus_per_node: int
    port: int
    init_port: int | None        # None for one node (no rendezvous)
    release: str                 # the upstream release the commands are for
    upstream: str                # upstream's name (the launch spec's)
    notes: tuple[str, ...]

    @property
    def leader(self) -> NodeLaunch:
        return self.nodes[0]

    def warnings(self) -> list[str]:
        """What resolving and writing said (the resolution's warnings, then the emitter's)."""
        return [*self.leader.config.warnings, *self.leader.launch.warnings]


def default_name(model: Any, prefix: str) -> str:
    """A DNS label from the deploy spec's prefix and the served model's last path part."""
    tail = str(model or "server").rstrip("/").split("/")[-1].lower()
    tail = re.sub(r"[^a-z0-9]+", "-", tail).strip("-") or "server"
    return f"{prefix}-{tail}"[:MAX_NAME].rstrip("-")


def check_name(name: str) -> str:
    if len(name) > MAX_NAME or not NAME_RE.match(name):
        raise UsageError(f"--name {name!r} is not a usable deployment name: it must be at most {MAX_NAME} "
                         f"characters of lowercase letters, digits and '-', starting with a letter and "
                         f"ending with a letter or digit (a Kubernetes DNS label with room for the pod "
                         f"suffixes), e.g. --name llm-server-1.")
    return name


def prepare(parsed: ParsedFlags, facts: Mapping[str, Any], launcher: Sequence[str] | None = None,
            name: str | None = None, for_scheduler: bool = True) -> Deployment:
    """Resolve `parsed` for every node of its deployment (see the module docstring).

    `for_scheduler`: the file is for Kubernetes or Slurm, which fill in node 0's address; otherwise
    (plain per-node commands) a typed address is kept and a missing one stays the placeholder."""
    spec = load_deploy_spec(parsed.system)
    user = dict(parsed.user)
    sources = dict(parsed.sources)
    notes: list[str] = []
    rank_name, host_name, init_name = spec.name("rank"), spec.name("host"), spec.name("init_addr")
    if rank_name in user:
        raise UsageError(f"{flag_spelling(spec, 'rank')} {user[rank_name]} was typed, but a deployment "
                         f"starts every node and gives each its own rank. Drop {flag_spelling(spec, 'rank')}.")
    if host_name not in user:
        user[host_name] = spec.deployment["host"]
        sources[host_name] = DEPLOY_SOURCE
        notes.append(f"{flag_spelling(spec, 'host')} {user[host_name]}: a deployment is reached from other "
                     f"machines (type {flag_spelling(spec, 'host')} to choose another address)")
    nnodes = int(user.get(spec.name("nodes")) or 1)
    port = None
    if nnodes > 1:
        typed = user.get(init_name)
        port = init_port(spec, typed)
        if typed is None or for_scheduler:
            if typed is not None:
                notes.append(f"{flag_spelling(spec, 'init_addr')} {typed}: its port is kept; its host is "
                             f"node 0's address, which the scheduler fills in")
            user[init_name] = f"{HOST_PLACEHOLDER}:{port}"
            sources[init_name] = DEPLOY_SOURCE
    nodes = node_launches(spec, parsed.system, user, facts, sources, parsed.warnings, launcher)
    differ = differences(spec, nodes)
    if differ:
        raise AccordError(f"the nodes' commands differ in more than {flag_spelling(spec, 'rank')} "
                          f"({'; '.join(differ)}), so one template cannot start them all. This is a gap in "
                          f"Accord's rules: report it with the command; `accord launch --dry-run --json` "
                          f"prints each node's command.")
    values = nodes[0].config.values
    upstream, rules_release = _rules_release(parsed.system)
    release = str(nodes[0].config.facts.get(spec.deployment["release_fact"]) or rules_release)
    return Deployment(spec=spec, name=check_name(name) if name else default_name(values.get(spec.name("model")),
                                                                                  spec.deployment["name_prefix"]),
                      nodes=tuple(nodes), nnodes=int(values.get(spec.name("nodes")) or 1),
                      gpus_per_node=spec.per_node_gpus(values), port=int(values[spec.name("port")]),
                      init_port=port, release=release, upstream=upstream, notes=tuple(notes))


def _rules_release(system: str) -> tuple[str, str]:
    """(upstream's name, the release the rules describe), from the launch spec's `upstream:`
    (`NAME 1.2.3`)."""
    from accord.resolver.commandline.emit import load_spec
    name, _, release = load_spec(system).upstream.rpartition(" ")
    return name or "upstream", release


def image(deployment: Deployment, typed: str | None) -> str:
    return typed or str(deployment.spec.deployment["image"]).format(release=deployment.release)
