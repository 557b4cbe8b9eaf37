"""The flag catalogs (rules/*/flags*.yaml): complete, consistent, and faithful to the seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS, load_catalog

KIND_TO_TYPE = {"bool": "bool", "int": "int", "float": "float", "str": "str", "enum": "enum",
                "list": "list", "dict/json": "json"}

# Where the catalog knowingly differs from ../shared/reference, and why.
TYPE_DEVIATIONS = {
    # The seed registers `type=int` but defaults to 3.05 s; a float keeps the default legal and
    # still accepts every integer the seed accepts.
    ("diffusion", "srt_encoder_connection_timeout"): "float",
    # The seed registers `type=str`: JSON text, a JSON/YAML file path or key=value pairs all parse.
    ("diffusion", "attention_backend_config"): "str",
}
# The reference could not read these choice lists (imported or computed at runtime); the catalog
# lists the values the seed's own help names (or upstream's list) and marks runtime-filled ones.
FILLED_CHOICES = {
    ("llm", "kv_canary_real_data"), ("llm", "lora_target_modules"), ("llm", "reasoning_parser"),
    ("llm", "tool_call_parser"), ("llm", "sampling_backend"), ("diffusion", "performance_mode"),
}
# Lists the seed fills at runtime from a parser registry: the reference records only the static
# "auto"; the catalog adds upstream 0.5.23's registered names after it.
REGISTRY_CHOICES = {("llm", "reasoning_parser"), ("llm", "tool_call_parser")}
# The reference records the deprecated registration's argparse.SUPPRESS; the field's own default
# (seed line 1085) is what applies when the flag is not given.
DEFAULT_DEVIATIONS = {("llm", "dsa_prefill_cp_mode"): "round-robin-split"}
# Defaults outside the declared CLI type: the seed's dataclass default is a dict, while the command
# line takes "component=backend,..." text.
DEFAULT_OUTSIDE_TYPE = {("diffusion", "component_attention_backends")}
PY_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list": list}


def _main_registrations(reference: dict) -> dict[str, dict]:
    """dest -> the registration that declares the flag (not a deprecated alias of it)."""
    out: dict[str, dict] = {}
    for reg in reference["flags"]:
        mechanism = (reg.get("deprecation") or {}).get("mechanism")
        primary = not reg["deprecated"] or mechanism == "help_text"
        if reg["dest"] not in out or (primary and out[reg["dest"]]["deprecated"]):
            out[reg["dest"]] = reg
    return out


# Flags of Accord's own engine (`accord serve`) that upstream SGLang does not have; the engine
# profile (rules/<system>/engine.yaml) sets their defaults and refuses them for an upstream launch.
ENGINE_ONLY_FLAGS = {"llm": {"drain_timeout"}, "diffusion": set()}


@pytest.mark.parametrize("system", SYSTEMS)
def test_catalog_has_exactly_the_reference_flag_names(system, reference_flags):
    reference = _main_registrations(reference_flags(system))
    assert sorted(load_catalog(system).flags) == sorted([*reference, *ENGINE_ONLY_FLAGS[system]])


@pytest.mark.parametrize("system", SYSTEMS)
def test_engine_only_flags_are_refused_for_an_upstream_launch(system):
    from accord.resolver.language.ruleset import load_rules

    for name in ENGINE_ONLY_FLAGS[system]:
        assert any(rule.file == "engine.yaml" and rule.kind == "conflict" and name in rule.reads_flags
                   and "not (known(engine)" in rule.when.source for rule in load_rules(system)), name


@pytest.mark.parametrize("system", SYSTEMS)
def test_catalog_types_and_nullability_match_the_reference(system, reference_flags):
    catalog = load_catalog(system)
    for name, reg in _main_registrations(reference_flags(system)).items():
        flag = catalog[name]
        expected = TYPE_DEVIATIONS.get((system, name), KIND_TO_TYPE[reg["base_kind"]])
        assert flag.type == expected, name
        if reg["kind"].startswith("optional["):
            assert flag.nullable, name
        elif flag.nullable:  # nullable beyond the annotation only where None is the real default
            assert flag.default is None, name


@pytest.mark.parametrize("system", SYSTEMS)
def test_catalog_choices_match_the_reference(system, reference_flags):
    catalog = load_catalog(system)
    for name, reg in _main_registrations(reference_flags(system)).items():
        flag = catalog[name]
        expected = reg["choices"] or reg.get("choices_inferred")
        if expected and (system, name) in REGISTRY_CHOICES:
            assert list(flag.choices[:len(expected)]) == expected and len(flag.choices) > len(expected), name
        elif expected:
            assert list(flag.choices) == expected, name
        elif (system, name) in FILLED_CHOICES:
            assert flag.choices, name
        else:
            assert flag.choices is None, name


@pytest.mark.parametrize("system", SYSTEMS)
def test_catalog_defaults_match_the_reference(system, reference_flags):
    catalog = load_catalog(system)
    for name, reg in _main_registrations(reference_flags(system)).items():
        expected = DEFAULT_DEVIATIONS.get((system, name), reg["default"])
        assert catalog[name].default == expected, name


@pytest.mark.parametrize("system", SYSTEMS)
def test_catalog_spellings_match_the_reference(system, reference_flags):
    catalog = load_catalog(system)
    for reg in reference_flags(system)["flags"]:
        flag = catalog[reg["dest"]]
        for spelling in reg["option_strings"] + reg["negated_flags"]:
            assert spelling in flag.option_strings, (reg["dest"], spelling)


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_flag_has_a_one_line_help(system):
    for flag in load_catalog(system):
        assert flag.help and "\n" not in flag.help and flag.help.endswith("."), flag.name
        assert len(flag.help) <= 200, flag.name


@pytest.mark.parametrize("system", SYSTEMS)
def test_defaults_are_legal_values_of_their_flag(system):
    for flag in load_catalog(system):
        if flag.default is None:
            assert flag.nullable, flag.name
        elif flag.type == "enum":
            assert flag.default in flag.choices, flag.name
        elif flag.type in PY_TYPES and (system, flag.name) not in DEFAULT_OUTSIDE_TYPE:
            assert type(flag.default) is PY_TYPES[flag.type], flag.name


@pytest.mark.parametrize("system", SYSTEMS)
def test_deprecated_spellings_store_legal_values(system):
    for flag in load_catalog(system):
        for spelling in flag.deprecated_spellings:
            if spelling.value is None:
                continue
            if flag.type == "enum":
                assert spelling.value in flag.choices, spelling.flag
            else:
                assert flag.type == "bool" and spelling.value is True, spelling.flag


def test_llm_short_forms_in_common_use_are_explicit_aliases():
    catalog = load_catalog("llm")
    owners = {s: f.name for f in catalog for s in f.option_strings}
    assert owners["--tp"] == "tp_size" and owners["--dp"] == "dp_size"
    # Upstream 0.5.23's argparse finds --pp ambiguous (--pp-size, --pp-max-micro-batch-size, ...).
    assert "--pp" not in owners
    assert owners["--ep"] == "ep_size" and owners["--mem-fraction"] == "mem_fraction_static"
    assert "--mem-fraction" in catalog["mem_fraction_static"].short_forms


def test_human_readable_integers_are_the_seeds_three_flags():
    human = sorted(f.name for f in load_catalog("llm") if f.human_int)
    assert human == ["context_length", "max_prefill_tokens", "max_total_tokens"]


@pytest.mark.parametrize("system", SYSTEMS)
def test_extensible_choice_lists_name_their_source(system):
    for flag in load_catalog(system):
        if flag.extensible:
            assert flag.choices and flag.choices_from, flag.name


def test_shipped_catalog_is_read_once_per_process():
    assert load_catalog("llm") is load_catalog("llm")


def _write_catalog(root: Path, *entries: str) -> None:
    folder = root / "llm" / "flags"
    folder.mkdir(parents=True)
    for i, text in enumerate(entries):
        (folder / f"g{i}.yaml").write_text(text, encoding="utf-8")


def test_an_option_string_claimed_by_two_flags_is_rejected(tmp_path):
    _write_catalog(
        tmp_path,
        "group: a\nflags:\n- {name: tp_size, flags: [--tp-size], type: int, default: 1, help: x.}\n",
        "group: b\nflags:\n- {name: tp, flags: [--tp-size], type: int, default: 1, help: y.}\n",
    )
    with pytest.raises(UsageError, match="option --tp-size belongs to both 'tp_size' and 'tp'"):
        load_catalog("llm", tmp_path)


def test_an_unknown_catalog_key_is_rejected(tmp_path):
    _write_catalog(tmp_path, "group: a\nflags:\n- {name: x, flags: [--x], type: int, colour: red}\n")
    with pytest.raises(UsageError, match=r"flag 'x' has unknown keys \['colour'\]"):
        load_catalog("llm", tmp_path)


# -- choice metadata (`choice_meta:`), read by rules as meta(flag).prop ------------------------------

KERNEL = ("- name: kernel\n  flags: [--kernel]\n  type: enum\n  nullable: true\n  default: null\n"
          "  choices: [k1, k2, k3]\n  help: x.\n")
PROPS = "    properties:\n      vendor: {default: null, about: Who builds it.}\n      fast: {default: false, about: Quick.}\n"


def _with_meta(choices: str, props: str = PROPS, other: str = "") -> str:
    return f"group: a\nflags:\n{KERNEL}  choice_meta:\n{props}    choices:\n{choices}{other}"


def test_choice_metadata_gives_each_value_its_properties_and_the_rest_the_default(tmp_path):
    _write_catalog(tmp_path, _with_meta("      k1: {vendor: acme, fast: true}\n      k2: {vendor: acme}\n"))
    flag = load_catalog("llm", tmp_path)["kernel"]
    assert [p.name for p in flag.choice_meta] == ["vendor", "fast"]
    assert [flag.meta_property("vendor").of(v) for v in ("k1", "k2", "k3", None)] == ["acme", "acme", None, None]
    assert [flag.meta_property("fast").of(v) for v in ("k1", "k2")] == [True, False]


def test_a_flag_with_the_same_choices_shares_metadata_by_same_as(tmp_path):
    other = KERNEL.replace("name: kernel", "name: prefill_kernel").replace("--kernel", "--prefill-kernel")
    _write_catalog(tmp_path, _with_meta("      k1: {vendor: acme}\n",
                                        other=other + "  choice_meta: {same_as: kernel}\n"))
    catalog = load_catalog("llm", tmp_path)
    assert catalog["prefill_kernel"].choice_meta == catalog["kernel"].choice_meta
    assert catalog.choice_metadata().keys() == {"kernel", "prefill_kernel"}


@pytest.mark.parametrize("choices, props, named", [
    ("      k1: {vendr: acme}\n", PROPS, "undeclared property 'vendr'"),
    ("      k7: {vendor: acme}\n", PROPS, "describes 'k7', which is not one of its choices"),
    ("      k1: {vendor: acme}\n      k2: {vendor: 3}\n", PROPS, "property 'vendor' mixes value types"),
    ("      k1: {vendor: {a: 1}}\n", PROPS, "a property value is a string, number, boolean"),
    ("      k1: {vendor: acme}\n", "    properties:\n      vendor: {default: null}\n", "needs exactly 'default'"),
])
def test_bad_choice_metadata_is_rejected_naming_the_flag_and_what_is_wrong(tmp_path, choices, props, named):
    _write_catalog(tmp_path, _with_meta(choices, props))
    with pytest.raises(UsageError, match="flag 'kernel'") as err:
        load_catalog("llm", tmp_path)
    assert named in str(err.value)


def test_same_as_needs_a_flag_with_metadata_and_the_same_choices(tmp_path):
    other = KERNEL.replace("name: kernel", "name: other").replace("--kernel", "--other").replace("k3]", "k4]")
    _write_catalog(tmp_path, _with_meta("      k1: {vendor: acme}\n", other=other + "  choice_meta: {same_as: kernel}\n"))
    with pytest.raises(UsageError, match="flag 'other': choice_meta same_as 'kernel', but their choices differ"):
        load_catalog("llm", tmp_path)


def test_metadata_on_a_flag_without_choices_is_rejected(tmp_path):
    _write_catalog(tmp_path, "group: a\nflags:\n- name: n\n  flags: [--n]\n  type: int\n  default: 1\n  help: x.\n"
                             f"  choice_meta:\n{PROPS}    choices: {{}}\n")
    with pytest.raises(UsageError, match="flag 'n' has choice_meta but is neither an enum flag with choices nor an open str"):
        load_catalog("llm", tmp_path)


def test_an_auto_choice_must_be_the_default_choice(tmp_path):
    # typing it must mean what leaving the flag out means, or dropping it would change the value
    _write_catalog(tmp_path, "group: a\nflags:\n- {name: lb, flags: [--lb], type: enum, choices: [auto, rr], "
                             "default: rr, auto_choice: auto, help: x.}\n")
    with pytest.raises(UsageError, match="auto_choice 'auto', which must be one of its choices and its default"):
        load_catalog("llm", tmp_path)


def test_an_implication_belongs_to_a_value_alias(tmp_path):
    _write_catalog(tmp_path, "group: a\nflags:\n- {name: ab, flags: [--ab], type: enum, choices: [x, y], "
                             "default: x, value_aliases: {z: y}, alias_implies: {w: {ab: x}}, help: x.}\n")
    with pytest.raises(UsageError, match=r"alias_implies for \['w'\], which are not among its value_aliases"):
        load_catalog("llm", tmp_path)


def test_the_shipped_auto_choices_are_defaults_and_aliases_imply_known_flags():
    catalog = load_catalog("llm")
    marked = {f.name for f in catalog if f.auto_choice is not None}
    assert {"kv_cache_dtype", "load_balance_method", "moe_runner_backend"} <= marked
    for flag in catalog:
        for _, sets in flag.alias_implies:
            assert all(name in catalog.flags for name, _ in sets), flag.name
