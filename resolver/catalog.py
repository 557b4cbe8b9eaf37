"""The flag catalog: every launch flag of a system, loaded from `rules/<system>/flags*.yaml`.

The catalog is plain data. Each flag records its option strings, type, domain and default exactly
as the seed declares them, so an existing launch command keeps working; the parser, the `--config`
loader, `accord flags` and the solver's variable domains are all derived from it.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from resolver import plancache
from resolver.errors import UsageError
from resolver.yamlcache import bulk_load, read_yaml_files

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"
SYSTEMS = ("llm", "diffusion")
TYPES = ("bool", "int", "float", "str", "enum", "list", "json")



@dataclasses.dataclass(frozen=True)
class DeprecatedSpelling:
    """An old option string that still parses, with a warning.

    Without `value` it is a renamed flag: it takes the same argument as the flag it belongs to.
    With `value` it is a switch that takes no argument and stores `value` (for example
    `--enable-breakable-cuda-graph` stores "breakable"). `replacement` overrides the spelling the
    warning recommends; `line` is the seed line that registers it.
    """

    flag: str
    value: Any = None
    replacement: str | None = None
    line: int | None = None


@dataclasses.dataclass(frozen=True)
class Flag:
    """One launch flag. `name` is the argparse dest and the solver variable name."""

    name: str
    flags: tuple[str, ...]
    type: str
    default: Any = None
    group: str = "misc"
    help: str = ""
    nullable: bool = False
    choices: tuple[Any, ...] | None = None
    extensible: bool = False
    choices_from: str | None = None
    element: str | None = None
    nargs: str | None = None
    negated: tuple[str, ...] = ()
    short_forms: tuple[str, ...] = ()
    human_int: bool = False
    value_optional: bool = False
    const: Any = None
    resolvable: bool = False
    deprecated: dict | None = None
    deprecated_spellings: tuple[DeprecatedSpelling, ...] = ()
    line: int | None = None
    meta: bool = False  # an option of the command line itself (the seed's --config), not a setting
    format: str | None = None  # "json": a str flag whose text upstream parses as JSON
    value_aliases: tuple[tuple[str, str], ...] = ()  # (typed value, the value it names), reported when used
    # The choice that means "let the rules decide" (the default, e.g. `auto`): typing it pins nothing,
    # so the flag resolves as if unset (api.resolve), and the provenance says it was typed.
    auto_choice: str | None = None
    # Flags an alias sets besides its own value ((typed alias, ((flag, value), ...)), ...): upstream's
    # old spelling also meant those settings (flagparse applies them, reported, never over a typed value).
    alias_implies: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    @property
    def primary(self) -> str:
        """The spelling shown to users: the seed's first option string (or its first old one)."""
        if self.flags:
            return self.flags[0]
        if self.deprecated_spellings:
            return self.deprecated_spellings[0].flag
        return "--" + self.name.replace("_", "-")

    @property
    def option_strings(self) -> tuple[str, ...]:
        """Every spelling that parses: seed spellings, short forms, negations, old spellings."""
        old = tuple(d.flag for d in self.deprecated_spellings)
        return self.flags + self.short_forms + self.negated + old

    @property
    def finite_domain(self) -> tuple[Any, ...] | None:
        """The values a solver may try for this flag, or None when the domain is open."""
        if self.type == "bool":
            values: tuple[Any, ...] = (False, True)
        elif self.type == "enum" and self.choices:
            values = tuple(self.choices)
        else:
            return None
        return ((None,) + values) if self.nullable else values


@dataclasses.dataclass(frozen=True)
class Catalog:
    """All flags of one system, by name, in declaration order."""

    system: str
    flags: dict[str, Flag]

    def __contains__(self, name: str) -> bool:
        return name in self.flags

    def __getitem__(self, name: str) -> Flag:
        return self.flags[name]

    def __iter__(self):
        return iter(self.flags.values())

    def __len__(self) -> int:
        return len(self.flags)

    def defaults(self) -> dict[str, Any]:
        return {f.name: f.default for f in self}


def catalog_files(system: str, root: Path = RULES_DIR) -> list[Path]:
    """The YAML files that make up a system's catalog, in a stable order."""
    root = root / system
    files = sorted(root.glob("flags*.yaml")) + sorted((root / "flags").glob("*.yaml"))
    return [p for p in files if p.is_file()]


_FLAG_FIELDS = frozenset(f.name for f in dataclasses.fields(Flag))


