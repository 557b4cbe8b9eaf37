"""The conflict report: one structure, printed as JSON for tools or as a short proof for people.

`build` turns a failed resolve into plain data: per conflict what the user set, the machine, each
rule with the values it read and why it exists, the verified fixes (each with the changes it makes
and the whole command with only that change), the chains a drop leads into, and one combined fix
for all conflicts. `render` prints that same structure, wrapped to the terminal width, so the text
and `--json` can never tell different stories.

    error: no legal llm configuration (1 conflict)

    conflict 1 of 1
      you set   --tp-size 16
      machine   gpu.count=8, platform=cuda
      rule      par.world_size.fits_gpus requires `... <= gpu.count * nnodes` when `platform != 'cpu'`
      reads     gpu.count = 8, ... (every name the condition read, with its value)
      derived   sm100 = false because gpu.sm = 90, platform = cuda   (each derived value it read)
      because   Each rank needs its own GPU ...
      so        no legal configuration includes --tp-size 16 on this machine.
      fix       --tp-size 8
      command   --tp-size 8
      fix       --dist-init-addr HOST:PORT; --nnodes 2  (what upstream does)
      fill in   HOST:PORT in --dist-init-addr: ...
      command   --tp-size 16 --dist-init-addr HOST:PORT --nnodes 2

A fix whose hint carries a `note` (a slower way out, say) shows it beside the fix:

      fix       --tp-size 8; --cpu-offload-gb 14  (the rule's own fix; slower: weights stream ...)
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Mapping

from accord.resolver.explaining import layout
from accord.resolver.explaining.diagnose import combined_fix, drop_chains
from accord.resolver.explaining.explain import derived_readings
from accord.resolver.explaining.fixes import Fix, combine
from accord.resolver.explaining.report import (
    conflict_message,
    describe_value,
    fix_text,
    flag_arg,
    names_read,
    rule_clause,
)
from accord.resolver.language.catalog import Catalog
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.solving.solve import Env, Plan

_STYLE = {"bold": "\033[1m", "red": "\033[31m", "green": "\033[32m", "off": "\033[0m"}
LABEL = 12  # "  because   ": the width of the label column


def flag_argv(catalog: Catalog, name: str, value: Any) -> list[str]:
    """The words that set `name` to `value` on a command line ([] when the value means "omit")."""
    flag = catalog[name]
    if flag.type == "bool" and not flag.value_optional:
        if value:
            return [flag.primary]
        return [flag.negated[0]] if flag.negated else []
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [flag.primary, *(_word(v) for v in value)]
    if isinstance(value, dict):
        return [flag.primary, json.dumps(value, sort_keys=True)]
    return [flag.primary, _word(value)]


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def command_argv(catalog: Catalog, user: Mapping[str, Any], fixes: list[Fix] = ()) -> list[str]:
    """The user's flags with `fixes` applied, in the user's order (added flags last), as argv."""
    values = dict(user)
    for fix in fixes:
        values = fix.apply(values)
    return [word for name, value in values.items() for word in flag_argv(catalog, name, value)]


def changes(user: Mapping[str, Any], fix: Fix, rule: str | None) -> list[dict]:
    """What a fix does, flag by flag: `{"flag", "from", "to", "rule"}` (null: unset); `rule` is the
    rule the change answers (the hint's own rule, else the conflict's first)."""
    rule = fix.rule or rule
    out = [{"flag": name, "from": user.get(name), "to": value, "rule": rule} for name, value in fix.changes]
    out += [{"flag": name, "from": user.get(name), "to": None, "rule": rule} for name in fix.drops]
    return out


def _fix_entry(catalog: Catalog, user: Mapping[str, Any], fix: Fix, rule: str | None,
               command: Mapping[str, Any]) -> dict:
    values = dict(fix.changes)
    return {"text": fix_text(catalog, fix), "upstream": bool(fix.rule), "note": fix.note,
            "changes": changes(user, fix, rule),
            "command": command_argv(catalog, command, [fix]),
            "fill_in": [{"flag": name, "spelling": catalog[name].primary, "value": values[name], "what": what}
                        for name, what in fix.fill_in]}


def build(plan: Plan, user: Mapping[str, Any], facts: Mapping[str, Any], conflicts: list,
          command: Mapping[str, Any] | None = None) -> dict:
    """The whole report as JSON-ready data (sorted lists, no timestamps: same input, same bytes).

    `command` is the launch as typed, when it holds more than `user` (a typed auto choice such as
    `--moe-runner-backend auto` pins nothing, so the solver never sees it): each fix's command is
    that launch with the fix applied, so nothing the user typed goes missing from it."""
    catalog, rules = plan.catalog, plan.ruleset.by_id()
    command = user if command is None else command
    entries = []
    for conflict in conflicts:
        typed = " ".join(flag_arg(catalog, n, user[n]) for n in conflict.typed())
        others = {n for c in conflicts if c is not conflict for n in c.flags}
        isolated = {k: v for k, v in user.items() if k not in others}
        # The proof reads values in the conflict's own launch: without the other conflicts' flags,
        # whose values it does not depend on (a default coming back is what this conflict is about).
        value_of = _value_of(plan, isolated, facts)
        env = Env(plan, isolated, facts, {})
        chains = drop_chains(plan, isolated, facts, list(conflict.typed()), list(conflict.fixes))
        entries.append({
            "flags": list(conflict.typed()), "rules": list(conflict.rules), "facts": list(conflict.facts),
            "message": conflict_message(catalog, rules, facts, user, conflict),
            "fixes": [fix_text(catalog, f) for f in conflict.fixes],
            "you_set": typed,
            "machine": ", ".join(f"{k}={describe_value(facts[k])}" for k in conflict.facts if not k.startswith("model.")),
            "model": _model_row(conflict.facts, facts, user),
            "proof": [{"rule": rid, "clause": rule_clause(rules[rid]),
                       "reads": names_read(rules[rid], isolated, facts, value_of),
                       "derived": [r.line() for r in derived_readings(plan, (rules[rid].when, rules[rid].require), env)],
                       "because": rules[rid].reason}
                      for rid in conflict.rules],
            "conclusion": _conclusion(typed, bool(conflict.facts)),
            "fix_details": [_fix_entry(catalog, user, f, conflict.rules[0], command) for f in conflict.fixes],
            "chains": [_chain_entry(plan, user, chain, conflict.rules[0], command) for chain in chains],
        })
    parts = combined_fix(plan, user, facts, conflicts)
    fix_all = None if parts is None else {
        **_fix_entry(catalog, user, combine([fix for fix, _ in parts]), None, command), "upstream": False,
        "changes": [c for fix, conflict in parts for c in changes(user, fix, conflict.rules[0])]}
    return {"error": "conflict", "system": catalog.system, "conflicts": entries, "fix_all": fix_all}


def _chain_entry(plan: Plan, user: Mapping[str, Any], chain, rule: str, command: Mapping[str, Any]) -> dict:
    catalog, rules = plan.catalog, plan.ruleset.by_id()
    because = "; and ".join(f"rule {rid}: {rules[rid].reason.rstrip('.')}" for rid in chain.rules)
    shown = " ".join(flag_arg(catalog, n, user[n]) for n in chain.flags)
    text = (f"dropping {catalog[chain.dropped].primary} still fails because "
            f"{because}{f' (with {shown})' if shown else ''}.")
    return {"dropped": chain.dropped, "rules": list(chain.rules), "flags": list(chain.flags), "text": text,
            "then": None if chain.then is None else _fix_entry(catalog, user, chain.then, rule, command)}


def _value_of(plan: Plan, user, facts):
    """What an unset flag stands for under the user's flags: its default or derived value."""
    env = Env(plan, user, facts, {})

    def value(name: str) -> Any:
        try:
            return env.flag(name)
        except UnknownFact as missing:
            return f"unknown (needs {missing.key})"
    return value


