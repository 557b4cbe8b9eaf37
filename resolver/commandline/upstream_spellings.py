"""Pointers for upstream flags the catalog does not have.

Accord's catalog follows the seed. Launch commands copied from current upstream SGLang use some
flags the seed spells differently (`rules/<system>/upstream_spellings.yaml`, `spelled_differently`),
does not have at all (`not_in_seed`), or that Accord's catalog lacks for a stated reason
(`not_accepted`, each group with its `why`: say, options a module outside the seed registers), or
that recent releases removed (`removed`, each with the flag that replaced it). For
those, a "did you mean" guess at a similar-looking catalog flag misleads: it is usually a different
feature. This module answers, for an unknown spelling, the one sentence that says what the seed uses
instead, or that the feature is not there. A listed spelling ending in `.*` stands for every
spelling with that prefix (dotted per-component options). Read only when a flag is unknown, so a
normal resolve never parses the file.
"""

from __future__ import annotations

import functools
from typing import Any

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR, Catalog
from accord.resolver.language.ruleset import UPSTREAM_SPELLINGS_FILE
from accord.resolver.language.yamlcache import read_yaml_files


@functools.lru_cache(maxsize=None)
def _table(system: str) -> dict[str, Any]:
    """spelling -> entry (a `spelled_differently` mapping, or None for `not_in_seed`), plus the
    upstream release the file describes under the key ""."""
    path = RULES_DIR / system / UPSTREAM_SPELLINGS_FILE
    if not path.exists():
        return {}
    (data,), = read_yaml_files([path])
    table: dict[str, Any] = {"": str(data.get("upstream") or "upstream SGLang")}
    for entry in (list(data.get("spelled_differently") or ()) + list(data.get("not_accepted") or ())
                  + list(data.get("removed") or ())):
        for spelling in entry["flags"]:
            table[spelling] = entry
    for spelling in data.get("not_in_seed") or ():
        table[spelling] = None
    return table


def current_upstream_spellings(catalog: Catalog) -> frozenset[str]:
    """Flags the current upstream parser has that the catalog lacks (listed spellings, not the
    removed ones or `PREFIX.*` families): the rest of the set upstream's prefixes are read against."""
    table = _table(catalog.system)
    return frozenset(key for key, entry in table.items()
                     if key.startswith("--") and not key.endswith(".*")
                     and not (isinstance(entry, dict) and "successor" in entry))


def _lookup(table: dict[str, Any], spelling: str) -> tuple[bool, Any]:
    """(found, entry) for a spelling: an exact entry first, else the longest matching `PREFIX.*`."""
    if spelling in table:
        return True, table[spelling]
    prefixes = [key for key in table if key.endswith(".*") and spelling.startswith(key[:-1])]
    if prefixes:
        return True, table[max(prefixes, key=len)]
    return False, None


def pointer(catalog: Catalog, spelling: str) -> str | None:
    """What to tell a user who typed `spelling`, which the catalog lacks (None: no pointer known)."""
    table = _table(catalog.system)
    found, entry = _lookup(table, spelling)
    if found:
        release = table[""]
        if entry is None:
            return (f"it is a flag of {release} that the seed, and so Accord's catalog, does not have, "
                    f"so Accord can neither check nor pass it on. Remove it.")
        if "successor" in entry:
            return (f"it was removed from upstream SGLang and no longer parses there either; "
                    f"use {entry['successor']} instead.")
        if "why" in entry:
            return f"{entry['why']}; Accord can neither check nor pass it on. Remove it."
        return (f"that is how {release} spells {entry['meaning']}; the seed Accord follows spells it "
                f"{entry['seed']}. Use that instead.")
    negated = _negated_switch(catalog, spelling)
    if negated is not None:
        flag, positive = negated
        state = "on" if flag.default is True else "off"
        return (f"the seed has only the switch {positive}, which is {state} unless typed; leave "
                f"{positive} out to keep it {state}.")
    return None


def _negated_switch(catalog: Catalog, spelling: str):
    """(flag, its positive spelling) when `spelling` is `--no-X` and `--X` is a plain switch."""
    if not spelling.startswith("--no-"):
        return None
    positive = "--" + spelling[len("--no-"):]
    for flag in catalog:
        if positive in flag.flags and flag.type == "bool":
            return flag, positive
    return None


def unknown_flag_error(catalog: Catalog, spelling: str) -> UsageError | None:
    """The error for an unknown upstream spelling with a pointer, or None to fall back to guessing."""
    text = pointer(catalog, spelling)
    return None if text is None else UsageError(f"unknown flag {spelling}: {text}")
