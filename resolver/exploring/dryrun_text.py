"""`accord resolve --dry-run` as text: a short view by default, every flag in full on request.

Why two views: on a GPU preset the dry run judges some forty backend-like flags, and printing every
exclusion with its reason and the derived values it read is about 700 lines. What a person looks
for first is what *this* machine and command rule out. So the default view keeps the flags with a
value ruled out (and those the user typed), and says each excluded value's rules by id, values
sharing the same rules on one line; `--all` prints every flag in full (`render`), and `--flag NAME`
prints the named flags in full whatever their set. `--json` is always complete: tools rely on it.
"""

from __future__ import annotations

from typing import Any, Collection

from accord.resolver.explaining.layout import terminal_width, wrap_hanging
from accord.resolver.explaining.report import describe_value
from accord.resolver.exploring.dryrun import Choice


def narrowed(choices: list[Choice], typed: Collection[str] = ()) -> list[Choice]:
    """The flags the short view keeps: something here rules a value out, or the user typed them."""
    return [c for c in choices if c.excluded or c.flag in typed]


def render_short(choices: list[Choice], typed: Collection[str] = (), columns: int | None = None) -> str:
    """The default view: a line saying what was left out and how to see it, then each kept flag
    with its chosen and legal values and, per excluded value, the ids of the rules that exclude it."""
    columns = columns or terminal_width()
    kept = narrowed(choices, typed)
    left = len(choices) - len(kept)
    head = (f"{len(kept)} of {len(choices)} backend-like flags: those with a value ruled out here"
            + (" or set on the command line" if any(c.flag in typed for c in choices) else "")
            + (f"; --all adds the other {left} (every value legal)" if left else "; --all")
            + " and prints each rule's reason, --flag NAME one flag in full")
    lines = wrap_hanging("# ", head, columns)
    groups = {c.flag: _by_rules(c.excluded) for c in kept}
    width = max((len(values) for rows in groups.values() for values, _ in rows), default=0)
    width = min(width, columns // 4)  # rule ids are short; a long list of values takes its own line
    for choice in kept:
        lines.extend(_heading(choice, columns))
        for values, rules in groups[choice.flag]:
            head = f"  excluded  {values:<{width}}  "
            if len(head) > 12 + width + 2:  # values wider than the column: the rules go below them
                lines.extend(wrap_hanging("  excluded  ", values, columns))
                head = " " * (12 + width + 2)
            lines.extend(wrap_hanging(head, ", ".join(rules), columns))
    return "\n".join(lines)


def _by_rules(excluded) -> list[tuple[str, tuple[str, ...]]]:
    """(values, rule ids) with the values excluded by the same rules joined, in first-seen order."""
    joined: dict[tuple[str, ...], list[Any]] = {}
    for value, rules in excluded:
        joined.setdefault(tuple(rid for rid, _ in rules), []).append(describe_value(value))
    return [(", ".join(values), rules) for rules, values in joined.items()]


def _heading(choice: Choice, columns: int) -> list[str]:
    """`flag = chosen   (source)` and the legal values, as both views print them."""
    return (wrap_hanging("", f"{choice.flag} = {describe_value(choice.chosen)}   ({choice.source})", columns)
            + wrap_hanging("  legal     ", ", ".join(describe_value(v) for v in choice.legal) or "(none)",
                           columns))


def render(choices: list[Choice], columns: int | None = None) -> str:
    """The full view: each flag's chosen value and its source, the legal values, and every excluded
    value with each rule's reason and the derived values it read; wrapped to `columns` (default:
    the terminal's width)."""
    columns = columns or terminal_width()
    lines = []
    width = max((len(describe_value(v)) for c in choices for v, _ in c.excluded), default=0)
    width = min(width, columns // 3)
    for choice in choices:
        lines.extend(_heading(choice, columns))
        for n, (value, rules) in enumerate(choice.excluded):
            head = f"  excluded  {describe_value(value):<{width}}  "
            if len(head) > 12 + width + 2:  # a value wider than the column: the rules go below it
                lines.append(head.rstrip())
                head = " " * (12 + width + 2)
            for i, (rid, reason) in enumerate(rules):
                lines.extend(wrap_hanging(head if i == 0 else " " * len(head), f"{rid}: {reason}", columns))
            for reading in choice.derived[n] if choice.derived else ():
                lines.extend(wrap_hanging(" " * len(head) + "derived  ", reading.line(), columns))
    return "\n".join(lines)
