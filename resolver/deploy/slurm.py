"""A deployment as a Slurm batch script: `sbatch` allocates N nodes, `srun` starts one task per node.

Why this shape: srun gives every task its node's index (SLURM_NODEID), which is the rank, and the
job's node list names node 0 (`scontrol show hostnames` lists it first), which is the rendezvous host.
Each task runs the command Accord resolved for its node through `bash -c`, so the two variables are
read on the node that runs it; every other word is quoted as written. The script passes `bash -n`
(and shellcheck) and has no timestamps: same inputs, same bytes.
"""

from __future__ import annotations

import shlex

from accord.resolver.deploy.nodes import command_groups
from accord.resolver.deploy.plan import Deployment

LEADER_VAR = "ACCORD_NODE0_HOST"  # the script's own variable: node 0's host name


def render(deployment: Deployment) -> str:
    spec, leader = deployment.spec, deployment.leader
    slurm = spec.deployment["slurm"]
    rank_var = slurm["rank_env"]
    marks = {spec.name("rank"): "\0RANK\0"} if deployment.nnodes > 1 else {}
    if deployment.init_port is not None:
        marks[spec.name("init_addr")] = "\0ADDR\0"
    groups = command_groups(leader.launch, marks, shlex.quote)
    inner = " \\\n  ".join(" ".join(group) for group in groups)  # one option a line
    inner = inner.replace("\0RANK\0", f'"${{{rank_var}}}"')
    inner = inner.replace("\0ADDR\0", f'"${{{LEADER_VAR}}}:{deployment.init_port}"')
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
