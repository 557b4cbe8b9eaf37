"""Facts: what is true of the machine (and model) a configuration is resolved for.

Rules never look at the hardware themselves; they read a flat dict with dotted keys (`gpu.sm`,
`packages.flashinfer`, `model.attention`). That dict comes from one of three places: `probe()`
(this machine), a preset in `rules/facts/<name>.yaml` (a machine you do not have), or a facts file
that sets some keys, optionally on top of a preset. Model facts come from the model folder
(`accord.resolver.facts.model`). Explicit facts (file, then `--fact KEY=VALUE`) beat probed or preset ones.

Two kinds of "nothing" are kept apart on purpose:
- an *unknown* fact is absent from the dict; a rule that needs it reports "unknown" instead of
  guessing (a hub model id gives no model facts);
- a *known nothing* is an explicit value: `cuda: null` on a CPU machine, `gpu.count: 0`,
  `interconnect.ib: []`.
Packages are the exception: `packages.<name>` holds the version of an installed kernel library and
is absent when the library is not installed, so rules test `known(packages.flashinfer)`. A null
package value (`--fact packages.flashinfer=none`) removes the package.

This module is the entry point (`load_facts`) and owns presets and facts files; the schema every
fact is checked against is `accord.resolver.facts.schema`, and probing this machine is
`accord.resolver.facts.probe`.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from accord.resolver.errors import UsageError
from accord.resolver.facts.model import model_facts
from accord.resolver.facts.probe import probe
from accord.resolver.facts.schema import PACKAGE_PREFIX, contradictions, parse_fact, spec_or_error, type_problem
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files
from accord.resolver.untrusted import SETTINGS_FILE_LIMIT, check_depth, parse_json, read_limited_text, too_deep

PRESETS_DIR = RULES_DIR / "facts"

# Keys a facts file or preset may carry besides facts: what it builds on and where its numbers
# come from. They describe the file; they are not facts.
_FILE_META = ("preset", "description", "sources")


# --- presets and facts files ---------------------------------------------------------------------

def list_presets() -> list[str]:
    """Names of the simulated machines in rules/facts/, sorted."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def _is_preset(spec: str) -> bool:
    """Whether `spec` is one of `list_presets()`, asked of its one file instead of listing the
    folder (every `load_facts` asks this)."""
    return bool(spec) and "/" not in spec and os.sep not in spec and (PRESETS_DIR / f"{spec}.yaml").exists()


def load_preset(name: str) -> dict[str, Any]:
    """The facts of one preset machine, sorted by key (a fresh dict each call)."""
    return {k: list(v) if isinstance(v, list) else v for k, v in _preset(name).items()}


@lru_cache(maxsize=None)
def _preset(name: str) -> dict[str, Any]:
    path = PRESETS_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise UsageError(_unknown_preset_message(name))
    base, facts = _read_facts_file(path, shipped=True)
    if base is not None:
        raise UsageError(f"{path}: a preset describes a whole machine and cannot build on "
                         f"another (remove 'preset: {base}').")
    return dict(sorted(facts.items()))


def _unknown_preset_message(name: str) -> str:
    import difflib  # error path only

    presets = list_presets()
    close = difflib.get_close_matches(name, presets, n=1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    return (f"unknown facts preset {name!r}. {hint}Give a preset ({', '.join(presets)}), "
            f"a YAML/JSON facts file, or 'probe' for this machine.")


def _read_facts_file(path: Path, shipped: bool = False) -> tuple[str | None, dict[str, Any]]:
    """(the preset it builds on or None, its facts) for a YAML or JSON facts file.

    A `shipped` file (a preset) is parsed through the YAML cache, so a cold start needs no YAML
    parser; anything that cache cannot read as one document is parsed below, with its message."""
    documents = None
    if shipped and path.suffix != ".json":
        try:
            documents = read_yaml_files([path])[0]
        except UsageError:
            documents = None
    if documents is not None and len(documents) <= 1:
        return _facts_from_data(path, documents[0] if documents else None)
    text = read_limited_text(path, SETTINGS_FILE_LIMIT, "facts file")
    import yaml  # here, not at the top: a preset or no facts file at all never needs it

    try:
        if path.suffix == ".json":
            data = parse_json(text, f"facts file {path}")
        else:
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            check_depth(data, f"facts file {path}")
    except RecursionError:
        raise too_deep(f"facts file {path}") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}, line {err.lineno}: not valid JSON ({err.msg}).") from None
    except yaml.YAMLError as err:
        from accord.resolver.language.yamlerrors import problem_line  # error path only

        line = problem_line(err, text)
        where = f"{path}, line {line}" if line is not None else str(path)
        problem = getattr(err, "problem", None) or "not valid YAML"
        raise UsageError(f"{where}: not valid YAML ({problem}).") from None
    return _facts_from_data(path, data)


