"""Launch-time conflict reports, written like a short proof (in the spirit of PubGrub's reports).

    error: no legal llm configuration (1 conflict)

    conflict 1 of 1
      you set   --tp-size 16
      machine   gpu.count=8, platform=cuda
      rule      par.world_size.fits_gpus requires `... <= gpu.count * nnodes`
      reads     gpu.count = 8, nnodes = 1 (unset), ... (every name the condition read, with its value)
      derived   sm100 = false because gpu.sm = 90, platform = cuda   (each derived value it read)
      because   Each rank needs its own GPU ...
      so        no legal configuration includes --tp-size 16 on this machine.
      fix       --tp-size 8
      command   --tp-size 8 --attention-backend fa3
      fix       drop --tp-size
      command   --attention-backend fa3

Every fix was verified by the solver before it is offered; the `command` under it is the whole
launch (the user's flags, with that fix and the best fix of every other conflict applied) so it can
be pasted as is. Color only when asked for (a terminal); the words are the same either way.
"""

from __future__ import annotations

import os
from typing import IO, Any, Mapping

from resolver.report import describe_value, flag_arg, names_read, rule_clause

_STYLE = {"bold": "\033[1m", "red": "\033[31m", "green": "\033[32m", "dim": "\033[2m", "off": "\033[0m"}


def wants_color(stream: IO) -> bool:
    """Color for a terminal, unless NO_COLOR is set or the terminal is dumb."""
    return (hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb")


def _paint(text: str, style: str, color: bool) -> str:
    return f"{_STYLE[style]}{text}{_STYLE['off']}" if color else text


def command_line(catalog, user: Mapping[str, Any], fixes=()) -> str:
    """The user's flags with the fixes applied, as one pasteable command line (their order kept)."""
    values = dict(user)
    for fix in fixes:
        values = fix.apply(values)
    words = [flag_arg(catalog, name, value) for name, value in values.items()]
    return " ".join(w for w in words if not w.startswith("(omit")) or "(no flags)"


def render_conflict(err, color: bool = False) -> str:
    """Every conflict of a ConflictError as a proof, each followed by its verified fixes."""
    from resolver.api import plan_for

    plan = plan_for(err.system)
    rules = plan.ruleset.by_id()
    count = len(err.conflicts)
    lines = [_paint(f"error: no legal {err.system} configuration "
                    f"({count} conflict{'s' if count != 1 else ''})", "red", color)]
    for i, (conflict, fix_texts) in enumerate(zip(err.conflicts, err.fix_lines), 1):
        lines.append("")
        lines.append(_paint(f"conflict {i} of {count}", "bold", color))
        typed = " ".join(flag_arg(plan.catalog, n, err.user[n]) for n in conflict.flags)
        lines.append(f"  you set   {typed or '(nothing: the defaults themselves)'}")
        if conflict.facts:
            machine = ", ".join(f"{k}={describe_value(err.facts[k])}" for k in conflict.facts)
            lines.append(f"  machine   {machine}")
        for rid in conflict.rules:
            lines.append(f"  rule      {rid} {rule_clause(rules[rid])}")
            reads = names_read(rules[rid], err.user, err.facts, _value_of(plan, err))
            if reads:
                lines.append(f"  reads     {reads}")
            for reading in _derived(plan, err, rules[rid]):
                lines.append(f"  derived   {reading.line()}")
            lines.append(f"  because   {rules[rid].reason}")
        lines.append(f"  so        {_conclusion(typed, bool(conflict.facts))}")
        others = [c.fixes[0] for c in err.conflicts if c is not conflict and c.fixes]
        for fix, text in zip(conflict.fixes, fix_texts):
            note = _paint("  (what upstream does)", "dim", color) if fix.rule else ""
            lines.append(f"  fix       {_paint(text, 'green', color)}{note}")
            lines.append(f"  command   {_command_for(plan, err, fix, others)}")
        if not conflict.fixes:
            lines.append("  fix       none found by changing one flag; see the rules above.")
    return "\n".join(lines)


def _value_of(plan, err):
    """What an unset flag stands for under the user's flags: its default or derived value."""
    from resolver.expr import UnknownFact
    from resolver.solve import Env

    env = Env(plan, err.user, err.facts, {})

    def value(name: str) -> Any:
        try:
            return env.flag(name)
        except UnknownFact as missing:
            return f"unknown (needs {missing.key})"
    return value


def _derived(plan, err, rule) -> list:
    """The derived values the rule's condition read, with their values under the user's flags."""
    from resolver.explain import derived_readings
    from resolver.solve import Env

    return derived_readings(plan, (rule.when, rule.require), Env(plan, err.user, err.facts, {}))


def _conclusion(typed: str, machine: bool) -> str:
    if not typed:
        return "the defaults are not legal here; set one of the flags the rules name."
    return f"no legal configuration includes {typed}{' on this machine' if machine else ''}."


def _command_for(plan, err, fix, other_fixes: list) -> str:
    """The whole command with this fix, plus the best fix of every other conflict when that
    combination is legal too (so pasting it launches); otherwise with this fix alone."""
    if other_fixes:
        combined = [fix, *other_fixes]
        values = dict(err.user)
        for each in combined:
            values = each.apply(values)
        if plan.satisfiable(values, err.facts):
            return command_line(plan.catalog, err.user, combined)
        return command_line(plan.catalog, err.user, [fix]) + "   (fixes this conflict only)"
    return command_line(plan.catalog, err.user, [fix])
