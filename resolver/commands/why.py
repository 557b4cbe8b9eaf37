"""`accord why FLAG [FLAG...] [launch flags]`: a value and the chain of rules and facts behind it.

    $ accord why chunked_prefill_size --facts h100 --tp 8
    chunked_prefill_size = 8192   (rule mem.chunked_prefill.tier)
      because gpu.mem_gib >= 60: the H100 tier ...
      reads fact gpu.mem_gib = 80
      derived big_gpu = true because gpu.mem_gib = 80    (a derived value the rule reads)
      reads tp_size = 8            (you set it)
"""

from __future__ import annotations

import json
import textwrap

from accord.resolver import api
from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import detect_system
from accord.resolver.commands.resolve import print_conflict, resolve_command
from accord.resolver.errors import UsageError
from accord.resolver.explaining.explain import derived_readings
from accord.resolver.explaining.layout import terminal_width
from accord.resolver.explaining.report import describe_value
from accord.resolver.frozen import thaw
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.solving.solve import Env

MAX_DEPTH = 3


NOT_REPORTED = "retired, or deprecated and not set: not part of the resolved values"


def _env(config, plan) -> Env:
    """The resolved launch as an environment, to evaluate the derived values a rule read."""
    user = {k: v for k, v in config.values.items() if config.provenance[k]["source"] == "user"}
    return Env(plan, user, config.facts, config.values)


def _deciding_candidate(rule, value, env: Env) -> str | None:
    """The condition of the `prefer` candidate that gave `value` (None: unconditional or not prefer).

    Several candidates of one rule may offer the same value under different conditions (one
    backend for one model family on a GPU, the same backend for any model there), so the one that
    gave it is the first whose
    condition holds in the resolved launch, as `Plan.candidates` tries them, not the first that
    merely names the value."""
    for candidate in rule.values:
        if candidate.value != value:
            continue
        if candidate.when is None:
            return None
        try:
            fired = bool(candidate.when(env))
        except UnknownFact:
            continue  # the solver skips a candidate that reads an unknown fact
        if fired:
            return " ".join(candidate.when.source.split())
    return None


def _explain(config, plan, name: str, depth: int, seen: set[str], lines: list[str]) -> None:
    indent = "  " * depth
    if name not in config.values:
        lines.append(f"{indent}{name}: {NOT_REPORTED}")
        return
    prov = config.provenance[name]
    source = {"user": f"you set it ({prov.get('via', 'cli')})", "default": "catalog default",
              "relax": f"changed by --relax, rule {prov.get('rule')}"}.get(prov["source"], f"rule {prov.get('rule')}")
    lines.append(f"{indent}{name} = {describe_value(config.values[name])}   ({source})")
    if prov["source"] != "rule" or name in seen or depth >= MAX_DEPTH:
        return
    seen.add(name)
    rule = plan.ruleset.by_id()[prov["rule"]]
    condition = f"when {rule.when.source}" if rule.when is not None else "always"
    lines.append(f"{indent}  {rule.kind} rule, {condition}: {rule.reason}")
    chosen = _deciding_candidate(rule, config.values[name], _env(config, plan))
    if chosen is not None:
        lines.append(f"{indent}  chose {describe_value(config.values[name])} when {chosen}")
    for key in sorted(rule.reads_facts):
        value = config.facts.get(key, "unknown")
        lines.append(f"{indent}  reads fact {key} = {describe_value(value)}")
    for reading in derived_readings(plan, rule.expressions(), _env(config, plan)):
        lines.append(f"{indent}  derived {reading.line()}")
    for flag in sorted(rule.reads_flags - {name}):
        _explain(config, plan, flag, depth + 1, seen, lines)


