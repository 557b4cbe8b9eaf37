"""Launch-time conflict reports, written like a short proof (in the spirit of PubGrub's reports).

    conflict 1 of 1
      you set   --tp-size 16
      machine   gpu.count=8
      rule      par.world_size.fits: requires `... <= gpu.count * nnodes`
      because   every rank needs its own GPU.
      so        no legal configuration.
      fix       --tp-size 8                      (what upstream does)
      fix       drop --tp-size

Color only on a terminal; the plain text is identical otherwise.
"""

from __future__ import annotations

from resolver.report import describe_value, flag_arg, rule_clause

_STYLE = {"bold": "\033[1m", "red": "\033[31m", "green": "\033[32m", "dim": "\033[2m", "off": "\033[0m"}


def _paint(text: str, style: str, color: bool) -> str:
    return f"{_STYLE[style]}{text}{_STYLE['off']}" if color else text


def render_conflict(err, color: bool = False) -> str:
    """Every conflict of a ConflictError as a proof, then its verified fixes."""
    from resolver.api import plan_for

    plan = plan_for(err.system)
    rules = plan.ruleset.by_id()
    lines = [_paint(f"error: no legal {err.system} configuration", "red", color)]
    for i, (conflict, fixes) in enumerate(zip(err.conflicts, err.fix_lines), 1):
        lines.append("")
        lines.append(_paint(f"conflict {i} of {len(err.conflicts)}", "bold", color))
        typed = " ".join(flag_arg(plan.catalog, n, err.user[n]) for n in conflict.flags)
        lines.append(f"  you set   {typed or '(nothing: the defaults themselves)'}")
        if conflict.facts:
            machine = ", ".join(f"{k}={describe_value(err.facts[k])}" for k in conflict.facts)
            lines.append(f"  machine   {machine}")
        for rid in conflict.rules:
            lines.append(f"  rule      {rid}: {rule_clause(rules[rid])}")
            lines.append(f"  because   {rules[rid].reason}")
        lines.append("  so        no legal configuration.")
        for fix, text in zip(conflict.fixes, fixes):
            note = _paint("  (what upstream does)", "dim", color) if fix.rule else ""
            lines.append(f"  fix       {_paint(text, 'green', color)}{note}")
        if not fixes:
            lines.append("  fix       none found by changing one flag; see the rules above.")
    return "\n".join(lines)