def _model_row(names, facts: Mapping[str, Any], user: Mapping[str, Any]) -> str:
    """The model facts a conflict rests on, apart from the machine's. Without --model-path they are
    the built-in placeholder model's, which is said, so they are never taken for the served model."""
    row = ", ".join(f"{k}={describe_value(facts[k])}" for k in names if k.startswith("model."))
    if row and user.get("model_path") is None:
        row += " (no --model-path: Accord's built-in placeholder model; give --model-path for yours)"
    return row


def _conclusion(typed: str, machine: bool) -> str:
    if not typed:
        return "the defaults are not legal here; set one of the flags the rules name."
    return f"no legal configuration includes {typed}{' on this machine' if machine else ''}."


# -- text --------------------------------------------------------------------------------------------

def _paint(text: str, style: str, color: bool) -> str:
    return f"{_STYLE[style]}{text}{_STYLE['off']}" if color and text else text


def _row(label: str, text: str, width: int, style: str | None = None, color: bool = False) -> list[str]:
    """`  label     text`, the text wrapped beside the label column."""
    head = f"  {label:<{LABEL - 2}}"
    lines = layout.wrap_hanging(head, text, width)
    if style is None:
        return lines
    return [line[:LABEL] + _paint(line[LABEL:], style, color) for line in lines]


