"""A command's argparse parser: Accord's own options, the catalog flags it needs, the command's options.

Why a parser per command line: argparse builds one action per option, and a catalog holds five
hundred flags, so a parse registers only the catalog flags whose spellings appear on its command line
(`--help` lists them from the catalog itself, by group: `commandhelp`). Prefixes are written out in
full before parsing (`flagspellings`) and argparse's own abbreviation is off, so argparse's reading
of a word (option, value or unknown) does not depend on which other options exist: the answer is the
same as with the full parser. Parsers are cached by the flags they hold. argparse's own errors
become one-paragraph `UsageError`s here, and so do the words it could not place (an unknown flag,
with the nearest real spellings; a stray value).
"""

from __future__ import annotations

import argparse
import functools
import re
from typing import Any, Callable

from accord.resolver.commandline.commandhelp import HelpAction
from accord.resolver.commandline.flagactions import ConstAction, RetiredAction, ValueAction
from accord.resolver.commandline.flagspellings import (
    flag_warning,
    known_spellings,
    spelling_index,
    spelling_warning,
    suggest,
)
from accord.resolver.commandline.flagvalues import describe_expected
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS, Catalog, Flag, load_catalog

AddOptions = Callable[[argparse.ArgumentParser], None]

_SWITCH_GIVEN_VALUE = re.compile(r"argument (\S+): ignored explicit argument '(.*)'$")
_VALUE_MISSING = re.compile(r"argument (\S+): expected (?:one|at least one) argument$")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_METAVAR = {"int": "N", "float": "X", "str": "TEXT", "json": "JSON", "json_or_str": "VALUE", "bool": "BOOL"}


class CommandParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting (except for --help).

    argparse makes a help formatter for every option added to the parser itself, only to check its
    metavar; a formatter without a given width asks for the terminal's, which imports shutil (with
    bz2 and lzma), a tenth of a cold `accord resolve`. So the terminal width is read for help only.
    """

    _formatting_help = False

    def _get_formatter(self):
        if self._formatting_help:
            return super()._get_formatter()
        return self.formatter_class(prog=self.prog, width=80)

    def format_help(self) -> str:
        self._formatting_help = True
        try:
            return super().format_help()
        finally:
            self._formatting_help = False

    def format_usage(self) -> str:
        self._formatting_help = True
        try:
            return super().format_usage()
        finally:
            self._formatting_help = False

    def error(self, message: str):
        switch = _SWITCH_GIVEN_VALUE.match(message)
        if switch:
            name, value = switch.group(1).split("/")[0], switch.group(2)
            raise UsageError(f"unexpected value {value!r}: {name} is a switch and takes no value.")
        missing = _VALUE_MISSING.match(message)
        if missing:
            name = missing.group(1).split("/")[0]
            flag = getattr(self._option_string_actions.get(name), "flag", None)
            expected = f": {describe_expected(flag)}" if flag else ""
            raise UsageError(f"{name} needs a value{expected}.")
        raise UsageError(f"{message}. Run `{self.prog} --help` for usage.")


def _help(flag: Flag, extra: str = "") -> str:
    text = flag.help or ""
    if extra:
        text = f"{extra} {text}".strip()
    return text.replace("%", "%%")


def _metavar(flag: Flag) -> str:
    if flag.choices and len(flag.choices) <= 6:
        return "{" + ",".join(str(c) for c in flag.choices) + "}"
    kind = flag.element if flag.type == "list" else flag.type
    return "NAME" if flag.choices else _METAVAR.get(kind or "str", "VALUE")


def _value_kwargs(flag: Flag) -> dict[str, Any]:
    """argparse nargs for a value-taking spelling: the seed's, '+' for lists, '?' for StoreBoolean."""
    if flag.type == "list":
        return {"nargs": flag.nargs or "+"}
    if flag.type == "bool":
        return {"nargs": "?"}
    return {"nargs": flag.nargs} if flag.nargs else {}


def _add_flag(group: argparse._ArgumentGroup, flag: Flag) -> None:
    deprecated = flag.deprecated or {}
    current = flag.flags + flag.short_forms
    if current:
        if deprecated.get("ignored") or deprecated.get("removed"):
            group.add_argument(*current, action=RetiredAction, flag=flag, help=_help(flag, "(deprecated, ignored)"))
        else:
            warning = flag_warning(flag, current[0]) if deprecated else ""
            if flag.type == "bool" and not flag.value_optional:
                group.add_argument(
                    *current, action=ConstAction, flag=flag, value=True, warning=warning, help=_help(flag),
                )
            else:
                group.add_argument(
                    *current, action=ValueAction, flag=flag, warning=warning, metavar=_metavar(flag),
                    help=_help(flag), **_value_kwargs(flag),
                )
    if flag.negated:
        group.add_argument(*flag.negated, action=ConstAction, flag=flag, value=False, help=argparse.SUPPRESS)
    for spelling in flag.deprecated_spellings:
        warning = spelling_warning(flag, spelling, spelling.flag)
        if spelling.value is not None:
            group.add_argument(
                spelling.flag, action=ConstAction, flag=flag, value=spelling.value, warning=warning,
                help=argparse.SUPPRESS,
            )
        else:
            group.add_argument(
                spelling.flag, action=ValueAction, flag=flag, warning=warning, metavar=_metavar(flag),
                help=argparse.SUPPRESS, **_value_kwargs(flag),
            )


