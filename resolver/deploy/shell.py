"""A deployment as plain shell lines, one per node, for operators who start the nodes themselves.

Why: without a scheduler the operator runs each node's command by hand (or from their own tooling);
each line is exactly what Accord resolved for that node. When no rendezvous address was typed the
lines carry the `HOST` placeholder and a `fill in` comment saying what goes there.
"""

from __future__ import annotations

import shlex

from accord.resolver.deploy.nodes import HOST_PLACEHOLDER, flag_spelling
from accord.resolver.deploy.plan import Deployment


def render(deployment: Deployment) -> str:
    spec = deployment.spec
    lines = [f"# Written by `accord launch --emit commands` for {deployment.upstream} {deployment.release}: "
             f"{deployment.nnodes} node(s) x {deployment.gpus_per_node} GPU(s); run line N on node N."]
    init = deployment.leader.config.values.get(spec.name("init_addr"))
    if deployment.nnodes > 1 and str(init).startswith(f"{HOST_PLACEHOLDER}:"):
        lines.append(f"# fill in: {HOST_PLACEHOLDER} in {flag_spelling(spec, 'init_addr')} is node 0's address, "
                     f"reachable from every node (e.g. 10.0.0.1)")
    lines += [f"# note: {line}" for line in deployment.notes]
    lines += [f"# warning: {line}" for line in deployment.warnings()]
    for node in deployment.nodes:
        launch = node.launch
        assigns = [f"{name}={shlex.quote(value)}" for name, value in sorted(launch.env.items())]
        lines.append(f"# node {node.rank}")
        lines.append(" ".join([*assigns, *(shlex.quote(word) for word in launch.command)]))
    return "\n".join(lines) + "\n"
