"""Write the upstream launch command of a resolved configuration: the reverse of `flagparse`.

Why: operators run the upstream server itself. A resolved configuration is only worth something to
them if the command that starts upstream makes upstream's *own* parsing and resolution arrive at
the same values: upstream rewrites some values it is given and decides others from the GPU it
probes, so "pass what the user typed" is not enough, and "pass every value" writes flags upstream
no longer has. This module writes, from a `ResolvedConfig`, the options and environment variables
that pin each of Accord's values in upstream's terms, and names every value that no upstream option
can carry (never dropping one silently).

What it knows about upstream is data, read from two files beside the system's rules:
- `upstream_parser.yaml` (generated from upstream's parser): each setting's current spelling, how
  the option takes its value (bare switch, `--no-` negatable switch, `true/false` value, list,
  value), upstream's parser default and choices where they differ from the catalog's.
- `upstream_launch.yaml` (written by hand, each entry with its reason and source): the launcher,
  the settings upstream expresses through others, options computed from several settings (an
  expression each), the settings upstream has no option for, the ones it always decides itself
  unless told, and the environment variables it reads.

A setting is written when upstream would not start from Accord's value on its own: the value differs
from upstream's parser default, the user typed it, or upstream decides it from facts it probes
(`always_explicit`). Everything else upstream already starts from, so the command stays short.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
from typing import Any, Iterable, Mapping, Sequence

from accord.resolver.commandline.release_target import for_release
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig, thaw
from accord.resolver.language.catalog import RULES_DIR, load_catalog
from accord.resolver.language.expr import parse
from accord.resolver.language.expr_runtime import UnknownFact
from accord.resolver.language.ruleset import UPSTREAM_LAUNCH_FILE as LAUNCH_FILE
from accord.resolver.language.ruleset import UPSTREAM_PARSER_FILE as PARSER_FILE
from accord.resolver.language.yamlcache import read_yaml_files
USER_SOURCES = frozenset({"user", "config", "env"})
FORMS = frozenset({"switch", "negatable", "bool_value", "list", "value"})


@dataclasses.dataclass(frozen=True)
class Option:
    """One upstream option of the command: its spelling, how it takes its value, the value, and the
    setting(s) of Accord's configuration it carries."""

    flag: str
    form: str
    value: Any
    carries: tuple[str, ...]
    dest: str  # the field upstream stores it in (its --config key on the diffusion server)

    def words(self) -> list[str]:
        """The command-line words: `--x`, `--no-x`, `--x true`, `--x a b`, `--x v`."""
        if self.form in ("switch", "negatable"):
            return [self.flag] if self.value else ["--no-" + self.flag[2:]]
        if self.form == "bool_value":
            return [self.flag, "true" if self.value else "false"]
        if self.form == "list":
            return [self.flag, *(_word(item) for item in self.value)]
        return [self.flag, _word(self.value)]


def _word(value: Any) -> str:
    """One value as upstream's parser reads it back (JSON for mappings; Python's shortest float)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(thaw(value), sort_keys=True, separators=(",", ":"))
    return str(value)


@dataclasses.dataclass(frozen=True)
class Launch:
    """The upstream launch of one resolved configuration: launcher, options, environment, and the
    values Accord decided that no option could carry (`warnings`)."""

    system: str
    launcher: tuple[str, ...]
    options: tuple[Option, ...]
    env: Mapping[str, str]
    values: Mapping[str, Any]
    warnings: tuple[str, ...]
    left_to_upstream: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    release: str | None = None  # the older SGLang release whose words the options are in (None: the rules' own)

    @property
    def args(self) -> list[str]:
        return [word for option in self.options for word in option.words()]

    @property
    def command(self) -> list[str]:
        return [*self.launcher, *self.args]

    def to_dict(self) -> dict:
        out = {"command": self.command, "env": dict(self.env), "values": thaw(dict(self.values)),
               "warnings": list(self.warnings), "left_to_upstream": thaw(dict(self.left_to_upstream))}
        if self.release is not None:
            out["sglang_release"] = self.release
        return out

    def shell(self) -> str:
        """The command as one shell line, environment assignments first."""
        assigns = [f"{name}={shlex.quote(value)}" for name, value in sorted(self.env.items())]
        return " ".join([*assigns, *(shlex.quote(word) for word in self.command)])

    def config_file(self, style: str) -> tuple[dict, list[str]]:
        """The options as an upstream `--config` YAML mapping, and the words that must stay on the
        command line (a negatable `--X/--no-X` switch: upstream's LLM config reader takes only
        store-true switches and options with values). `style` is the spec's `config_keys`: `flag` (keys are spellings without
        the dashes, values as typed; the LLM server) or `dest` (keys are the settings, values typed
        as YAML; the diffusion server)."""
        data: dict[str, Any] = {}
        rest: list[str] = []
        for option in self.options:
            if style == "flag":
                if option.form == "negatable":
                    rest += option.words()
                    continue
                key = option.flag[2:]
                value: Any = option.value
                if option.form == "list":
                    value = [_word(v) for v in option.value]
                elif option.form not in ("switch", "negatable", "bool_value"):
                    value = _word(option.value)
                data[key] = value
            else:
                data[option.dest] = thaw(option.value) if option.form != "list" else list(thaw(option.value))
        return data, rest


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """Upstream's launch surface for one system (both YAML files, checked on load)."""

    system: str
    upstream: str
    launcher: tuple[str, ...]
    config_keys: str
    flags: Mapping[str, Mapping[str, Any]]
    missing: frozenset[str]
    deprecated: Mapping[str, tuple[str, ...]]
    expressed_by: Mapping[str, Mapping[str, Any]]
    written_as: tuple[Mapping[str, Any], ...]
    no_upstream_flag: Mapping[str, str]
    always_explicit: Mapping[str, str]
    leave_to_upstream: Mapping[str, str]
    env: tuple[Mapping[str, Any], ...]


