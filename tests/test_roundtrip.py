"""Round trip: `accord resolve --json` values, written to a YAML or JSON file and fed back with
`--config` (same facts), resolve to the same values and the same hash.

The values file is what a user would save and edit: explicit nulls (null means unset) or nulls
left out, retired and deprecated flags absent, diffusion's per-component maps as nested mappings.
The property runs over random commands (a few flags from finite domains, several presets, both
systems, with and without a model folder), through the real command line.
"""

from __future__ import annotations

import io
import json
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accord.resolver import api
from accord.resolver import cli
from accord.resolver.commandline.releases import release_catalog
from accord.resolver.commands.resolve import resolve_command
from accord.resolver.language.catalog import RULES_DIR, load_catalog
from tests.test_properties import _relevant_flags

PRESETS = ("h100", "a100", "b200", "l4", "mi300x", "cpu")
MODELS = {"llm": RULES_DIR / "models" / "tiny-llama", "diffusion": RULES_DIR / "models" / "tiny-dit"}


def _words(system: str, user: dict) -> list[str]:
    """The command-line words that set each of `user`'s flags (None and unnegatable False: left out)."""
    catalog = load_catalog(system)
    words: list[str] = []
    for name, value in sorted(user.items()):
        flag = catalog[name]
        if flag.type == "bool" and not flag.value_optional:
            if value:
                words.append(flag.primary)
            elif flag.negated:
                words.append(flag.negated[0])
        elif value is not None:
            words += [flag.primary, str(value).lower() if isinstance(value, bool) else str(value)]
    return words


def _accord(argv: list[str]) -> tuple[int, dict | None]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(["resolve", *argv, "--json"])
    return code, (json.loads(out.getvalue()) if code == 0 else None)


def _legal(argv: list[str]) -> bool:
    """Whether the command resolves (checked by the solver alone: explaining a conflict is slow)."""
    _, parsed, facts = resolve_command(argv, "accord resolve")
    return api.plan_for(parsed.system).solve(parsed.user, facts).satisfiable


def _round_trip(system: str, base: list[str], flags: list[str], fmt: str, nulls: bool) -> None:
    if not _legal([*base, *flags]):
        return  # a conflict: nothing to feed back
    code, first = _accord([*base, *flags])
    assert code == 0
    values = first["values"]
    if not nulls:
        values = {k: v for k, v in values.items() if v is not None}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"values.{fmt}"
        path.write_text(json.dumps(values) if fmt == "json" else yaml.safe_dump(values), encoding="utf-8")
        code, second = _accord([*base, "--config", str(path)])
    assert code == 0, (base, flags)
    changed = {k: (first["values"].get(k), second["values"].get(k))
               for k in set(first["values"]) | set(second["values"])
               if first["values"].get(k, "<absent>") != second["values"].get(k, "<absent>")}
    assert not changed, (base, flags, changed)
    assert second["hash"] == first["hash"]


def _finite_flags(system: str) -> dict[str, list]:
    """Flags and values to type: not deprecated, and parsed by the release the rules follow (a
    seed-only flag such as --cuda-graph-tc-compiler, or a seed-only value such as
    --attention-backend cutlass_mla, is refused on the command line before anything resolves)."""
    catalog = load_catalog(system)
    releases = release_catalog(system)
    flags = {}
    for name, values in _relevant_flags(system).items():
        if catalog[name].deprecated:
            continue
        action = releases.action(releases.newest, catalog[name].primary) if releases is not None else {}
        if action is None:
            continue
        choices = [str(choice) for choice in action.get("choices") or ()]
        kept = [value for value in values
                if not choices or value is None or isinstance(value, bool) or str(value) in choices]
        if kept:
            flags[name] = kept
    return flags


def commands(system: str):
    flags = _finite_flags(system)
    names = sorted(flags)
    chosen = st.lists(st.sampled_from(names), max_size=3, unique=True)
    return st.tuples(
        st.sampled_from(PRESETS),
        st.booleans(),
        chosen.flatmap(lambda picked: st.fixed_dictionaries({n: st.sampled_from(flags[n]) for n in picked})),
        st.sampled_from(("json", "yaml")),
        st.booleans(),
    )


@pytest.mark.parametrize("system", ("llm", "diffusion"))
def test_resolved_values_round_trip_through_config(system):
    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(commands(system))
    def check(case):
        preset, with_model, user, fmt, nulls = case
        base = ["--facts", preset, "--system", system]
        if with_model:
            base += ["--model-path", str(MODELS[system])]
        _round_trip(system, base, _words(system, user), fmt, nulls)

    check()


@pytest.mark.parametrize("system", ("llm", "diffusion"))
@pytest.mark.parametrize("fmt", ("json", "yaml"))
def test_default_launch_round_trips_with_and_without_nulls(system, fmt):
    base = ["--facts", "h100", "--system", system, "--model-path", str(MODELS[system])]
    for nulls in (True, False):
        _round_trip(system, base, [], fmt, nulls)


def test_retired_and_unset_deprecated_flags_are_not_in_the_values():
    code, out = _accord(["--facts", "h100", "--model-path", str(MODELS["llm"])])
    assert code == 0
    catalog = load_catalog("llm")
    deprecated = {f.name for f in catalog if f.deprecated}
    assert deprecated and not deprecated & set(out["values"])


def test_a_deprecated_flag_the_user_typed_stays_in_the_values():
    code, out = _accord(["--facts", "h100", "--model-path", str(MODELS["llm"]), "--disable-cuda-graph"])
    assert code == 0
    assert out["values"]["disable_cuda_graph"] is True
    assert out["values"]["cuda_graph_backend_decode"] == "disabled"


def test_diffusion_component_map_is_accepted_as_a_nested_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("component_attention_backends:\n  text_encoder: torch_sdpa\n", encoding="utf-8")
    code, out = _accord(["--facts", "h100", "--system", "diffusion", "--config", str(path)])
    assert code == 0
    assert out["values"]["component_attention_backends"] == {"text_encoder": "torch_sdpa"}
    assert out["provenance"]["component_attention_backends"]["source"] == "user"


def test_null_in_a_config_file_leaves_the_flag_unset(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"tp_size": None, "kv_cache_dtype": None}), encoding="utf-8")
    code, out = _accord(["--facts", "h100", "--config", str(path)])
    assert code == 0
    assert out["provenance"]["tp_size"]["source"] != "user"
    assert out["provenance"]["kv_cache_dtype"]["source"] != "user"


def test_saved_diffusion_values_feed_back_without_naming_the_system(tmp_path):
    """The saved values hold the model folder, which is what tells a diffusion launch apart."""
    code, first = _accord(["--facts", "h100", "--model-path", str(MODELS["diffusion"])])
    assert code == 0 and first["system"] == "diffusion"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(first["values"]), encoding="utf-8")
    code, second = _accord(["--facts", "h100", "--config", str(path)])
    assert code == 0
    assert (second["system"], second["hash"]) == ("diffusion", first["hash"])
