"""Which flag an option string names: the catalog's spelling index, prefixes, near misses, old names.

Every other part of the command line asks these questions: the parser (is this word a flag, and
which), the config-file reader (is this key a flag), the error messages (what did the user probably
mean) and the deprecation warnings (what does an old spelling set now). Upstream's argparse reads a
unique prefix of a flag as that flag and refuses an ambiguous one; `expand_prefixes` reproduces that
before parsing, so the parser itself only ever sees full spellings.
"""

from __future__ import annotations

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import Catalog, DeprecatedSpelling, Flag

# --------------------------------------------------------------------------------------------------
# The spellings of a catalog, and the nearest ones to a word that is none of them
# --------------------------------------------------------------------------------------------------

_INDEXES: dict[str, tuple[Catalog, dict]] = {}  # system -> (the catalog, its spelling index)


def spelling_index(catalog: Catalog) -> dict[str, tuple[Flag, str, DeprecatedSpelling | None]]:
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


def known_spellings(catalog: Catalog) -> list[str]:
    """Every spelling a user may type (catalog flags and Accord's own options), for suggestions."""
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
    index = spelling_index(catalog)
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
# Deprecation wording (shared by the command line and config files)
# --------------------------------------------------------------------------------------------------


def spelling_warning(flag: Flag, spelling: DeprecatedSpelling, used: str) -> str:
    target = spelling.replacement or (
        f"{flag.primary}={spelling.value}" if spelling.value not in (None, True) else flag.primary
    )
    return f"{used} is deprecated; use {target} instead (it sets {flag.name})."


def flag_warning(flag: Flag, used: str) -> str:
    replacement = (flag.deprecated or {}).get("replacement")
    advice = f"use {replacement} instead" if replacement else "it may be removed"
    return f"{used} is deprecated; {advice}."


def retired_message(flag: Flag, used: str) -> str:
    """Warning for an ignored flag; raises for a removed one (the seed exits with an error)."""
    deprecated = flag.deprecated or {}
    replacement = deprecated.get("replacement")
    if deprecated.get("removed"):
        raise UsageError(f"{used} was removed and no longer works; use {replacement} instead.")
    advice = f" Use {replacement} instead." if replacement else ""
    return f"{used} is deprecated and has no effect; it was ignored.{advice}"
