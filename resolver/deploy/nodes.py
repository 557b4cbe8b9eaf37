"""The nodes of one multi-machine launch: which node this process is, and every node's command.

Why: a server spanning N machines is the same upstream command started N times, each with its own
rank. Getting the rank wrong is silent until the rendezvous hangs (two node 0s, or a node N), so:
- a process started by a scheduler reads its rank from the variable the scheduler sets (Slurm's
  SLURM_NODEID, LeaderWorkerSet's LWS_WORKER_INDEX; the names are data in rules/deploy/), and a
  typed rank that disagrees with it is an error, never silently replaced;
- every node's command is resolved (not copied and edited), then checked to differ from node 0's
  only in the rank, so what each node runs is what Accord resolved for that node.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from accord.resolver.api import resolve
from accord.resolver.commandline.emit import Launch, emit
from accord.resolver.commandline.flagparse import ParsedFlags
from accord.resolver.deploy.spec import DeploySpec
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig

DEPLOY_SOURCE = "deploy"  # provenance `via` of values a deployment sets (the rank, the address, the host)
# The rendezvous host in a command written for machines Accord cannot see: the node-0 address the
# deployment fills in (LeaderWorkerSet's leader address, Slurm's first host) or the operator does.
HOST_PLACEHOLDER = "HOST"


@dataclasses.dataclass(frozen=True)
class NodeLaunch:
    """One node's resolution and the upstream command written from it."""

    rank: int
    config: ResolvedConfig
    launch: Launch


def flag_spelling(spec: DeploySpec, role: str) -> str:
    from accord.resolver.language.catalog import load_catalog
    return load_catalog(spec.system)[spec.name(role)].primary


