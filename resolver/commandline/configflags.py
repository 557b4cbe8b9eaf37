"""A `--config` file's entries as typed catalog flag values, with the same warnings as the command line.

`configfile` only reads the file; this decides what each key means: a flag's dest or one of its
spellings without dashes, converted and checked like a typed value, deprecated and retired spellings
handled as upstream's config merger handles them, and an unknown key refused with the nearest real
ones. It also answers, before anything is parsed, which model a config file names (`detect_system`
needs it to tell a diffusion model folder).
"""

from __future__ import annotations

from typing import Any

from accord.resolver.commandline.configfile import read_config
from accord.resolver.commandline.flagspellings import (
    flag_warning,
    known_spellings,
    retired_message,
    spelling_index,
    spelling_warning,
    suggest,
)
from accord.resolver.commandline.flagvalues import BadValue, convert_data, takes_mapping, usage_error
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import Catalog, DeprecatedSpelling, Flag

_UNSET = object()  # a config entry that sets nothing (a switch written as false)


def config_model_path(path: str) -> str | None:
    """The model path a config file sets, if any (its errors are reported when the file is read)."""
    try:
        entries = read_config(path)
    except UsageError:
        return None
    for entry in entries:
        if entry.key.lstrip("-").replace("-", "_") in ("model_path", "model"):
            return entry.value if isinstance(entry.value, str) else None
    return None


def read_config_values(path: str, catalog: Catalog,
                       extra_choices: dict[str, tuple[str, ...]]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """Typed values by dest from a config file, warnings, and the value aliases used (dest -> alias).
    Keys: dests or spellings without dashes."""
    index = spelling_index(catalog)
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
            close = suggest("--" + key.replace("_", "-"), known_spellings(catalog))
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
        return _UNSET, ([] if raw is False else [retired_message(flag, key)])
    notes: list[str] = []
    if role == "deprecated":
        notes.append(spelling_warning(flag, spelling, key))
        if spelling.value is not None:
            return (spelling.value if _config_bool(key, raw, where) else _UNSET), notes
    elif deprecated:
        notes.append(flag_warning(flag, key))
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