def command_lines(label: str, argv: list[str], width: int) -> list[str]:
    """A command as shell lines that fit `width`: words are never split, and every line but the
    last ends with ` \\`, so the whole block pastes into a shell as one command."""
    words = [shlex.quote(w) for w in argv] or ["(no flags)"]
    head = f"  {label:<{LABEL - 2}}"
    room = max(20, width - LABEL - 2)
    lines, current = [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > room:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    pad = " " * LABEL
    return [(head if i == 0 else pad) + line + (" \\" if i < len(lines) - 1 else "")
            for i, line in enumerate(lines)]


def _fix_rows(fix: dict, width: int, color: bool, note: str = "") -> list[str]:
    said = "; ".join(filter(None, ["the rule's own fix" if fix["upstream"] else "", fix.get("note", "")]))
    text = fix["text"] + (f"  ({said})" if said else "") + note
    out = _row("fix", text, width, "green", color)
    for item in fix["fill_in"]:
        what = f"replace {item['value']} in {item['spelling']}: {item['what']}"
        out += _row("fill in", what, width)
    return out + command_lines("command", fix["command"], width)


def render(report: Mapping[str, Any], width: int | None = None, color: bool = False) -> str:
    """The report as a proof per conflict, then the combined fix (several conflicts)."""
    width = width or layout.terminal_width()
    count = len(report["conflicts"])
    lines = [_paint(f"error: no legal {report['system']} configuration "
                    f"({count} conflict{'s' if count != 1 else ''})", "red", color)]
    if count > 1:
        lines += layout.wrap("Each command below changes only its own fix, so the other conflicts still "
                             "stand; the combined fix at the end resolves them all.", width)
    for i, conflict in enumerate(report["conflicts"], 1):
        lines += ["", _paint(f"conflict {i} of {count}", "bold", color)]
        lines += _row("you set", conflict["you_set"] or "(nothing: the defaults themselves)", width)
        if conflict["machine"]:
            lines += _row("machine", conflict["machine"], width)
        if conflict.get("model"):
            lines += _row("model", conflict["model"], width)
        for step in conflict["proof"]:
            lines += _row("rule", f"{step['rule']} {step['clause']}", width)
            if step["reads"]:
                lines += _row("reads", step["reads"], width)
            for line in step["derived"]:
                lines += _row("derived", line, width)
            lines += _row("because", step["because"], width)
        lines += _row("so", conflict["conclusion"], width)
        for chain in conflict["chains"]:
            lines += _row("chain", chain["text"], width)
        for fix in conflict["fix_details"]:
            lines += _fix_rows(fix, width, color)
        for chain in conflict["chains"]:
            if chain["then"] is not None:
                lines += _fix_rows(chain["then"], width, color, "  (both steps of the chain)")
        if not conflict["fix_details"]:
            lines += _row("fix", "none found by changing one flag; see the rules above.", width)
    if count > 1:
        lines += ["", _paint(f"combined fix (all {count} conflicts)", "bold", color)]
        if report["fix_all"] is None:
            lines += _row("fix", "none found; fix the conflicts one at a time.", width)
        else:
            lines += _fix_rows(report["fix_all"], width, color)
    return "\n".join(lines)