def _facts_from_data(path: Path, data: Any) -> tuple[str | None, dict[str, Any]]:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a facts file is a mapping of fact keys to values "
                         f"(e.g. 'preset: h100' and 'gpu.sm: 100'), not a {type(data).__name__}.")
    base = data.get("preset")
    if base is not None and not isinstance(base, str):
        raise UsageError(f"{path}: 'preset' names a preset (e.g. preset: h100), not {base!r}.")
    facts = _flatten({k: v for k, v in data.items() if k not in _FILE_META}, str(path))
    return base, facts


def _flatten(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Nested mappings to dotted keys: {"gpu": {"sm": 90}} -> {"gpu.sm": 90}; types checked."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            if isinstance(value, Mapping):
                walk(key + ".", value)
                continue
            spec_or_error(key, where)
            if key in flat:
                raise UsageError(f"{where}: fact {key!r} is set twice (once nested, once dotted); keep one.")
            problem = type_problem(key, value)
            if problem:
                raise UsageError(f"{where}: {problem}.")
            flat[key] = value

    walk("", data)
    return flat


def _base_facts(spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(probed or preset facts, explicit facts) for a `--facts` value."""
    if spec == "probe":
        return probe(), {}
    if _is_preset(spec):
        return load_preset(spec), {}
    path = Path(spec).expanduser()
    if path.is_file():
        base, explicit = _read_facts_file(path)
        if base is None:
            return {}, explicit  # a file without `preset:` is the whole fact set
        return (probe() if base == "probe" else load_preset(base)), explicit
    if path.suffix in (".yaml", ".yml", ".json") or os.sep in spec:
        raise UsageError(f"facts file {spec} does not exist. Give an existing YAML/JSON file, a "
                         f"preset ({', '.join(list_presets())}), or 'probe'.")
    raise UsageError(_unknown_preset_message(spec))


def saved_facts(config_file: str | None) -> dict[str, Any] | None:
    """The facts a saved `accord resolve --json` output was resolved against (None: the file is
    not one). Read back with `--config`, such a file means "this launch, on that machine": without
    `--facts` it resolves against these facts, model facts included, so the hash comes back the same."""
    if not config_file or not config_file.endswith(".json"):
        return None
    from accord.resolver.commandline.configfile import RESOLVED_KEYS

    try:
        data = parse_json(read_limited_text(config_file, SETTINGS_FILE_LIMIT, "config file"), config_file)
    except (UsageError, ValueError):
        return None  # reading it as a config file reports what is wrong with it
    if not isinstance(data, dict) or not RESOLVED_KEYS <= set(data) or not isinstance(data.get("facts"), dict):
        return None
    return _facts_from_data(Path(config_file), data["facts"])[1]


def with_overrides(facts: Mapping[str, Any], overrides: Sequence[str], given: str) -> dict[str, Any]:
    """`facts` with each `--fact KEY=VALUE` applied and checked for contradictions, sorted."""
    facts = dict(facts)
    facts.update(parse_fact(item) for item in overrides)
    facts = {k: v for k, v in facts.items() if not (k.startswith(PACKAGE_PREFIX) and v is None)}
    problems = contradictions(facts)
    if problems:
        given += "".join(f" --fact {o}" for o in overrides)
        raise UsageError(
            f"impossible facts from {given}: {'; '.join(problems)}. Correct the facts file or "
            f"--fact values, or start from a preset that matches the machine "
            f"({', '.join(list_presets())}).")
    return dict(sorted(facts.items()))


def load_facts(spec: str = "probe", overrides: Sequence[str] = (), model_path: str | None = None,
               system: str = "llm", revision: str | None = None) -> dict[str, Any]:
    """The facts to resolve against, sorted by key.

    Layered, later wins: the machine (probe, a preset, or what a facts file's `preset:` names,
    which may be `probe`), then the model's facts (from its folder, the Hugging Face cache, the
    hub or a built-in card, at `revision`: accord.resolver.facts.model_sources), then the facts file's own values, then
    each `--fact KEY=VALUE`. A facts file without `preset:` is the whole machine: nothing is
    probed, so it resolves the same everywhere. Raises
    UsageError for an unknown preset or key, a bad value, or facts no machine could have.
    """
    base, explicit = _base_facts(spec)
    return with_overrides({**base, **model_facts(model_path, system, revision), **explicit}, overrides,
                          f"--facts {spec}")