def _explain_data(config, plan, name: str, depth: int, seen: set[str]) -> dict:
    """The same chain as `_explain`, as data for `--json`: value, provenance, rule, facts, reads."""
    if name not in config.values:
        return {"flag": name, "value": None, "provenance": {"source": "deprecated"}}
    prov = config.provenance[name]
    node = {"flag": name, "value": config.values[name], "provenance": dict(prov)}
    if prov["source"] != "rule" or name in seen or depth >= MAX_DEPTH:
        return node
    seen.add(name)
    rule = plan.ruleset.by_id()[prov["rule"]]
    node["rule"] = {"id": rule.id, "kind": rule.kind, "reason": rule.reason,
                    "when": rule.when.source if rule.when is not None else None,
                    "chosen_when": _deciding_candidate(rule, config.values[name], _env(config, plan))}
    node["facts"] = {key: config.facts[key] for key in sorted(rule.reads_facts) if key in config.facts}
    node["unknown_facts"] = sorted(key for key in rule.reads_facts if key not in config.facts)
    node["derived"] = [r.to_dict() for r in derived_readings(plan, rule.expressions(), _env(config, plan))]
    node["reads"] = [_explain_data(config, plan, flag, depth + 1, seen)
                     for flag in sorted(rule.reads_flags - {name})]
    return node


USAGE = """usage: accord why FLAG [FLAG ...] [--facts PRESET] [--json] [launch flags ...]

Show the value of each FLAG for this launch and the chain of rules and facts behind it. FLAG is a
flag name or any spelling of it (dest, dashed, --dashed) or a short form.
The launch flags are those of `accord resolve` (see `accord resolve --help`)."""


def _target(word: str, catalog) -> str:
    """The flag a word names: its dest, or any spelling with or without dashes, or a short form;
    unknown words are returned as dests."""
    bare = word.lstrip("-")
    if bare.replace("-", "_") in catalog:
        return bare.replace("-", "_")
    wanted = {"--" + bare, "--" + bare.replace("_", "-"), "-" + bare}
    for flag in catalog:
        if wanted & set(flag.option_strings):
            return flag.name
    return bare.replace("-", "_")


def main(argv: list[str]) -> int:
    argv = list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    catalog = api.plan_for(detect_system(argv)).catalog
    words = []
    while argv and not argv[0].startswith("-"):
        words.append(argv.pop(0))
    if not words and argv and _target(argv[0], catalog) in catalog:
        words.append(argv.pop(0))  # `accord why --page-size ...`: the flag itself, as spelled
    if not words:
        raise UsageError("name the flag to explain first, e.g. `accord why attention_backend --facts h100 --tp 8`.")
    opts, parsed, facts = resolve_command(argv, "accord why")
    plan = api.plan_for(parsed.system)
    targets = [_target(word, plan.catalog) for word in words]
    unknown = [t for t in targets if t not in plan.catalog]
    if unknown:
        import difflib
        hints = [difflib.get_close_matches(t, plan.catalog.flags, n=1) for t in unknown]
        suggestions = "".join(f"; did you mean {h[0]}?" for h in hints if h) or "."
        raise UsageError(f"unknown {parsed.system} flag(s) {unknown}{suggestions} "
                         f"See `accord flags --system {parsed.system}`.")
    try:
        config = resolve(parsed.system, parsed.user, facts, parsed.sources, relax=opts.relax)
    except ConflictError as err:
        return print_conflict(err, opts.json, parsed.warnings, parsed)
    if opts.json:
        seen: set[str] = set()
        chains = [_explain_data(config, plan, target, 0, seen) for target in targets]
        # A dict flag's value is frozen (a mappingproxy): written as the object it was made from.
        print(json.dumps({"system": config.system, "hash": config.hash, "flags": chains},
                         indent=2, sort_keys=True, default=thaw))
        return 0
    lines: list[str] = []
    for target in targets:
        _explain(config, plan, target, 0, set(), lines)
    print("\n".join(wrapped(lines, terminal_width())))
    return 0


def wrapped(lines: list[str], width: int) -> list[str]:
    """Each line wrapped to `width`, its continuation indented 4 past the line's own indent (a
    rule's condition and the branch that fired stay readable on a narrow terminal)."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(line.lstrip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                             break_long_words=False, break_on_hyphens=False) or [line]
    return out
