"""`accord launch`: resolve a launch command, then start upstream SGLang exactly as resolved.

The command handed to upstream is written by `resolver.commandline.emit` so that upstream's own
parsing and resolution hold Accord's values (explicit options where upstream would decide otherwise
or from facts it probes, current spellings only, the environment variables upstream reads). A value
no upstream option can carry is named in a warning, never dropped silently.

Over several machines (`--nnodes N`): a node's rank is typed with --node-rank or read from the
scheduler's variable (resolver/deploy/nodes.py), `--dry-run --json` adds every node's command, and
`--emit commands|k8s|slurm` prints the whole deployment (resolver/deploy/) and starts nothing.

Exit codes: 0 started (the process becomes the launcher; with --dry-run, --emit or --emit-config, printed or
written), 2 bad usage, 3 no legal configuration (the usual conflict report), 127 launcher not found
(an executable missing from PATH, or a `python -m` launcher whose interpreter lacks the package).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.emit import Launch, check_launcher, emit, load_spec
from accord.resolver.commands.options import add_fact_options
from accord.resolver.commands.resolve import model_source_json, print_conflict, resolve_command
from accord.resolver.errors import UsageError

EXIT_LAUNCHER_MISSING = 127


def add_options(parser: argparse.ArgumentParser) -> None:
    add_fact_options(parser)
    parser.add_argument("--launcher", metavar="COMMAND",
                        help="the command that starts upstream, as one shell string (default: the "
                             "system's `launcher` in rules/<system>/upstream_launch.yaml)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the command and its environment instead of starting it")
    parser.add_argument("--json", action="store_true",
                        help='with --dry-run: print {"command", "env", "values", "warnings"} as JSON')
    parser.add_argument("--emit-config", metavar="FILE",
                        help="write the options as an upstream --config YAML file (whole or not at "
                             "all) and print the command that uses it, instead of starting it")
    add_deploy_options(parser)


def add_deploy_options(parser: argparse.ArgumentParser) -> None:
    """Options of deployments over several machines (resolver/deploy/)."""
    parser.add_argument("--emit", choices=EMIT_KINDS, metavar="{" + ",".join(EMIT_KINDS) + "}",
                        help="print the deployment and start nothing: `commands` (one shell line per "
                             "node), `k8s` (a LeaderWorkerSet and its leader's Service), `slurm` (an "
                             "sbatch script)")
    parser.add_argument("--name", metavar="NAME",
                        help="with --emit k8s|slurm: the deployment's name (a DNS label; default "
                             "<engine>-<model>, rules/deploy/<system>.yaml)")
    parser.add_argument("--image", metavar="IMAGE",
                        help="with --emit k8s: the container image (default: upstream's image of the "
                             "release, rules/deploy/<system>.yaml)")
    parser.add_argument("--prefill", metavar="FLAGS",
                        help="with --emit: the prefill server's own flags (one shell string) over the "
                             "common ones; with --decode, one disaggregated deployment and its router")
    parser.add_argument("--decode", metavar="FLAGS",
                        help="with --emit: the decode server's own flags (see --prefill)")


def main(argv: list[str]) -> int:
    opts, parsed, facts = resolve_command(argv, "accord launch", add_options)
    if opts.emit is not None:
        return emit_deployment(opts, parsed, facts)
    if opts.prefill is not None or opts.decode is not None:
        raise UsageError("--prefill and --decode describe a disaggregated deployment, which is printed, "
                         "not started: add --emit commands|k8s|slurm (each server is then started on its machines).")
    parsed = node_rank_from_environment(parsed)
    if opts.json and not opts.dry_run:
        raise UsageError("--json goes with --dry-run (a started server prints its own output); "
                         "add --dry-run, or drop --json.")
    launcher = check_launcher(shlex.split(opts.launcher)) if opts.launcher is not None else None
    try:
        config = resolve(parsed.system, parsed.user, facts, parsed.sources, warnings=parsed.warnings)
    except ConflictError as err:
        return print_conflict(err, opts.json, parsed=parsed)
    launch = emit(config, launcher)
    if opts.json:
        if opts.emit_config:
            config_file(launch, opts.emit_config)
        data = launch.to_dict()
        data["resolve_warnings"] = list(config.warnings)
        if parsed.user.get("model_path") is not None:
            data["model_source"] = model_source_json(parsed)
        try:
            nodes = every_node(parsed, facts, launcher, config)
        except ConflictError as err:
            return print_conflict(err, opts.json, parsed=parsed)
        if nodes is not None:
            data["nodes"] = nodes
            # this node's command is its entry's (which names its rank even where it is the default 0)
            data["command"] = nodes[int(config.values.get(_deploy_spec(parsed.system).name("rank")) or 0)]["command"]
        print(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))
        return 0
    for line in (*config.warnings, *launch.warnings):
        print(f"warning: {line}", file=sys.stderr)
    if opts.emit_config:
        print(config_file(launch, opts.emit_config))
        return 0
    if opts.dry_run:
        print(launch.shell())
        return 0
    return exec_launch(launch)


EMIT_KINDS = ("commands", "k8s", "slurm")


def _deploy_spec(system: str):
    """The system's deployment description (rules/deploy/), or None for a system without one."""
    from accord.resolver.deploy.spec import DEPLOY_DIR, load_deploy_spec
    return load_deploy_spec(system) if (DEPLOY_DIR / f"{system}.yaml").is_file() else None


