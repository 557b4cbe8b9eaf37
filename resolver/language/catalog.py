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

from accord.resolver.errors import UsageError
from accord.resolver.language import plancache
from accord.resolver.language.yamlcache import bulk_load, read_yaml_files
from accord.rules.paths import RULES_DIR

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
class MetaProperty:
    """One property of a flag's choices (say, the vendor of each attention backend).

    `values` pairs each choice that gives the property with its value (lists as tuples); every
    other value of the flag (a choice that does not give it, an unset flag, a value outside the
    list of an extensible flag) has `default`. Rules read it as `meta(flag).name`.
    """

    name: str
    default: Any
    about: str
    values: tuple[tuple[Any, Any], ...]

    def of(self, choice: Any) -> Any:
        """The property's value for one value of the flag."""
        for key, value in self.values:
            if key == choice:
                return value
        return self.default


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
    choice_meta: tuple[MetaProperty, ...] = ()  # properties of the choices that rules read (`meta(flag).p`)
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

    def meta_property(self, name: str) -> "MetaProperty | None":
        """The choice-metadata property `name` of this flag, or None when it has no such property."""
        for prop in self.choice_meta:
            if prop.name == name:
                return prop
        return None

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

    def choice_metadata(self) -> dict[str, tuple[MetaProperty, ...]]:
        """Flag -> the properties of its choices, for flags that declare `choice_meta` (what the
        expression compiler needs to compile `meta(flag).prop`)."""
        return {f.name: f.choice_meta for f in self if f.choice_meta}


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
    meta = data.pop("choice_meta", None)
    flag = Flag(name=name, group=data.pop("group", group), deprecated_spellings=spellings, **data)
    if meta is None:
        return flag
    if isinstance(meta, dict) and set(meta) == {"same_as"}:
        return dataclasses.replace(flag, choice_meta=_SameAs(str(meta["same_as"])))  # resolved in _add_flags
    return dataclasses.replace(flag, choice_meta=_choice_meta(flag, meta, f"{path}: flag {name!r}"))


# -- choice metadata (`choice_meta:` in a flag's entry; see rules/README.md, "Choice metadata") --------

class _SameAs(str):
    """`choice_meta: {same_as: other_flag}` before the other flag is known (replaced on loading)."""


_SCALARS = (str, int, float, bool, type(None))