def _add_own_options(parser: CommandParser) -> None:
    """--system, --config and --extend-choices: Accord's own options, read by every command."""
    own = parser.add_argument_group("accord")
    own.add_argument("--system", metavar="{" + ",".join(SYSTEMS) + "}",
                     help="Which server's flags to use (default: inferred from --model-path, else llm).")
    own.add_argument("--config", metavar="FILE",
                     help="Read flags from a YAML or JSON file of flag: value pairs; the command line wins.")
    own.add_argument("--extend-choices", metavar="FLAG=VALUE", action="append", default=[],
                     help="Accept VALUE for FLAG although the catalog does not list it (a plugin's "
                          "backend, say); only for lists plugins can extend. Repeatable.")


def _add_catalog_flags(parser: CommandParser, system: str, catalog: Catalog, names: frozenset[str] | None) -> None:
    """The catalog's flags (only those in `names` unless it is None), grouped as `--help` shows them."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for flag in catalog:
        if flag.meta or (names is not None and flag.name not in names):
            continue
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(f"{system} flags: {flag.group}")
        _add_flag(groups[flag.group], flag)


@functools.lru_cache(maxsize=64)
def command_parser(system: str, add_options: AddOptions | None, prog: str,
                   names: frozenset[str] | None) -> tuple[CommandParser, Catalog]:
    """A command's parser: `--help [GROUP]`, Accord's options, the catalog flags in `names` (None:
    every flag) and the calling command's own options."""
    catalog = load_catalog(system)
    parser = CommandParser(
        prog=prog, allow_abbrev=False, add_help=False,
        usage=f"{prog} [--system SYSTEM] [--config FILE] [options] [FLAGS ...]",
    )
    HelpAction.add_to(parser, catalog)
    _add_own_options(parser)
    _add_catalog_flags(parser, system, catalog, names)
    if add_options is not None:
        add_options(parser)
    return parser, catalog


def own_options(system: str, add_options: AddOptions | None, prog: str) -> dict[str, int | str]:
    """The option strings of a command itself (`--facts`, `--json`, ...), not of the launch it reads,
    each with how many words it takes (argparse's nargs: 0 for a switch, 1 for None)."""
    parser, _ = command_parser(system, add_options, prog, frozenset())
    return {option: 1 if action.nargs is None else action.nargs
            for option, action in parser._option_string_actions.items()}


def flags_named(argv: list[str], catalog: Catalog) -> frozenset[str]:
    """The catalog flags spelled in argv (a word's part before `=`); none when help is asked for:
    `--help` lists the flags from the catalog by group, so the options it shows are the command's
    own whatever else the command line holds."""
    index = spelling_index(catalog)
    names = set()
    for word in argv:
        if word == "-h" or word.partition("=")[0] == "--help":
            return frozenset()
        found = index.get(word.partition("=")[0])
        if found is not None:
            names.add(found[0].name)
    return frozenset(names)


# --------------------------------------------------------------------------------------------------
# Unknown words on the command line
# --------------------------------------------------------------------------------------------------


def unknown_word_error(word: str, argv: list[str], parser: CommandParser, catalog: Catalog) -> UsageError:
    """The error for the first word argparse could not place: a stray `--`, an unknown flag (with
    upstream's pointer or the nearest real spellings), a value after a switch, or a lone value."""
    if word == "--":
        return UsageError(
            "unexpected `--`: it ends option parsing, so every flag after it would be read as a bare word. "
            "Remove it; a launch command is flags and their values only."
        )
    if word.startswith("-") and not _NEGATIVE_NUMBER.match(word):
        name = word.split("=", 1)[0]
        from accord.resolver.commandline.upstream_spellings import unknown_flag_error  # only when a flag is unknown

        pointed = unknown_flag_error(catalog, name)
        if pointed is not None:
            return pointed
        close = suggest(name, known_spellings(catalog))
        hint = f"; did you mean {' or '.join(close)}?" if close else "."
        return UsageError(
            f"unknown flag {name}{hint} Search with "
            f"`accord flags --system {catalog.system} WORD`."
        )
    index = argv.index(word) if word in argv else -1
    before = argv[index - 1] if index > 0 else ""
    action = parser._option_string_actions.get(before.split("=", 1)[0])
    if isinstance(action, (ConstAction, RetiredAction)):
        return UsageError(f"unexpected value {word!r}: {before} is a switch and takes no value.")
    return UsageError(f"unexpected argument {word!r}: every value must follow the flag it belongs to.")