def _flag_from_yaml(entry: dict, group: str, path: Path) -> Flag:
    data = dict(entry)
    name = data.pop("name", None)
    if not name:
        raise UsageError(f"{path}: a flag entry has no 'name'.")
    if data.get("type") not in TYPES:
        raise UsageError(f"{path}: flag {name!r} has type {data.get('type')!r}; use one of {', '.join(TYPES)}.")
    spellings = tuple(DeprecatedSpelling(**s) for s in data.pop("deprecated_spellings", ()) or ())
    for key in ("flags", "negated", "short_forms", "choices"):
        if data.get(key) is not None:
            data[key] = tuple(data[key])
    if data.get("value_aliases") is not None:
        data["value_aliases"] = tuple(sorted(data["value_aliases"].items()))
    if data.get("alias_implies") is not None:
        implied = data["alias_implies"]
        strays = sorted(set(implied) - {alias for alias, _ in data.get("value_aliases") or ()})
        if strays:
            raise UsageError(f"{path}: flag {name!r} has alias_implies for {strays}, which are not among its "
                             f"value_aliases; an implication belongs to an alias.")
        data["alias_implies"] = tuple(sorted((alias, tuple(sorted(sets.items()))) for alias, sets in implied.items()))
    unknown = sorted(set(data) - _FLAG_FIELDS)
    if unknown:
        raise UsageError(f"{path}: flag {name!r} has unknown keys {unknown}; allowed: {sorted(_FLAG_FIELDS)}.")
    data.setdefault("flags", ())
    auto = data.get("auto_choice")
    if auto is not None and (auto not in (data.get("choices") or ()) or auto != data.get("default")):
        raise UsageError(f"{path}: flag {name!r} has auto_choice {auto!r}, which must be one of its choices "
                         f"and its default (typing it then means the same as leaving the flag out).")
    return Flag(name=name, group=data.pop("group", group), deprecated_spellings=spellings, **data)


def load_catalog(system: str, root: Path = RULES_DIR) -> Catalog:
    """Read a system's catalog from its YAML files.

    The shipped catalog is read once per process (it is ~25 ms of YAML, and the parser, the solver
    and `accord flags` all need it); a catalog under another root is read afresh every time.
    """
    if root == RULES_DIR:
        return _shipped_catalog(system)
    return _read_catalog(system, root)


@functools.lru_cache(maxsize=None)
def _shipped_catalog(system: str) -> Catalog:
    return _read_catalog(system, RULES_DIR)


def _read_catalog(system: str, root: Path) -> Catalog:
    """The catalog from the plan cache when its files are unchanged (see `plancache`), else from YAML."""
    if system not in SYSTEMS:
        raise UsageError(f"unknown system {system!r}; use one of: {', '.join(SYSTEMS)}.")
    paths = catalog_files(system, root)
    entry = plancache.entry_path(f"catalog-{system}", paths)
    with bulk_load():  # no garbage collection walking the catalog while it is being built
        data = plancache.load(entry)
        if data is not None:
            try:
                return _catalog_from_data(system, data)
            except (ValueError, TypeError, IndexError):
                pass  # an entry that unmarshals but is not a catalog: build it again
        flags: dict[str, Flag] = {}
        owners: dict[str, str] = {}
        _add_flags(flags, owners, paths)
    catalog = Catalog(system=system, flags=flags)
    plancache.store(entry, _catalog_to_data(catalog))
    return catalog


# -- the plan cache's form of a catalog: per flag, its field values in declaration order (old
# spellings as tuples of theirs). Checked once when built from YAML, so loading only constructs.
_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(Flag))
_SPELLINGS_AT = _FIELD_ORDER.index("deprecated_spellings")
_SPELLING_FIELDS = tuple(f.name for f in dataclasses.fields(DeprecatedSpelling))


def _catalog_to_data(catalog: Catalog) -> tuple:
    rows = []
    for flag in catalog:
        row = [getattr(flag, name) for name in _FIELD_ORDER]
        row[_SPELLINGS_AT] = tuple(tuple(getattr(s, n) for n in _SPELLING_FIELDS) for s in flag.deprecated_spellings)
        rows.append(tuple(row))
    return tuple(rows)


def _catalog_from_data(system: str, data: tuple) -> Catalog:
    flags: dict[str, Flag] = {}
    for row in data:
        if len(row) != len(_FIELD_ORDER):
            raise ValueError("a catalog entry of another shape")
        row = list(row)
        row[_SPELLINGS_AT] = tuple(DeprecatedSpelling(*s) for s in row[_SPELLINGS_AT])
        flag = Flag(*row)
        flags[flag.name] = flag
    return Catalog(system=system, flags=flags)


def _add_flags(flags: dict[str, Flag], owners: dict[str, str], paths: list[Path]) -> None:
    for path, documents in zip(paths, read_yaml_files(paths)):
        for doc in documents:
            group = doc.get("group", "misc")
            for entry in doc.get("flags", ()):
                flag = _flag_from_yaml(entry, group, path)
                if flag.name in flags:
                    raise UsageError(f"{path}: flag {flag.name!r} is declared twice.")
                for spelling in flag.option_strings:
                    if spelling in owners:
                        raise UsageError(
                            f"{path}: option {spelling} belongs to both {owners[spelling]!r} and "
                            f"{flag.name!r}; an option string must name exactly one flag."
                        )
                    owners[spelling] = flag.name
                flags[flag.name] = flag
