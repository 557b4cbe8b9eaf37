"""The argparse actions behind every catalog spelling, and what they collect during one parse.

argparse would store each option into its namespace under its dest, with no record of the spelling
used, of a value given twice, or of the warnings a value produced. These actions store instead into
one `Collected` kept on the namespace (under `STATE`): the typed value by the flag's name, the
spelling it came from, the value alias typed, and warnings in order. That keeps the command's own
options (in the namespace) apart from the catalog flags (the solver's constraints).
"""

from __future__ import annotations

import argparse
from typing import Any

from accord.resolver.commandline.flagspellings import retired_message
from accord.resolver.commandline.flagvalues import BadValue, convert_text, usage_error
from accord.resolver.language.catalog import Flag

STATE = "_accord_collected"  # the namespace attribute holding the parse's Collected


class Collected:
    """What the catalog actions saw during one parse: values by dest, and warnings in order.

    `extra_choices` are the plugin values the command declares with `--extend-choices`, read
    before parsing so they apply wherever on the line they are written.
    """

    def __init__(self, extra_choices: dict[str, tuple[str, ...]]) -> None:
        self.values: dict[str, Any] = {}
        self.spelled: dict[str, str] = {}
        self.aliased: dict[str, str] = {}  # dest -> the value alias typed for it (see alias_implies)
        self.warnings: list[str] = []
        self.extra_choices = extra_choices

    def store(self, dest: str, value: Any, warnings: list[str], spelling: str | None) -> None:
        """Keep the last value of a flag, as argparse does, but say so when it was given twice."""
        if dest in self.values:
            before = f"{self.spelled[dest]} {shown(self.values[dest])}"
            now = f"{spelling} {shown(value)}"
            self.warnings.append(f"{spelling or dest} is given twice ({before}, then {now}); the last one is used.")
        self.values[dest] = value
        self.spelled[dest] = spelling or dest
        self.warnings.extend(warnings)


def shown(value: Any) -> str:
    """A value as it is typed after its flag: a list space-separated, a switch's True as nothing."""
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "" if value is True else str(value)


# --------------------------------------------------------------------------------------------------
# argparse actions: each records into the Collected on the namespace, never into the namespace
# --------------------------------------------------------------------------------------------------


def _state(namespace: argparse.Namespace) -> Collected:
    return getattr(namespace, STATE)


class ValueAction(argparse.Action):
    """A spelling that takes a value (or a list of values) and stores it, converted, under a dest."""

    def __init__(self, option_strings, dest, *, flag: Flag, warning: str = "", **kwargs):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, **kwargs)
        self.flag = flag
        self.warning = warning

    def __call__(self, parser, namespace, values, option_string=None):
        flag = self.flag
        state = _state(namespace)
        if values is None:  # an optional value left out: the seed stores True (bools) or its const
            state.store(flag.name, True if flag.type == "bool" else flag.const, _listed(self.warning), option_string)
            return
        words = values if isinstance(values, list) else [values]
        converted, warnings = [], _listed(self.warning)
        extra = state.extra_choices.get(flag.name, ())
        for word in words:
            try:
                value, notes = convert_text(flag, word, extra)
            except BadValue as err:
                raise usage_error(option_string, word, err) from None
            converted.append(value)
            warnings.extend(notes)
        state.store(flag.name, converted if isinstance(values, list) else converted[0], warnings, option_string)
        state.aliased.pop(flag.name, None)
        if not isinstance(values, list) and values in dict(flag.value_aliases):
            state.aliased[flag.name] = values


class ConstAction(argparse.Action):
    """A switch (no value) that stores a fixed value: True, False for `--no-x`, or a mapped value."""

    def __init__(self, option_strings, dest, *, flag: Flag, value: Any, warning: str = "", **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.flag = flag
        self.value = value
        self.warning = warning

    def __call__(self, parser, namespace, values, option_string=None):
        _state(namespace).store(self.flag.name, self.value, _listed(self.warning), option_string)


class RetiredAction(argparse.Action):
    """A deprecated switch that no longer does anything: warns, or fails when the seed refuses it."""

    def __init__(self, option_strings, dest, *, flag: Flag, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.flag = flag

    def __call__(self, parser, namespace, values, option_string=None):
        _state(namespace).warnings.append(retired_message(self.flag, option_string))


def _listed(warning: str) -> list[str]:
    return [warning] if warning else []

