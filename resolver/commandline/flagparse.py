"""The SGLang-compatible command line, generated from the flag catalog.

Every option string of the seeds parses here exactly as upstream spells it: aliases, `--no-x`
negations, nargs lists, JSON values, human-readable integers, deprecated spellings (mapped to the
flag they now set, with a warning) and a few explicit short forms (`--tp`). A unique prefix of a
flag is read as that flag, as upstream's argparse (allow_abbrev) reads it, with a warning naming the
flag it became; a prefix of several flags is an error listing them, and an unknown spelling is an
error that names the nearest real ones.

The result keeps only what the user set, with where each value came from (the command line or a
`--config` file; the command line wins), because a user value is a hard constraint for the solver
while everything else is the solver's to choose.

A parse registers only the catalog flags whose spellings appear on its command line (all of them
for `--help`): prefixes are written out in full before parsing (argparse's own abbreviation is off),
so argparse's reading of a word (option, value or unknown) does not depend on which other options
exist: the answer is the same, and a cold `accord resolve` never builds five hundred actions it will
not use. Parsers are cached by the flags they hold.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
from typing import Any, Callable

from accord.resolver.commandline.configfile import read_config
from accord.resolver.commandline.flagvalues import (
    BadValue,
    convert_data,
    convert_text,
    describe_expected,
    takes_mapping,
    usage_error,
)
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS, Catalog, DeprecatedSpelling, Flag, load_catalog

AddOptions = Callable[[argparse.ArgumentParser], None]

_STATE = "_accord_collected"
_UNSET = object()  # a config entry that sets nothing (a switch written as false)
_SWITCH_GIVEN_VALUE = re.compile(r"argument (\S+): ignored explicit argument '(.*)'$")
_VALUE_MISSING = re.compile(r"argument (\S+): expected (?:one|at least one) argument$")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_METAVAR = {"int": "N", "float": "X", "str": "TEXT", "json": "JSON", "json_or_str": "VALUE", "bool": "BOOL"}


@dataclasses.dataclass(frozen=True)
class ParsedFlags:
    """The flags a user set (command line or config file), typed, by dest, with their sources."""

    system: str
    values: dict[str, Any]
    sources: dict[str, str]  # dest -> "cli" | "config:<path>"
    warnings: tuple[str, ...]


class _Collected:
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
            before = f"{self.spelled[dest]} {_shown(self.values[dest])}"
            now = f"{spelling} {_shown(value)}"
            self.warnings.append(f"{spelling or dest} is given twice ({before}, then {now}); the last one is used.")
        self.values[dest] = value
        self.spelled[dest] = spelling or dest
        self.warnings.extend(warnings)


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "" if value is True else str(value)


# --------------------------------------------------------------------------------------------------
# System detection
# --------------------------------------------------------------------------------------------------


def _option_value(argv: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the last `--name V` / `--name=V` in argv, without parsing anything else."""
    found = None
    for i, word in enumerate(argv):
        name, eq, rest = word.partition("=")
        if name in names:
            if eq:
                found = rest
            elif i + 1 < len(argv):
                found = argv[i + 1]
    return found


def detect_system(argv: list[str]) -> str:
    """`--system` when given; else diffusion for a local model folder with model_index.json (on the
    command line, else in the `--config` file, so saved `resolve --json` values feed back alone); else llm."""
    given = _option_value(argv, ("--system",))
    if given is not None:
        if given not in SYSTEMS:
            raise UsageError(f"unknown system {given!r} for --system; use one of: {', '.join(SYSTEMS)}.")
        return given
    model = _option_value(argv, ("--model-path", "--model"))
    config = _option_value(argv, ("--config",))
    if model is None and config is not None:
        model = _config_model_path(config)
    if isinstance(model, str) and model and os.path.isfile(os.path.join(os.path.expanduser(model), "model_index.json")):
        return "diffusion"
    return "llm"


def _config_model_path(path: str) -> str | None:
    """The model path a config file sets, if any (its errors are reported when the file is read)."""
    try:
        entries = read_config(path)
    except UsageError:
        return None
    for entry in entries:
        if entry.key.lstrip("-").replace("-", "_") in ("model_path", "model"):
            return entry.value if isinstance(entry.value, str) else None
    return None