def _int(text: str, where: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(f"{where} is {text!r}, not a node rank (a whole number from 0). Unset it, or "
                         f"give the rank with --node-rank.") from None
    if value < 0:
        raise UsageError(f"{where} is {value}, but a node rank counts from 0. Unset it, or give the rank "
                         f"with --node-rank.")
    return value


def environment_rank(spec: DeploySpec, parsed: ParsedFlags, environ: Mapping[str, str]) -> ParsedFlags:
    """`parsed` with this node's rank from the scheduler's variable, for a launch over several nodes
    without a typed rank (its source recorded as `env:NAME`). A typed rank is kept, and one that a
    set variable contradicts is an error; so are two variables that disagree, and a rank past the
    last node. One-node launches read nothing (a Slurm job may run one server per node)."""
    nodes_name, rank_name = spec.name("nodes"), spec.name("rank")
    nnodes = parsed.user.get(nodes_name) or 1
    if nnodes <= 1:
        return parsed
    found = [(entry["name"], entry.get("by", ""), _int(environ[entry["name"]], f"${entry['name']}"))
             for entry in spec.rank_env if (environ.get(entry["name"]) or "").strip()]
    rank_flag = flag_spelling(spec, "rank")
    for name, _, value in found[1:]:
        if value != found[0][2]:
            raise UsageError(f"${found[0][0]}={found[0][2]} and ${name}={value} name different node ranks, "
                             f"so this node's rank is unknown. Give it with {rank_flag}, or unset the "
                             f"variable that does not belong to this job.")
    typed = parsed.user.get(rank_name)
    if typed is not None:
        if found and found[0][2] != typed:
            raise UsageError(f"{rank_flag} {typed} was typed, but ${found[0][0]}={found[0][2]} (set by "
                             f"{found[0][1] or 'the scheduler'}) says this is node {found[0][2]}. Two nodes "
                             f"with one rank never meet: drop {rank_flag} to take the scheduler's rank, or "
                             f"type the one it sets.")
        return parsed
    if not found:
        return parsed
    name, by, value = found[0]
    if value >= nnodes:
        raise UsageError(f"${name}={value} names node {value}, but --nnodes {nnodes} counts nodes 0 to "
                         f"{nnodes - 1}. Start the job on {nnodes} nodes, or give --nnodes the job's node count.")
    user = {**parsed.user, rank_name: value}
    sources = {**parsed.sources, rank_name: f"env:{name}"}
    note = f"{rank_flag} {value} read from ${name}" + (f" (set by {by})" if by else "")
    return dataclasses.replace(parsed, user=user, sources=sources, warnings=(*parsed.warnings, note))


def node_launches(spec: DeploySpec, system: str, user: Mapping[str, Any], facts: Mapping[str, Any],
                  sources: Mapping[str, str], warnings: Sequence[str] = (),
                  launcher: Sequence[str] | None = None) -> list[NodeLaunch]:
    """Every node's resolution and command, node 0 first. Each node is resolved with its own rank
    (a typed rank names the node this process runs on, not the others). Raises ConflictError as
    `resolve` does (node 0's, before any other node is tried)."""
    rank_name, nodes_name = spec.name("rank"), spec.name("nodes")
    out: list[NodeLaunch] = []
    nnodes = 1
    rank = 0
    one_node = int(user.get(nodes_name) or 1) <= 1
    while rank < nnodes:
        if one_node:  # no rank to give: the command stays the one-node launch's
            node_user, node_sources = dict(user), dict(sources)
        else:
            node_user = {**user, rank_name: rank}
            node_sources = {**sources, rank_name: sources.get(rank_name, DEPLOY_SOURCE) if user.get(rank_name) == rank
                            else DEPLOY_SOURCE}
        config = resolve(system, node_user, facts, node_sources, warnings=tuple(warnings))
        nnodes = int(config.values.get(nodes_name) or 1)
        out.append(NodeLaunch(rank, config, emit(config, launcher)))
        rank += 1
    return out


def differences(spec: DeploySpec, nodes: Sequence[NodeLaunch]) -> list[str]:
    """How a node's command differs from node 0's besides the rank (empty: only the rank differs)."""
    rank_name = spec.name("rank")
    first = _words_by_option(nodes[0].launch, rank_name)
    out = []
    for node in nodes[1:]:
        other = _words_by_option(node.launch, rank_name)
        if other != first or dict(node.launch.env) != dict(nodes[0].launch.env):
            changed = sorted(set(other) ^ set(first))
            out.append(f"node {node.rank}: {changed[:6]}")
    return out


def _words_by_option(launch: Launch, skip: str) -> list[tuple[str, ...]]:
    return sorted(tuple(option.words()) for option in launch.options if skip not in option.carries)


def command_groups(launch: Launch, values: Mapping[str, str], escape: Callable[[str], str] = str) -> list[list[str]]:
    """The launch's command as groups of words (the launcher, then one group per option), with the
    values of the options carrying the settings in `values` replaced by the given text (a
    scheduler's variable, say) and every other word passed through `escape`. A setting named in
    `values` that no option carries is appended as `--flag text`."""
    groups = [[escape(word) for word in launch.launcher]]
    done = set()
    for option in launch.options:
        hit = next((name for name in option.carries if name in values), None)
        if hit is None:
            groups.append([escape(word) for word in option.words()])
        else:
            groups.append([escape(option.flag), values[hit]])
            done.add(hit)
    for name in sorted(set(values) - done):
        from accord.resolver.language.catalog import load_catalog
        groups.append([escape(load_catalog(launch.system)[name].primary), values[name]])
    return groups


def command_words(launch: Launch, values: Mapping[str, str], escape: Callable[[str], str] = str) -> list[str]:
    """`command_groups` as one list of words."""
    return [word for group in command_groups(launch, values, escape) for word in group]


def nodes_json(spec: DeploySpec, nodes: Sequence[NodeLaunch]) -> list[dict]:
    """The `nodes` entry of `accord launch --dry-run --json`: one {rank, command, env} per node."""
    key = spec.name("rank")
    return [{key: node.rank, "command": node.launch.command, "env": dict(node.launch.env)} for node in nodes]


def init_port(spec: DeploySpec, typed: Any) -> int:
    """The rendezvous port: the typed address's, else the deployment default (rules/deploy/)."""
    if typed is None:
        return int(spec.deployment["init_port"])
    host, sep, port = str(typed).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{flag_spelling(spec, 'init_addr')} {typed!r} is not host:port (e.g. 10.0.0.1:20000); "
                         f"in a deployment only its port is used (node 0's address is filled in), so "
                         f"give :PORT with a free port, or drop it for {spec.deployment['init_port']}.")
    return int(port)