@functools.lru_cache(maxsize=None)
def load_spec(system: str) -> LaunchSpec:
    """The launch spec of a system, from `rules/<system>/upstream_parser.yaml` and
    `upstream_launch.yaml`. Every setting upstream has no current option for must be accounted for
    (expressed by others, computed, or listed with its reason): a gap is a load error, not a value
    dropped at launch."""
    paths = [RULES_DIR / system / PARSER_FILE, RULES_DIR / system / LAUNCH_FILE]
    (parser_data,), (launch_data,) = read_yaml_files(paths)
    catalog = load_catalog(system)
    flags = dict(parser_data["flags"])
    for name, entry in flags.items():
        if entry["form"] not in FORMS:
            raise ValueError(f"{PARSER_FILE} ({system}): {name} has unknown form {entry['form']!r}")
    written_as = tuple(launch_data.get("written_as") or ())
    computed = {field for entry in written_as for field in entry["carries"]}
    spec = LaunchSpec(
        system=system, upstream=str(parser_data.get("upstream", "upstream SGLang")),
        launcher=tuple(shlex.split(launch_data["launcher"])), config_keys=launch_data.get("config_keys", "flag"),
        flags=flags, missing=frozenset(parser_data.get("missing") or ()),
        deprecated={k: tuple(v) for k, v in (parser_data.get("deprecated") or {}).items()},
        expressed_by=dict(launch_data.get("expressed_by") or {}), written_as=written_as,
        no_upstream_flag=dict(launch_data.get("no_upstream_flag") or {}),
        always_explicit=dict(launch_data.get("always_explicit") or {}),
        leave_to_upstream=dict(launch_data.get("leave_to_upstream") or {}),
        env=tuple(launch_data.get("env") or ()),
    )
    for source in [e["value"] for e in written_as] + [e["holds"] for e in written_as if "holds" in e] \
            + [e["when"] for e in written_as if "when" in e] + [e["when"] for e in spec.env] \
            + [e["check"] for e in spec.expressed_by.values() if "check" in e]:
        _expr(source)  # a typo in an expression is a load error, not a wrong command later
    accounted = set(spec.expressed_by) | computed | set(spec.no_upstream_flag)
    gaps = sorted((set(spec.missing) | set(spec.deprecated)) - accounted)
    unknown = sorted((accounted | set(spec.always_explicit) | set(spec.leave_to_upstream)) - set(catalog.flags))
    if gaps or unknown:
        raise ValueError(f"{LAUNCH_FILE} ({system}): settings without an upstream option and no entry: "
                         f"{gaps}; entries naming no catalog setting: {unknown}")
    return spec


class _ValuesEnv:
    """The expression environment over a resolved configuration (values, facts, provenance)."""

    def __init__(self, config: ResolvedConfig, defaults: Mapping[str, Any]):
        self._config = config
        self._defaults = defaults

    def flag(self, name: str) -> Any:
        return self._config.values.get(name)

    def fact(self, key: str) -> Any:
        if key not in self._config.facts:
            raise UnknownFact(key)
        return self._config.facts[key]

    def is_set(self, name: str) -> bool:
        return (self._config.provenance.get(name) or {}).get("source") in USER_SOURCES

    def user_value(self, name: str) -> Any:
        return self._config.values.get(name) if self.is_set(name) else None

    def default(self, name: str) -> Any:
        return self._defaults.get(name)


@functools.lru_cache(maxsize=None)
def _expr(source: Any):
    return parse(source)


def _eval(source: Any, env: _ValuesEnv) -> Any:
    try:
        return _expr(source)(env)
    except UnknownFact:
        return None