def node_rank_from_environment(parsed):
    """For a launch over several nodes: the rank from Slurm's or LeaderWorkerSet's variable when none
    was typed (a typed rank that one contradicts is an error; resolver/deploy/nodes.py)."""
    spec = _deploy_spec(parsed.system)
    if spec is None:
        return parsed
    from accord.resolver.deploy.nodes import environment_rank
    return environment_rank(spec, parsed, os.environ)


def every_node(parsed, facts, launcher, config) -> list[dict] | None:
    """`nodes` of --dry-run --json: every node's command and environment, for a launch over several
    nodes (None for one node)."""
    spec = _deploy_spec(parsed.system)
    if spec is None or int(config.values.get(spec.name("nodes")) or 1) <= 1:
        return None
    from accord.resolver.deploy.nodes import node_launches, nodes_json
    nodes = node_launches(spec, parsed.system, parsed.user, facts, parsed.sources, parsed.warnings, launcher)
    return nodes_json(spec, nodes)


def emit_deployment(opts: argparse.Namespace, parsed, facts) -> int:
    """`--emit commands|k8s|slurm`: resolve every node and print the deployment; start nothing."""
    if opts.json or opts.emit_config:
        raise UsageError("--emit prints a deployment file of its own; drop "
                         f"{'--json' if opts.json else '--emit-config'} (or drop --emit for the one-node "
                         f"launch's JSON or --config file).")
    if opts.image and opts.emit != "k8s":
        raise UsageError(f"--image names the container image of --emit k8s; --emit {opts.emit} runs the "
                         f"launcher installed on the nodes. Drop --image, or give --launcher.")
    launcher = check_launcher(shlex.split(opts.launcher)) if opts.launcher is not None else None
    disaggregated = opts.prefill is not None or opts.decode is not None
    try:
        deployment = (_prepare_disaggregated(opts, parsed, facts, launcher) if disaggregated else
                      _prepare_nodes(opts, parsed, facts, launcher))
    except ConflictError as err:
        return print_conflict(err, False, parsed=parsed)
    sys.stdout.write(_render(opts.emit, disaggregated, deployment, opts.image))
    return 0


def _prepare_nodes(opts: argparse.Namespace, parsed, facts, launcher):
    """One server over its nodes: every node resolved (resolver/deploy/plan.py)."""
    from accord.resolver.deploy import plan
    return plan.prepare(parsed, facts, launcher, opts.name, for_scheduler=opts.emit != "commands")


def _prepare_disaggregated(opts: argparse.Namespace, parsed, facts, launcher):
    """`--prefill FLAGS --decode FLAGS`: both servers resolved and checked together
    (resolver/deploy/disagg.py), to be written with the router."""
    from accord.resolver.deploy import disagg
    texts = {role: text for role, text in (("prefill", opts.prefill), ("decode", opts.decode)) if text is not None}
    return disagg.prepare_pd(parsed, facts, texts, launcher, opts.name, for_scheduler=opts.emit != "commands")


