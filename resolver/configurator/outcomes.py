"""One solve per launch, shared by the requests of one change on the configurator's page.

A change on the page asks for the configuration, then its choices (the dry run) or its proof: all
of them are answers of `accord resolve` for the same launch. Solving is the expensive part, so the
launch is solved once (`outcome_for`) and each answer is printed from that outcome by the CLI's own
printing functions (`from_outcome`), so the bytes are the ones `accord resolve` prints. Separate
from the request handling (`answers`) because this is the only state the server keeps.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import OrderedDict

from accord.resolver.configurator.captured_cli import CLI_LOCK
from accord.resolver.errors import EXIT_CONFLICT


class Outcome:
    """What `accord resolve` computes for one launch: its configuration or its conflict, and the
    JSON texts printed from it so far (the dry run's by the flags it judged)."""

    __slots__ = ("config", "conflict", "texts")

    def __init__(self, config=None, conflict=None):
        self.config, self.conflict, self.texts = config, conflict, {}

    def text(self, key, make) -> str:
        if key not in self.texts:
            self.texts[key] = make()
        return self.texts[key]


class Outcomes:
    """A bounded LRU of outcomes, keyed on the solver's exact inputs.

    A change on the page asks for the configuration, then its choices or its proof: all three come
    from one solve. The key is what the resolver reads (system, typed values and their sources,
    parse warnings, and the facts as loaded for this request, model folder included), so the same
    key gives the same bytes and an edited model or facts file is a new key, never a stale answer.
    The resolver is deterministic and the rules are compiled once per process, so nothing else
    can change an answer while the server runs.
    """

    def __init__(self, size: int = 64):
        self.size = size
        self._entries: OrderedDict[str, Outcome] = OrderedDict()

    def get(self, key: str, compute) -> Outcome:
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        outcome = self._entries[key] = compute()
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return outcome

    def forget(self) -> None:
        """Drop every outcome (the benchmark measures changes computed, not remembered)."""
        self._entries.clear()


OUTCOMES = Outcomes()


def from_outcome(endpoint: str, argv: list[str]) -> tuple[int, str, str] | None:
    """`accord resolve ...` for the resolve, dry-run and proof endpoints, printed by the CLI's own
    functions from the launch's shared outcome; None where the CLI itself must answer (bad usage,
    `--relax`, `--help`: rare, and their messages are the CLI's alone)."""
    from accord.resolver.errors import AccordError

    out, err = io.StringIO(), io.StringIO()
    with CLI_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = _print_answer(endpoint, argv)
        except (AccordError, SystemExit):
            return None
    return (code, out.getvalue(), err.getvalue()) if code is not None else None


def _print_answer(endpoint: str, argv: list[str]) -> int | None:
    """Print what `accord ARGV` prints (ARGV: `resolve ...`), as `accord.resolver.commands.resolve.main` does."""
    from accord.resolver.api import plan_for
    from accord.resolver.commands import resolve as command
    from accord.resolver.exploring.dryrun import judge, selected_flags

    opts, parsed, facts, outcome = outcome_for(argv[1:])
    if opts.relax:
        return None
    if endpoint == "dry-run":
        plan = plan_for(parsed.system)
        names = selected_flags(plan, opts.only, facts)  # a bad --flag is refused first, as by the CLI
    if outcome.conflict is not None and endpoint == "dry-run":
        return None  # the dry run may free a default the conflict is about (dryrun.py): the CLI answers
    if outcome.conflict is not None and opts.json:
        print(outcome.text("conflict", lambda: command.conflict_json(outcome.conflict, parsed)))
        return EXIT_CONFLICT
    if outcome.conflict is not None:
        return command.print_conflict(outcome.conflict, False, parsed.warnings, parsed)
    if endpoint == "dry-run":
        print(outcome.text(("dry-run", *names), lambda: command.dry_run_json(
            outcome.config, judge(plan, names, parsed.user, facts, outcome.config))))
    elif opts.json:
        print(outcome.text("config", lambda: command.config_json(outcome.config, parsed=parsed)))
    else:
        command.print_config(outcome.config, opts.all, parsed)
    return 0


def outcome_for(argv: list[str]):
    """(options, parsed flags, facts, outcome) of `accord resolve ARGV`, solved at most once per key.
    Call with `CLI_LOCK` held."""
    from accord.resolver.commands.resolve import resolve_command

    opts, parsed, facts = resolve_command(argv, "accord resolve")
    if opts.relax:  # the CLI answers `--relax` itself; nothing to share
        return opts, parsed, facts, None
    key = json.dumps([parsed.system, parsed.user, parsed.sources, parsed.warnings, facts],
                     sort_keys=True, default=repr)
    return opts, parsed, facts, OUTCOMES.get(key, lambda: _solve(parsed, facts))


def _solve(parsed, facts) -> Outcome:
    from accord.resolver.api import ConflictError, resolve

    try:
        return Outcome(config=resolve(parsed.system, parsed.user, facts, parsed.sources,
                                      warnings=parsed.warnings))
    except ConflictError as err:
        return Outcome(conflict=err)
