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

The work is shared out: `flagspellings` says which flag a spelling names (prefixes, near misses,
deprecated names), `commandparser` builds the argparse parser a command line needs, `flagactions`
collects what it parses, `flagvalues` converts each value, and `configflags` reads a `--config` file.
This module detects the system, runs the parse, and merges command line, config file and value
aliases into `ParsedFlags`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from accord.resolver.commandline.commandparser import AddOptions, command_parser, flags_named, unknown_word_error
from accord.resolver.commandline.configflags import config_model_path, read_config_values
from accord.resolver.commandline.flagactions import STATE, Collected, shown
from accord.resolver.commandline.flagspellings import expand_prefixes
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS, Catalog, load_catalog


@dataclasses.dataclass(frozen=True)
class ParsedFlags:
    """The flags a user set (command line or config file), typed, by dest, with their sources."""

    system: str
    user: dict[str, Any]     # dest -> typed value: what the rest of Accord calls `user`
    sources: dict[str, str]  # dest -> "cli" | "config:<path>"
    warnings: tuple[str, ...]


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
    command line, else in the `--config` file, so saved `resolve --json` values feed back alone), or
    for a hub id the Hugging Face cache or a built-in card knows as a diffusion pipeline; else llm."""
    given = _option_value(argv, ("--system",))
    if given is not None:
        if given not in SYSTEMS:
            raise UsageError(f"unknown system {given!r} for --system; use one of: {', '.join(SYSTEMS)}.")
        return given
    model = _option_value(argv, ("--model-path", "--model"))
    config = _option_value(argv, ("--config",))
    if model is None and config is not None:
        model = config_model_path(config)
    if isinstance(model, str) and model and os.path.isfile(os.path.join(os.path.expanduser(model), "model_index.json")):
        return "diffusion"
    if isinstance(model, str) and is_diffusion_hub_id(model, _option_value(argv, ("--revision",))):
        return "diffusion"
    return "llm"


# --------------------------------------------------------------------------------------------------
# Plugin choices and value aliases: read before parsing, applied after it
# --------------------------------------------------------------------------------------------------


def is_diffusion_hub_id(model: str, revision: str | None) -> bool:
    """Whether a hub id is a diffusion pipeline by what this machine knows without the network:
    the Hugging Face cache holds its model_index.json, or a built-in card is a diffusion card."""
    from accord.resolver.facts.model_sources import HUB_ID, cached_file, model_card

    if not HUB_ID.fullmatch(model) or os.path.exists(os.path.expanduser(model)):
        return False
    return (cached_file(model, revision, "model_index.json") is not None
            and cached_file(model, revision, "config.json") is None) or model_card(model, "diffusion") is not None


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
                    f"{value}, but {target.primary} {shown(typed)} is also given. Write {flag.primary} "
                    f"{dict(flag.value_aliases)[alias]} to keep {target.primary} {shown(typed)}, or drop "
                    f"{target.primary}.")
            if values.get(other) != value:
                values[other] = value
                sources[other] = sources[dest]
                notes.append(f"{said} also sets {target.primary} {shown(value)}, as upstream does.")
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
    own, _ = command_parser(system, add_options, prog, frozenset())
    argv, prefix_warnings = expand_prefixes(argv, catalog, frozenset(own._option_string_actions))
    parser, _ = command_parser(system, add_options, prog, flags_named(argv, catalog))

    extra_choices = _declared_extensions(argv, catalog)
    namespace = argparse.Namespace(**{STATE: Collected(extra_choices)})
    namespace, extras = parser.parse_known_args(argv, namespace)
    if extras:
        raise unknown_word_error(extras[0], argv, parser, catalog)
    collected: Collected = getattr(namespace, STATE)
    delattr(namespace, STATE)
    delattr(namespace, "extend_choices")  # applied while parsing; not an option of any command
    namespace.system = system

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    warnings: list[str] = list(prefix_warnings)
    aliased: dict[str, str] = {}
    if namespace.config:
        from_file, file_warnings, aliased = read_config_values(namespace.config, catalog, extra_choices)
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
        user=values,
        sources=sources,
        warnings=tuple(dict.fromkeys(warnings)),
    )