def _render(emit: str, disaggregated: bool, deployment, image: str | None) -> str:
    """The deployment in the chosen form: node commands (with the router's line for a disaggregated
    one), Kubernetes objects, or one Slurm batch job."""
    from accord.resolver.deploy import disagg, k8s, shell, slurm
    if emit == "k8s":
        return k8s.render_pd(deployment, image) if disaggregated else k8s.render(deployment, image)
    if emit == "slurm":
        return slurm.render_pd(deployment) if disaggregated else slurm.render(deployment)
    return disagg.render_commands(deployment) if disaggregated else shell.render(deployment)


def config_file(launch: Launch, path: str) -> str:
    """Write the upstream --config YAML whole (a temporary file renamed over the target); return the
    shell line that starts upstream with it."""
    import yaml

    style = load_spec(launch.system).config_keys
    data, rest = launch.config_file(style)
    text = ("# upstream --config file written by `accord launch --emit-config`\n"
            + yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    tmp = f"{path}.accord-tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UsageError(f"cannot write --emit-config file {path}: {err.strerror}. Give a path in a "
                         f"folder you can write to.") from None
    assigns = [f"{name}={shlex.quote(value)}" for name, value in sorted(launch.env.items())]
    words = [*launch.launcher, "--config", path, *rest]
    return " ".join([*assigns, *(shlex.quote(w) for w in words)])


# Run by the launcher's own interpreter: exit 3 when it cannot find the top-level package. Only the
# package is looked up (never imported): finding `package.module` would import the package itself.
_FIND_PACKAGE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"
_PACKAGE_MISSING = 3


def python_module(command: list[str]) -> tuple[str, str] | None:
    """(interpreter, module) of a `python3 [options] -m package.module ...` launcher; None for any
    other launcher (an executable is found on PATH or not)."""
    if not command or not os.path.basename(command[0]).startswith("python") or "-m" not in command[1:]:
        return None
    at = command.index("-m", 1)
    if at + 1 >= len(command) or not all(word.startswith("-") for word in command[1:at]):
        return None
    return command[0], command[at + 1]


def missing_package(launch: Launch, env: dict[str, str]) -> str | None:
    """The top-level package a `python -m` launcher runs, when its interpreter cannot find it.

    Without this check the interpreter replaces `accord launch` and dies with its own
    ModuleNotFoundError and exit 1; the check costs one interpreter start (no import of the package)."""
    found = python_module(launch.command)
    if found is None:
        return None
    interpreter, module = found
    package = module.split(".")[0]
    try:
        probe = subprocess.run([interpreter, "-c", _FIND_PACKAGE, package], env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no interpreter (exec reports it) or no answer: let the launcher speak for itself
    return package if probe.returncode == _PACKAGE_MISSING else None


def exec_launch(launch: Launch) -> int:
    """Replace this process with the launcher (its environment: ours plus the launch's)."""
    env = dict(os.environ)
    env.update(launch.env)
    package = missing_package(launch, env)
    if package is not None:
        interpreter, module = python_module(launch.command)
        print(f"accord launch: {interpreter} cannot import {package}, so `{' '.join(launch.launcher)}` "
              f"cannot start: upstream is not installed for that interpreter. Install it there "
              f"(`{interpreter} -m pip install {package}`), or give the command that starts it with "
              f"--launcher, e.g. --launcher \"/path/to/venv/bin/python -m {module}\"; "
              f"`accord launch --dry-run` prints the command without starting anything.",
              file=sys.stderr)
        return EXIT_LAUNCHER_MISSING
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(launch.command[0], launch.command, env)
    except FileNotFoundError:
        print(f"accord launch: launcher {launch.command[0]!r} not found on PATH; install upstream "
              f"SGLang or give the command with --launcher.", file=sys.stderr)
        return EXIT_LAUNCHER_MISSING
    except PermissionError:
        print(f"accord launch: launcher {launch.command[0]!r} is not executable; give a runnable "
              f"command with --launcher.", file=sys.stderr)
        return EXIT_LAUNCHER_MISSING
    return 0  # not reached: execvpe only returns by raising
