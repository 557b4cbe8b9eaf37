"""A deployment as a Slurm batch script: `sbatch` allocates N nodes, `srun` starts one task per node.

Why this shape: srun gives every task its node's index (SLURM_NODEID), which is the rank, and the
job's node list names node 0 (`scontrol show hostnames` lists it first), which is the rendezvous host.
Each task runs the command Accord resolved for its node through `bash -c`, so the two variables are
read on the node that runs it; every other word is quoted as written. The script passes `bash -n`
(and shellcheck) and has no timestamps: same inputs, same bytes.

A prefill/decode deployment (`render_pd`) is one job of every role's nodes, the first ones prefill's:
each role runs as an srun step restricted to its own nodes, whose rank is the task's index in that
step (SLURM_PROCID, one task per node) and whose rendezvous host is the role's first node; the
router runs on the batch host (job node 0).
"""

from __future__ import annotations

import shlex

from accord.resolver.deploy.nodes import command_groups
from accord.resolver.deploy.plan import Deployment

LEADER_VAR = "ACCORD_NODE0_HOST"  # the script's own variable: node 0's host name


def _inner(deployment: Deployment, rank_var: str, host_var: str) -> str:
    """The command Accord resolved for every node, one option a line, for a single-quoted `bash -c`:
    the rank is the node's `rank_var`, the rendezvous host `host_var` (read on the node)."""
    spec, leader = deployment.spec, deployment.leader
    marks = {spec.name("rank"): "\0RANK\0"} if deployment.nnodes > 1 else {}
    if deployment.init_port is not None:
        marks[spec.name("init_addr")] = "\0ADDR\0"
    groups = command_groups(leader.launch, marks, shlex.quote)
    inner = " \\\n  ".join(" ".join(group) for group in groups)  # one option a line
    inner = inner.replace("\0RANK\0", f'"${{{rank_var}}}"')
    return inner.replace("\0ADDR\0", f'"${{{host_var}}}:{deployment.init_port}"')


def render(deployment: Deployment) -> str:
    spec, leader = deployment.spec, deployment.leader
    slurm = spec.deployment["slurm"]
    rank_var = slurm["rank_env"]
    inner = _inner(deployment, rank_var, LEADER_VAR)
    task = "\nexec " + inner + "\n"
    n = deployment.nnodes
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={deployment.name}",
        f"#SBATCH --nodes={n}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={deployment.gpus_per_node}",
        "#SBATCH --exclusive",
        f"# Written by `accord launch --emit slurm` for {deployment.upstream} {deployment.release}: {n} node(s) x "
        f"{deployment.gpus_per_node} GPU(s), one task per node.",
        f"# Every node runs the command Accord resolved for it; only --node-rank differs (${rank_var}).",
        f"# Resolved config hash (node 0): {leader.config.hash[:16]}. Node 0 serves HTTP on port {deployment.port}.",
    ]
    lines += [f"# note: {line}" for line in deployment.notes]
    lines += [f"# warning: {line}" for line in deployment.warnings()]
    lines += ["set -euo pipefail", ""]
    if deployment.init_port is not None:
        lines += [f'{LEADER_VAR}="$(scontrol show hostnames "${slurm["nodelist_env"]}" | sed -n 1p)"',
                  f"export {LEADER_VAR}"]
    for name, value in sorted(leader.launch.env.items()):
        lines.append(f"export {name}={shlex.quote(str(value))}")
    lines += ["",
              f"# Single quotes on purpose: each node's own shell expands ${rank_var}.",
              "# shellcheck disable=SC2016",
              f"srun --nodes={n} --ntasks={n} --ntasks-per-node=1 --kill-on-bad-exit=1 \\",
              f"  bash -c {shlex.quote(task)}",
              ""]
    return "\n".join(lines)


HOSTS_VAR = "ACCORD_HOSTS"  # the script's own array: the job's hosts, node 0 first


def _role_var(role: str, what: str) -> str:
    return f"ACCORD_{role.upper()}_{what}"


def render_pd(pd) -> str:
    """A disaggregated deployment as one batch job: the first nodes of the job run the first role's
    server (prefill), the next ones the second's (decode), each as a job step of one task per node
    with its own rank (the step's task index); the router runs on the batch host, with each role's
    node 0 as that role's URL. The job ends when the first of them ends."""
    slurm = pd.spec.deployment["slurm"]
    rank_var = slurm["step_rank_env"]
    gpus = max(dep.gpus_per_node for _, dep in pd.roles)  # the job asks every node for the most
    lines = _pd_header(pd, rank_var, gpus) + _pd_role_comments(pd, gpus)
    router = pd.spec.disaggregation["router"]
    lines += [f"# Clients send requests to the router: this script's host (job node 0), port {router['port']}.",
              "set -euo pipefail", "",
              f'mapfile -t {HOSTS_VAR} < <(scontrol show hostnames "${slurm["nodelist_env"]}")']
    lines += _pd_role_hosts(pd)
    for role, dep in pd.roles:
        lines += _pd_server_step(role, dep, rank_var)
    lines += ["",
              "# the router, on this host",
              _pd_router_command(pd) + " &",
              "",
              "# the job ends when the first of the servers or the router ends (Slurm stops the others)",
              "wait -n",
              ""]
    return "\n".join(lines)


