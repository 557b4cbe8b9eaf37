"""Prefill/decode disaggregation as one deployment: two servers resolved together, and their router.

Why one deployment: a prefill server and a decode server hand KV caches to each other, so settings
that each server's own resolution is free to pick must agree across them (one model, one page
size, one KV dtype, one transfer backend), and the RDMA devices they are told to use must exist.
Upstream checks none of this across servers: a mismatch fails at the first transfer, or decodes
garbage. Here each role is resolved as its own launch (the common flags, the role's own flags and
the mode setting naming the role; multi-node roles go through resolver/deploy/plan.py like any
launch), then the cross-role rules of rules/deploy/<system>.yaml (`disaggregation:`) are checked,
and the router command that fronts the two is added.

Written three ways, each from the same resolution: plain commands (`render_commands`, placeholder
hosts), Kubernetes (resolver/deploy/k8s.py `render_pd`: one LeaderWorkerSet and leader Service per
role, the router as a Deployment and its Service, the router's URLs the roles' Service names) and
Slurm (resolver/deploy/slurm.py `render_pd`: one job whose first nodes run prefill and the rest
decode, the router on the batch host). Names: `<name>-prefill`, `<name>-decode`, `<name>-router`.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any, Mapping, Sequence

from accord.resolver.commandline.flagparse import ParsedFlags, parse_flags
from accord.resolver.deploy.plan import MAX_NAME, Deployment, check_name, default_name, prepare
from accord.resolver.deploy.spec import DeploySpec, load_deploy_spec
from accord.resolver.errors import EXIT_CONFLICT, AccordError, UsageError

ROLE_HOST = "{ROLE}_HOST"  # placeholder host of a role's node 0 in the router's URLs
ROUTER = "router"          # the router's part of a deployment's names (<name>-router)


class CrossRoleConflict(AccordError):
    """The roles resolve, each on its own, but not together: exit 3, as for a conflict."""

    exit_code = EXIT_CONFLICT


@dataclasses.dataclass(frozen=True)
class PDDeployment:
    spec: DeploySpec
    roles: tuple[tuple[str, Deployment], ...]   # (role, its deployment), in the spec's role order
    router: tuple[str, ...]                      # the router's command words (placeholder hosts)
    name: str                                    # the deployment's name; each role's is <name>-<role>

    def role(self, name: str) -> Deployment:
        return dict(self.roles)[name]


def role_flags(spec: DeploySpec, parsed: ParsedFlags, role: str, text: str) -> ParsedFlags:
    """The common flags with the role's own (`text`, one shell string) over them and the mode
    setting naming the role."""
    mode = spec.disaggregation["mode"]
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise UsageError(f"--{role} {text!r} is not a command line ({err}); quote it as one shell string, "
                         f"e.g. --{role} \"--tp-size 8\".") from None
    _, own = parse_flags(words, system=parsed.system, prog=f"accord launch --{role}")
    typed_mode = own.user.get(mode, parsed.user.get(mode))
    if typed_mode not in (None, role):
        raise UsageError(f"--{role} runs the {role} server, but its flags set the mode to {typed_mode!r}; "
                         f"drop that flag (the role sets it).")
    user = {**parsed.user, **own.user, mode: role}
    sources = {**parsed.sources, **own.sources, mode: "deploy"}
    return dataclasses.replace(parsed, user=user, sources=sources, warnings=(*parsed.warnings, *own.warnings))


def prepare_pd(parsed: ParsedFlags, facts: Mapping[str, Any], texts: Mapping[str, str],
               launcher: Sequence[str] | None = None, name: str | None = None,
               for_scheduler: bool = False) -> PDDeployment:
    """Resolve every role (`texts`: role -> its flags), check the cross-role rules, add the router."""
    spec = load_deploy_spec(parsed.system)
    pd = spec.disaggregation
    if not pd:
        raise UsageError(f"the {parsed.system} system has no prefill/decode description in "
                         f"rules/deploy/{parsed.system}.yaml; launch one server instead.")
    missing = [role for role in pd["roles"] if role not in texts]
    if missing:
        wanted = " ".join(f"--{r} FLAGS" for r in missing)
        raise UsageError(f"a disaggregated deployment needs every role: add {wanted} (an empty string "
                         f"for the common flags alone, e.g. --{missing[0]} '').")
    base = pd_name(spec, parsed, name)
    roles = []
    for role in pd["roles"]:
        flags = role_flags(spec, parsed, role, texts[role])
        roles.append((role, prepare(flags, facts, launcher, f"{base}-{role}", for_scheduler)))
    check_roles(spec, roles, facts)
    return PDDeployment(spec, tuple(roles), tuple(router_command(spec, roles)), base)


def pd_name(spec: DeploySpec, parsed: ParsedFlags, typed: str | None) -> str:
    """The deployment's name: the typed one, else <prefix>-<model>, short enough for the longest
    of `<name>-<role>` and `<name>-router` to be a usable deployment name."""
    longest = max(len(part) for part in (*spec.disaggregation["roles"], ROUTER)) + 1
    if typed is None:
        base = default_name(parsed.user.get(spec.name("model")), spec.deployment["name_prefix"])
        return base[:MAX_NAME - longest].rstrip("-")
    check_name(typed)
    if len(typed) > MAX_NAME - longest:
        raise UsageError(f"--name {typed!r} is too long for a disaggregated deployment: its parts are named "
                         f"<name>-{'|'.join((*spec.disaggregation['roles'], ROUTER))}, so the name has at most "
                         f"{MAX_NAME - longest} characters, e.g. --name llm-pd.")
    return typed


def check_roles(spec: DeploySpec, roles: Sequence[tuple[str, Deployment]], facts: Mapping[str, Any]) -> None:
    """The cross-role rules: the `same` settings agree, and typed RDMA devices exist (when the
    machine's devices are known). Raises CrossRoleConflict naming every broken rule."""
    pd = spec.disaggregation
    problems = []
    values = {role: dep.leader.config.values for role, dep in roles}
    first, *others = [role for role, _ in roles]
    for entry in pd.get("same") or ():
        setting = entry["setting"]
        seen = {role: values[role].get(setting) for role in values}
        if any(_plain(seen[r]) != _plain(seen[first]) for r in others):
            spelled = flag_spelling_of(spec, setting)
            problems.append(f"{spelled} resolves to " + " but ".join(f"{seen[r]!r} for {r}" for r in seen)
                            + f": {entry['why']}. Type one {spelled} in the common flags")
    known = facts.get(pd.get("ib_fact", ""))
    for role, vals in values.items():
        typed = vals.get(pd.get("ib_device", ""))
        if typed and isinstance(known, (list, tuple)):
            absent = [d for d in str(typed).split(",") if d.strip() and d.strip() not in known]
            if absent:
                problems.append(f"the {role} server is told to use RDMA device(s) {absent}, which this machine "
                                f"does not have ({pd['ib_fact']}: {', '.join(known) or 'none'}). Name devices it "
                                f"has, or drop {flag_spelling_of(spec, pd['ib_device'])}")
    if problems:
        raise CrossRoleConflict("the prefill and decode servers resolve, each on its own, but do not fit "
                                "together: " + "; ".join(problems) + ".")


def flag_spelling_of(spec: DeploySpec, setting: str) -> str:
    from accord.resolver.language.catalog import load_catalog
    return load_catalog(spec.system)[setting].primary


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def router_command(spec: DeploySpec, roles: Sequence[tuple[str, Deployment]],
                   hosts: Mapping[str, str] | None = None) -> list[str]:
    """`launch_router --pd-disaggregation --prefill URL BOOTSTRAP --decode URL --host --port`; each
    URL is the role's node 0: `hosts[role]` (a Service name, a shell variable) or a placeholder host
    the operator fills in."""
    pd = spec.disaggregation
    router = pd["router"]
    words = [*shlex.split(router["launcher"]), "--pd-disaggregation"]
    for role, dep in roles:
        host = (hosts or {}).get(role) or ROLE_HOST.format(ROLE=role.upper())
        url = f"http://{host}:{dep.port}"
        words += [f"--{role}", url]
        if role == pd["roles"][0]:
            words.append(str(dep.leader.config.values[pd["bootstrap_port"]]))
    words += ["--host", str(spec.deployment["host"]), "--port", str(router["port"])]
    return words


def router_launcher_length(spec: DeploySpec) -> int:
    """How many of the router's command words are its launcher (the rest are its arguments)."""
    return len(shlex.split(spec.disaggregation["router"]["launcher"]))


def bootstrap_port(pd: PDDeployment) -> int:
    """The port of the first role's (prefill's) bootstrap server, which the decode servers reach."""
    spec = pd.spec
    first = spec.disaggregation["roles"][0]
    return int(pd.role(first).leader.config.values[spec.disaggregation["bootstrap_port"]])


def render_commands(pd: PDDeployment) -> str:
    """Every role's node commands (resolver/deploy/shell.py), then the router's line."""
    from accord.resolver.deploy import shell

    out = []
    for role, dep in pd.roles:
        out.append(f"# ===== {role} server =====")
        out.append(shell.render(dep).rstrip("\n"))
    hosts = ", ".join(ROLE_HOST.format(ROLE=role.upper()) for role, _ in pd.roles)
    out += ["# ===== router =====",
            f"# fill in: {hosts}: the address of each server's node 0, reachable from the router",
            " ".join(shlex.quote(word) for word in pd.router)]
    return "\n".join(out) + "\n"