def _kind(value: Any) -> str | None:
    """The type a property's values share: bool, number, str or list (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    return "list"


def _meta_value(value: Any, where: str) -> Any:
    if isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value):
        return tuple(value)
    if isinstance(value, _SCALARS):
        return value
    raise UsageError(f"{where} has the value {value!r}; a property value is a string, number, boolean, "
                     f"null or a list of those.")


def _choice_meta(flag: Flag, meta: Any, where: str) -> tuple[MetaProperty, ...]:
    """Check a flag's `choice_meta:` block and turn it into one MetaProperty per declared property."""
    if not isinstance(meta, dict) or set(meta) != {"properties", "choices"}:
        raise UsageError(f"{where}: choice_meta needs exactly 'properties' (name: {{default, about}}) and "
                         f"'choices' (choice: {{property: value}}), or is {{same_as: <flag>}}.")
    open_names = flag.type == "str" and not flag.choices   # an open name (say, a kernel name)
    if not open_names and (flag.type != "enum" or not flag.choices):
        raise UsageError(f"{where} has choice_meta but is neither an enum flag with choices nor an open str "
                         f"flag; metadata describes the values a flag names.")
    props, choices = meta["properties"], meta["choices"]
    if not isinstance(props, dict) or not props or not isinstance(choices, dict):
        raise UsageError(f"{where}: choice_meta 'properties' and 'choices' must be mappings.")
    kinds: dict[str, set] = {}
    for prop, spec in props.items():
        if not isinstance(prop, str) or not prop.isidentifier() or prop.startswith("_"):
            raise UsageError(f"{where}: choice_meta property {prop!r} is not a plain name (letters, digits, _).")
        if not isinstance(spec, dict) or set(spec) != {"default", "about"} or not spec["about"]:
            raise UsageError(f"{where}: choice_meta property {prop!r} needs exactly 'default' (the value of a "
                             f"choice that does not give it) and 'about' (one line: what it means).")
        kinds[prop] = {_kind(_meta_value(spec["default"], f"{where}: property {prop!r}"))} - {None}
    pairs: dict[str, list] = {prop: [] for prop in props}
    for choice, given in choices.items():
        if not open_names and choice not in flag.choices:
            raise UsageError(f"{where}: choice_meta describes {choice!r}, which is not one of its choices "
                             f"{list(flag.choices)}.")
        if not isinstance(given, dict):
            raise UsageError(f"{where}: choice_meta of {choice!r} must map property names to values.")
        for prop, value in given.items():
            if prop not in props:
                raise UsageError(f"{where}: choice_meta of {choice!r} gives the undeclared property {prop!r}; "
                                 f"declare it under 'properties' (declared: {', '.join(props)}).")
            value = _meta_value(value, f"{where}: choice_meta {choice!r}.{prop}")
            kinds[prop].add(_kind(value))
            pairs[prop].append((choice, value))
    for prop, found in kinds.items():
        if len(found - {None}) > 1:
            raise UsageError(f"{where}: choice_meta property {prop!r} mixes value types {sorted(found - {None})}; "
                             f"give every choice (and the default) the same type.")
    return tuple(MetaProperty(prop, _meta_value(props[prop]["default"], where), str(props[prop]["about"]),
                              tuple(pairs[prop])) for prop in props)


def _resolve_same_as(flags: dict[str, Flag], path_of: dict[str, Path]) -> None:
    """Give each `choice_meta: {same_as: other}` flag the other flag's metadata (same choices only)."""
    for name, flag in flags.items():
        if not isinstance(flag.choice_meta, _SameAs):
            continue
        where = f"{path_of[name]}: flag {name!r}"
        other = flags.get(flag.choice_meta)
        if other is None or not other.choice_meta or isinstance(other.choice_meta, _SameAs):
            raise UsageError(f"{where}: choice_meta same_as {str(flag.choice_meta)!r} names no flag with its "
                             f"own choice_meta.")
        if other.choices != flag.choices:
            raise UsageError(f"{where}: choice_meta same_as {other.name!r}, but their choices differ; "
                             f"metadata is shared only between flags with the same choices.")
        flags[name] = dataclasses.replace(flag, choice_meta=other.choice_meta)


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
_META_AT = _FIELD_ORDER.index("choice_meta")


def _catalog_to_data(catalog: Catalog) -> tuple:
    rows = []
    for flag in catalog:
        row = [getattr(flag, name) for name in _FIELD_ORDER]
        row[_SPELLINGS_AT] = tuple(tuple(getattr(s, n) for n in _SPELLING_FIELDS) for s in flag.deprecated_spellings)
        row[_META_AT] = tuple((p.name, p.default, p.about, p.values) for p in flag.choice_meta)
        rows.append(tuple(row))
    return tuple(rows)


def _catalog_from_data(system: str, data: tuple) -> Catalog:
    flags: dict[str, Flag] = {}
    for row in data:
        if len(row) != len(_FIELD_ORDER):
            raise ValueError("a catalog entry of another shape")
        row = list(row)
        row[_SPELLINGS_AT] = tuple(DeprecatedSpelling(*s) for s in row[_SPELLINGS_AT])
        row[_META_AT] = tuple(MetaProperty(*p) for p in row[_META_AT])
        flag = Flag(*row)
        flags[flag.name] = flag
    return Catalog(system=system, flags=flags)


def _add_flags(flags: dict[str, Flag], owners: dict[str, str], paths: list[Path]) -> None:
    path_of: dict[str, Path] = {}
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
                path_of[flag.name] = path
    _resolve_same_as(flags, path_of)