# --------------------------------------------------------------------------------------------------
# argparse actions: each records into the _Collected on the namespace, never into the namespace
# --------------------------------------------------------------------------------------------------


def _state(namespace: argparse.Namespace) -> _Collected:
    return getattr(namespace, _STATE)


class _ValueAction(argparse.Action):
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


class _ConstAction(argparse.Action):
    """A switch (no value) that stores a fixed value: True, False for `--no-x`, or a mapped value."""

    def __init__(self, option_strings, dest, *, flag: Flag, value: Any, warning: str = "", **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.flag = flag
        self.value = value
        self.warning = warning

    def __call__(self, parser, namespace, values, option_string=None):
        _state(namespace).store(self.flag.name, self.value, _listed(self.warning), option_string)


class _RetiredAction(argparse.Action):
    """A deprecated switch that no longer does anything: warns, or fails when the seed refuses it."""

    def __init__(self, option_strings, dest, *, flag: Flag, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.flag = flag

    def __call__(self, parser, namespace, values, option_string=None):
        _state(namespace).warnings.append(_retired_message(self.flag, option_string))


def _listed(warning: str) -> list[str]:
    return [warning] if warning else []


# --------------------------------------------------------------------------------------------------
# Deprecation wording (shared by the command line and config files)
# --------------------------------------------------------------------------------------------------


def _spelling_warning(flag: Flag, spelling: DeprecatedSpelling, used: str) -> str:
    target = spelling.replacement or (
        f"{flag.primary}={spelling.value}" if spelling.value not in (None, True) else flag.primary
    )
    return f"{used} is deprecated; use {target} instead (it sets {flag.name})."


def _flag_warning(flag: Flag, used: str) -> str:
    replacement = (flag.deprecated or {}).get("replacement")
    advice = f"use {replacement} instead" if replacement else "it may be removed"
    return f"{used} is deprecated; {advice}."


def _retired_message(flag: Flag, used: str) -> str:
    """Warning for an ignored flag; raises for a removed one (the seed exits with an error)."""
    deprecated = flag.deprecated or {}
    replacement = deprecated.get("replacement")
    if deprecated.get("removed"):
        raise UsageError(f"{used} was removed and no longer works; use {replacement} instead.")
    advice = f" Use {replacement} instead." if replacement else ""
    return f"{used} is deprecated and has no effect; it was ignored.{advice}"


# --------------------------------------------------------------------------------------------------
# Building the parser
# --------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
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
            group.add_argument(*current, action=_RetiredAction, flag=flag, help=_help(flag, "(deprecated, ignored)"))
        else:
            warning = _flag_warning(flag, current[0]) if deprecated else ""
            if flag.type == "bool" and not flag.value_optional:
                group.add_argument(
                    *current, action=_ConstAction, flag=flag, value=True, warning=warning, help=_help(flag),
                )
            else:
                group.add_argument(
                    *current, action=_ValueAction, flag=flag, warning=warning, metavar=_metavar(flag),
                    help=_help(flag), **_value_kwargs(flag),
                )
    if flag.negated:
        group.add_argument(*flag.negated, action=_ConstAction, flag=flag, value=False, help=argparse.SUPPRESS)
    for spelling in flag.deprecated_spellings:
        warning = _spelling_warning(flag, spelling, spelling.flag)
        if spelling.value is not None:
            group.add_argument(
                spelling.flag, action=_ConstAction, flag=flag, value=spelling.value, warning=warning,
                help=argparse.SUPPRESS,
            )
        else:
            group.add_argument(
                spelling.flag, action=_ValueAction, flag=flag, warning=warning, metavar=_metavar(flag),
                help=argparse.SUPPRESS, **_value_kwargs(flag),
            )


def _add_own_options(parser: _Parser) -> None:
    """--system, --config and --extend-choices: Accord's own options, read by every command."""
    own = parser.add_argument_group("accord")
    own.add_argument("--system", metavar="{" + ",".join(SYSTEMS) + "}",
                     help="Which server's flags to use (default: inferred from --model-path, else llm).")
    own.add_argument("--config", metavar="FILE",
                     help="Read flags from a YAML or JSON file of flag: value pairs; the command line wins.")
    own.add_argument("--extend-choices", metavar="FLAG=VALUE", action="append", default=[],
                     help="Accept VALUE for FLAG although the catalog does not list it (a plugin's "
                          "backend, say); only for lists plugins can extend. Repeatable.")


def _add_catalog_flags(parser: _Parser, system: str, catalog: Catalog, names: frozenset[str] | None) -> None:
    """The catalog's flags (only those in `names` unless it is None), grouped as `--help` shows them."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for flag in catalog:
        if flag.meta or (names is not None and flag.name not in names):
            continue
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(f"{system} flags: {flag.group}")
        _add_flag(groups[flag.group], flag)


@functools.lru_cache(maxsize=64)
def _command_parser(system: str, add_options: AddOptions | None, prog: str,
                    names: frozenset[str] | None) -> tuple[_Parser, Catalog]:
    """A command's parser: Accord's options, the catalog flags in `names` (None: every flag, as
    `--help` needs) and the calling command's own options."""
    catalog = load_catalog(system)
    parser = _Parser(
        prog=prog, allow_abbrev=False,
        usage=f"{prog} [--system SYSTEM] [--config FILE] [options] [FLAGS ...]",
        description=f"Flags of the {system} server (see `accord flags --system {system}`).",
    )
    _add_own_options(parser)
    _add_catalog_flags(parser, system, catalog, names)
    if add_options is not None:
        add_options(parser)
    return parser, catalog


def _flags_named(argv: list[str], catalog: Catalog) -> frozenset[str] | None:
    """The catalog flags spelled in argv (a word's part before `=`), or None when help is asked
    for: `-h...` or `--help` anywhere means the full parser (over-asking only costs time)."""
    index = _spelling_index(catalog)
    names = set()
    for word in argv:
        if word.startswith("-h") or word.partition("=")[0] == "--help":
            return None
        found = index.get(word.partition("=")[0])
        if found is not None:
            names.add(found[0].name)
    return frozenset(names)


# --------------------------------------------------------------------------------------------------
# Unknown words on the command line
# --------------------------------------------------------------------------------------------------


def _known_spellings(catalog: Catalog) -> list[str]:
    own = {"--system", "--config", "--extend-choices"}
    return sorted({s for flag in catalog if not flag.meta for s in flag.option_strings} | own)


def suggest(word: str, spellings: list[str]) -> list[str]:
    """Nearest real spellings: up to 3 that it is a prefix of, else the single most similar one."""
    normal = word.replace("_", "-")
    if normal != word and normal in spellings:
        return [normal]
    longer = [s for s in spellings if s.startswith(normal) and s != normal]
    if longer:
        return longer[:3]
    import difflib  # error path only

    return difflib.get_close_matches(normal, spellings, n=1, cutoff=0.75)


def _unknown_word_error(word: str, argv: list[str], parser: _Parser, catalog: Catalog) -> UsageError:
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
        close = suggest(name, _known_spellings(catalog))
        hint = f"; did you mean {' or '.join(close)}?" if close else "."
        return UsageError(
            f"unknown flag {name}{hint} Search with "
            f"`accord flags --system {catalog.system} WORD`."
        )
    index = argv.index(word) if word in argv else -1
    before = argv[index - 1] if index > 0 else ""
    action = parser._option_string_actions.get(before.split("=", 1)[0])
    if isinstance(action, (_ConstAction, _RetiredAction)):
        return UsageError(f"unexpected value {word!r}: {before} is a switch and takes no value.")
    return UsageError(f"unexpected argument {word!r}: every value must follow the flag it belongs to.")


# --------------------------------------------------------------------------------------------------
# Prefixes, as upstream's argparse reads them
# --------------------------------------------------------------------------------------------------


def expand_prefixes(argv: list[str], catalog: Catalog, own: frozenset[str]) -> tuple[list[str], list[str]]:
    """argv with each unique prefix of a flag written out in full, and a warning for each.

    Upstream's parser keeps argparse's allow_abbrev: `--speculative-algo` is `--speculative-algorithm`
    there, and a prefix of several flags is refused as ambiguous. Accord reads them the same way,
    against the same set of spellings: the catalog's plus the current-upstream ones it lacks
    (`upstream_spellings.yaml`), so a prefix whose only completion is an upstream-only flag gets that
    flag's pointer, and a prefix that upstream finds ambiguous is ambiguous here too (Accord's own
    short forms such as `--mem-fraction` are not upstream's, so they take no part). Full spellings,
    the command's own options (`--facts`, `--json`, ...) and words after `--` are left alone.
    """
    index = _spelling_index(catalog)
    out, warnings = [], []
    spellings: list[str] | None = None
    for position, word in enumerate(argv):
        if word == "--":
            out += argv[position:]
            break
        name, sep, value = word.partition("=")
        if not name.startswith("--") or len(name) < 3 or name in index or name in own:
            out.append(word)
            continue
        if spellings is None:
            from accord.resolver.commandline.upstream_spellings import current_upstream_spellings  # unknown words only

            upstream = current_upstream_spellings(catalog)
            if name in upstream:
                out.append(word)
                continue
            short = {form for flag in catalog for form in flag.short_forms}  # Accord's own aliases
            spellings = sorted((set(index) - short) | {"--config"} | set(upstream))
        elif name in spellings:
            out.append(word)
            continue
        matches = [s for s in spellings if s.startswith(name)]
        if len(matches) > 1:
            raise UsageError(
                f"ambiguous flag {name}: it is the start of {', '.join(matches[:8])}"
                f"{' and more' if len(matches) > 8 else ''}, as upstream's argparse also finds; "
                f"write the full name.")
        if len(matches) == 1:
            out.append(matches[0] + sep + value)
            if matches[0] in index or matches[0] == "--config":
                warnings.append(f"{name} is read as {matches[0]} (upstream's argparse accepts a unique "
                                f"prefix of a flag); write the full name, which a later flag cannot make ambiguous.")
            continue
        out.append(word)
    return out, warnings


# --------------------------------------------------------------------------------------------------
# Config files
# --------------------------------------------------------------------------------------------------


_INDEXES: dict[str, tuple[Catalog, dict]] = {}  # system -> (the catalog, its spelling index)


def _spelling_index(catalog: Catalog) -> dict[str, tuple[Flag, str, DeprecatedSpelling | None]]:
    """option string -> (flag, role, deprecated spelling) with role current|negated|deprecated.

    Every parse reads it, so the index of the last catalog of each system is kept (callers only read it).
    """
    kept = _INDEXES.get(catalog.system)
    if kept is not None and kept[0] is catalog:
        return kept[1]
    index: dict[str, tuple[Flag, str, DeprecatedSpelling | None]] = {}
    for flag in catalog:
        for s in flag.flags + flag.short_forms:
            index[s] = (flag, "current", None)
        for s in flag.negated:
            index[s] = (flag, "negated", None)
        for spelling in flag.deprecated_spellings:
            index[spelling.flag] = (flag, "deprecated", spelling)
    _INDEXES[catalog.system] = (catalog, index)
    return index


def _read_config_values(path: str, catalog: Catalog,
                        extra_choices: dict[str, tuple[str, ...]]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """Typed values by dest from a config file, warnings, and the value aliases used (dest -> alias).
    Keys: dests or spellings without dashes."""
    index = _spelling_index(catalog)
    values: dict[str, Any] = {}
    warnings: list[str] = []
    aliased: dict[str, str] = {}
    for entry in read_config(path):
        where = f"config file {path}, line {entry.line}"
        key = entry.key.lstrip("-")
        found = index.get("--" + key.replace("_", "-"))
        if found is None and key.replace("-", "_") in catalog:
            flag = catalog[key.replace("-", "_")]
            found = (flag, "current", None)
        if isinstance(entry.value, dict) and (found is None or not takes_mapping(found[0])):
            raise UsageError(
                f"{where}: key {entry.key!r} holds a nested mapping; config files are flat, one flag per "
                f"key (e.g. tp_size: 2), and only JSON-valued or map-valued flags take a mapping."
            )
        if found is None:
            from accord.resolver.commandline.upstream_spellings import pointer  # only when a key is unknown

            text = pointer(catalog, "--" + key.replace("_", "-"))
            if text is not None:
                raise UsageError(f"{where}: unknown key {entry.key!r}: {text}")
            close = suggest("--" + key.replace("_", "-"), _known_spellings(catalog))
            names = [c.lstrip("-").replace("-", "_") for c in close]
            hint = f"; did you mean {' or '.join(repr(n) for n in names)}?" if names else "."
            raise UsageError(
                f"{where}: unknown key {entry.key!r}{hint} Keys are flag names such as tp_size or tp-size."
            )
        flag, role, spelling = found
        if flag.meta:
            raise UsageError(f"{where}: key {entry.key!r} cannot be set inside a config file.")
        if entry.value is None and not (flag.nullable and flag.default is not None):
            continue  # null means unset, so `accord resolve --json` values feed back as they are
        value, notes = _config_value(flag, role, spelling, entry.key, entry.value, where,
                                     extra_choices.get(flag.name, ()))
        warnings.extend(f"{path}: {note}" for note in notes)
        if value is not _UNSET:
            values[flag.name] = value
            aliased.pop(flag.name, None)
            if isinstance(entry.value, str) and entry.value in dict(flag.value_aliases):
                aliased[flag.name] = entry.value
    return values, warnings, aliased


# A null in a config file leaves the flag unset, except for a flag that can be null but is not by
# default (diffusion's host and port): there null is a choice of its own that nothing else can express.
def _config_value(flag: Flag, role: str, spelling: DeprecatedSpelling | None, key: str, raw: Any, where: str,
                  extra_choices: tuple[str, ...] = ()):
    """(value, warnings) for one config entry; the value is _UNSET when the entry sets nothing.

    Switch-like spellings follow the upstream config merger: `true` applies the switch, `false` on
    a deprecated or retired switch leaves everything unset, `false` on a bool flag stores False.
    """
    deprecated = flag.deprecated or {}
    if deprecated.get("ignored") or deprecated.get("removed"):
        return _UNSET, ([] if raw is False else [_retired_message(flag, key)])
    notes: list[str] = []
    if role == "deprecated":
        notes.append(_spelling_warning(flag, spelling, key))
        if spelling.value is not None:
            return (spelling.value if _config_bool(key, raw, where) else _UNSET), notes
    elif deprecated:
        notes.append(_flag_warning(flag, key))
    if role == "negated":
        return (not _config_bool(key, raw, where)), notes
    try:
        value, more = convert_data(flag, raw, extra_choices)
    except BadValue as err:
        raise usage_error(key, raw, err, prefix=f"{where}: ") from None
    return value, notes + more


def _config_bool(key: str, raw: Any, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    raise UsageError(f"{where}: invalid value {raw!r} for {key}: expected true or false.")


def _declared_extensions(argv: list[str], catalog: Catalog) -> dict[str, tuple[str, ...]]:
    """`--extend-choices FLAG=VALUE[,VALUE]` words of argv, by dest, checked against the catalog."""
    declared: dict[str, list[str]] = {}
    for i, word in enumerate(argv):
        name, eq, rest = word.partition("=")
        if name != "--extend-choices":
            continue
        item = rest if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        key, sep, values = item.partition("=")
        dest = key.strip().lstrip("-").replace("-", "_")
        if not sep or not values.strip() or dest not in catalog:
            raise UsageError(f"--extend-choices {item!r}: write FLAG=VALUE with a catalog flag, e.g. "
                             f"--extend-choices some_backend=my_plugin.")
        flag = catalog[dest]
        if not flag.extensible:
            raise UsageError(f"--extend-choices {item!r}: {flag.primary} has a fixed choice list upstream "
                             f"({', '.join(str(c) for c in flag.choices or ())}); plugins cannot add to it.")
        declared.setdefault(dest, []).extend(v.strip() for v in values.split(",") if v.strip())
    return {dest: tuple(values) for dest, values in declared.items()}


def _apply_alias_implications(catalog: Catalog, aliased: dict[str, str], values: dict[str, Any],
                              sources: dict[str, str]) -> list[str]:
    """Set what a typed value alias also means (its flag's `alias_implies`), and say so.

    Why: an old spelling upstream still accepts can stand for several settings (an old kernel name
    that also fixes the KV cache type). The implied value is applied like a typed one, with the
    alias's source; a flag left at its auto choice takes it too (auto pins nothing). A different
    concrete value typed for that flag is refused: upstream would overwrite it silently.
    """
    notes = []
    for dest, alias in sorted(aliased.items()):
        flag = catalog[dest]
        for other, value in dict(flag.alias_implies).get(alias, ()):
            target = catalog[other]
            typed = values.get(other, target.auto_choice)
            said = f"{flag.primary} {alias}"
            if other in values and typed not in (value, target.auto_choice):
                raise UsageError(
                    f"{said} means {flag.primary} {dict(flag.value_aliases)[alias]} with {target.primary} "
                    f"{value}, but {target.primary} {_shown(typed)} is also given. Write {flag.primary} "
                    f"{dict(flag.value_aliases)[alias]} to keep {target.primary} {_shown(typed)}, or drop "
                    f"{target.primary}.")
            if values.get(other) != value:
                values[other] = value
                sources[other] = sources[dest]
                notes.append(f"{said} also sets {target.primary} {_shown(value)}, as upstream does.")
    return notes


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def parse_flags(
    argv: list[str],
    system: str | None = None,
    add_options: AddOptions | None = None,
    prog: str = "accord",
) -> tuple[argparse.Namespace, ParsedFlags]:
    """Parse a launch command: (the command's own options, the catalog flags the user set).

    The namespace holds only what `add_options` added plus `system` and `config`. Bad input raises
    UsageError (exit 2) with a one-paragraph message; `--help` prints help and exits 0.
    """
    argv = list(argv)
    detected = detect_system(argv)
    if system is None:
        system = detected
    elif system not in SYSTEMS:
        raise UsageError(f"unknown system {system!r}; use one of: {', '.join(SYSTEMS)}.")
    elif _option_value(argv, ("--system",)) not in (None, system):
        raise UsageError(f"--system {detected} contradicts this command, which works on the {system} system.")
    catalog = load_catalog(system)
    own, _ = _command_parser(system, add_options, prog, frozenset())
    argv, prefix_warnings = expand_prefixes(argv, catalog, frozenset(own._option_string_actions))
    parser, _ = _command_parser(system, add_options, prog, _flags_named(argv, catalog))

    extra_choices = _declared_extensions(argv, catalog)
    namespace = argparse.Namespace(**{_STATE: _Collected(extra_choices)})
    namespace, extras = parser.parse_known_args(argv, namespace)
    if extras:
        raise _unknown_word_error(extras[0], argv, parser, catalog)
    collected: _Collected = getattr(namespace, _STATE)
    delattr(namespace, _STATE)
    delattr(namespace, "extend_choices")  # applied while parsing; not an option of any command
    namespace.system = system

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    warnings: list[str] = list(prefix_warnings)
    aliased: dict[str, str] = {}
    if namespace.config:
        from_file, file_warnings, aliased = _read_config_values(namespace.config, catalog, extra_choices)
        values.update(from_file)
        sources.update({dest: f"config:{namespace.config}" for dest in from_file})
        warnings.extend(file_warnings)
    for dest in collected.values:  # the command line wins over the file, alias and all
        aliased.pop(dest, None)
    aliased.update(collected.aliased)
    values.update(collected.values)
    sources.update({dest: "cli" for dest in collected.values})
    warnings.extend(collected.warnings)
    warnings.extend(_apply_alias_implications(catalog, aliased, values, sources))
    return namespace, ParsedFlags(
        system=system,
        values=values,
        sources=sources,
        warnings=tuple(dict.fromkeys(warnings)),
    )