def _same(a: Any, b: Any) -> bool:
    """Equal as upstream sees them: tuples and lists alike, 1 and 1.0 alike, True never 1."""
    a, b = thaw(a), thaw(b)
    a = list(a) if isinstance(a, tuple) else a
    b = list(b) if isinstance(b, tuple) else b
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def emit(config: ResolvedConfig, launcher: Sequence[str] | None = None) -> Launch:
    """The upstream launch of `config` (see the module docstring for what is written and why)."""
    spec = load_spec(config.system)
    catalog = load_catalog(config.system)
    defaults = catalog.defaults()
    env = _ValuesEnv(config, defaults)
    computed = {field for entry in spec.written_as for field in entry["carries"]}
    options: list[Option] = []
    warnings: list[str] = []
    left: dict[str, Any] = {}
    for name, value in config.values.items():
        flag = catalog.flags.get(name)
        if flag is None or flag.meta or name in spec.expressed_by or name in computed:
            continue
        source = (config.provenance.get(name) or {}).get("source", "default")
        if name in spec.leave_to_upstream and source not in USER_SOURCES:
            left[name] = value
            continue
        entry = spec.flags.get(name)
        if entry is None:
            if not (source == "default" and _same(value, flag.default)):
                warnings.append(_lost(flag.primary, value, source, spec.no_upstream_flag.get(name)
                                      or "upstream has no option for it", spec.upstream))
            continue
        upstream_default = entry.get("default", flag.default)
        wanted = (name in spec.always_explicit or not _same(value, upstream_default)
                  or (source in USER_SOURCES and value is not None))
        if not wanted:
            continue
        option, why = _option(name, entry, value, upstream_default)
        if why:
            # Lost only if Accord decided it: the catalog's own default (say, unset: "let upstream
            # decide") that nobody typed and no rule changed leaves upstream to decide, as meant.
            if not (source == "default" and _same(value, flag.default)):
                warnings.append(_lost(entry["flag"], value, source, why, spec.upstream))
            continue
        if option is not None:
            options.append(option)
    for entry in spec.written_as:
        if "when" in entry and not _eval(entry["when"], env):
            continue
        value = _eval(entry["value"], env)
        if value is None or (not entry.get("always") and _same(value, entry.get("default"))):
            continue
        options.append(Option(entry["flag"], entry.get("form", "value"), value, tuple(entry["carries"]),
                              entry.get("dest", entry["flag"][2:].replace("-", "_"))))
    for name, entry in spec.expressed_by.items():
        if name in config.values and "check" in entry and not _eval(entry["check"], env):
            warnings.append(_lost(catalog[name].primary, config.values[name], (config.provenance.get(name) or {})
                                  .get("source", "default"), f"it is carried by {', '.join(entry['by'])}, "
                                  f"which do not say the same", spec.upstream))
    env_out = {item["name"]: str(item["value"]) for item in spec.env if _eval(item["when"], env)}
    options, older, release = for_release(options, config.system, config.facts, Option)
    return Launch(config.system, tuple(launcher) if launcher else spec.launcher, tuple(options),
                  env_out, config.values, (*warnings, *older), left, release)


def _option(name: str, entry: Mapping[str, Any], value: Any, upstream_default: Any) -> tuple[Option | None, str | None]:
    """(the option that carries `value`, None), or (None, why no option can)."""
    form, spelling = entry["form"], entry["flag"]
    choices = entry.get("choices")
    if value is None:
        return None, (None if upstream_default is None else "upstream's option has no spelling for unset")
    if form == "switch":
        if value:
            return Option(spelling, form, True, (name,), name), None
        return None, (None if not upstream_default else f"{spelling} can only switch it on")
    if form in ("negatable", "bool_value"):
        return Option(spelling, form, bool(value), (name,), name), None
    if form == "list":
        items = list(thaw(value)) if isinstance(value, (list, tuple)) else [value]
        if not items:
            return None, (None if not upstream_default else f"{spelling} cannot be given an empty list")
        return Option(spelling, form, tuple(items), (name,), name), None
    if choices is not None and value not in choices:
        return None, f"upstream's {spelling} accepts only {', '.join(map(str, choices))}"
    return Option(spelling, form, value, (name,), name), None


def _lost(spelling: str, value: Any, source: str, why: str, upstream: str) -> str:
    shown = json.dumps(thaw(value)) if not isinstance(value, str) else value
    return (f"{spelling}={shown} (from {source}) cannot be passed to {upstream}: {why}; "
            f"upstream will run on its own choice for it.")


def check_launcher(words: Iterable[str]) -> tuple[str, ...]:
    """A launcher given as one shell string, split; an empty one is a usage error."""
    words = tuple(words)
    if not words:
        raise UsageError("--launcher is empty: give the command that starts upstream as one shell "
                         "string, or leave --launcher out for the system's own (rules/<system>/upstream_launch.yaml).")
    return words