def _pd_first_nodes(pd) -> list[tuple[str, Deployment, int]]:
    """Each role with the index of its first job node: the roles take the job's nodes in turn."""
    placed, start = [], 0
    for role, dep in pd.roles:
        placed.append((role, dep, start))
        start += dep.nnodes
    return placed


def _pd_header(pd, rank_var: str, gpus: int) -> list[str]:
    """The #SBATCH lines (every role's nodes, the most GPUs any role uses) and what the script is."""
    total = sum(dep.nnodes for _, dep in pd.roles)
    first = pd.roles[0][1]
    return [
        "#!/bin/bash",
        f"#SBATCH --job-name={pd.name}",
        f"#SBATCH --nodes={total}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus}",
        "#SBATCH --exclusive",
        f"# Written by `accord launch --emit slurm --prefill ... --decode ...` for {first.upstream} {first.release}: "
        f"a prefill/decode disaggregated deployment on {total} node(s), one job step per server and the router.",
        f"# Every node runs the command Accord resolved for it; only --node-rank differs (${rank_var}, the "
        f"task's index in its server's step).",
        "# Both servers were resolved together: model, page size, KV dtype and transfer backend agree.",
    ]


def _pd_role_comments(pd, gpus: int) -> list[str]:
    """Per role: its job nodes, GPUs, port and config hash, then its notes and warnings."""
    lines = []
    for role, dep, start in _pd_first_nodes(pd):
        lines.append(f"# {role}: job nodes {start}..{start + dep.nnodes - 1}, {dep.gpus_per_node} GPU(s) each, "
                     f"HTTP port {dep.port}; resolved config hash (node 0) {dep.leader.config.hash[:16]}")
        if dep.gpus_per_node < gpus:
            lines.append(f"# {role} note: uses {dep.gpus_per_node} of the {gpus} GPUs the job asks for per node")
        lines += [f"# {role} note: {line}" for line in dep.notes]
        lines += [f"# {role} warning: {line}" for line in dep.warnings()]
    return lines


def _pd_role_hosts(pd) -> list[str]:
    """Per role: its slice of the job's hosts (for srun --nodelist) and its node 0 (exported, for
    the rendezvous and the router's URL)."""
    lines = []
    for role, dep, start in _pd_first_nodes(pd):
        nodes_var, host_var = _role_var(role, "NODES"), _role_var(role, "HOST")
        lines += [f'{nodes_var}="$(IFS=,; echo "${{{HOSTS_VAR}[*]:{start}:{dep.nnodes}}}")"',
                  f'{host_var}="${{{HOSTS_VAR}[{start}]}}"',
                  f"export {host_var}"]
    return lines


def _pd_server_step(role: str, dep: Deployment, rank_var: str) -> list[str]:
    """One role's server as a background srun step on its own nodes, its environment set in the task."""
    env = "".join(f"export {name}={shlex.quote(str(value))}\n" for name, value in sorted(dep.leader.launch.env.items()))
    task = "\n" + env + "exec " + _inner(dep, rank_var, _role_var(role, "HOST")) + "\n"
    n = dep.nnodes
    return ["",
            f"# {role} server. Single quotes on purpose: each node's own shell expands ${rank_var}.",
            "# shellcheck disable=SC2016",
            f'srun --nodes={n} --ntasks={n} --ntasks-per-node=1 --nodelist="${{{_role_var(role, "NODES")}}}" '
            f"--kill-on-bad-exit=1 \\",
            f"  bash -c {shlex.quote(task)} &"]


def _pd_router_command(pd) -> str:
    """The router's command line, every word quoted as written except each role's URL, whose host
    this shell fills in from the role's node 0."""
    from accord.resolver.deploy.disagg import router_command

    marks = {role: f"\0{role}\0" for role, _ in pd.roles}
    words = []
    for word in router_command(pd.spec, pd.roles, marks):
        role = next((r for r in marks if marks[r] in word), None)
        if role is None:
            words.append(shlex.quote(word))
        else:  # a role's URL (http://HOST:PORT): double quotes, so this shell expands the host
            words.append('"' + word.replace(marks[role], f"${{{_role_var(role, 'HOST')}}}") + '"')
    return " ".join(words)
