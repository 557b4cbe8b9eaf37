"""`accord flags`: every seed registration is listed and searchable; short forms are marked."""

from __future__ import annotations

import json

import pytest

from accord.resolver import cli
from accord.resolver.commands.flags import entries, main
from accord.resolver.language.catalog import SYSTEMS, load_catalog
from tests.test_catalog import ENGINE_ONLY_FLAGS


def _json(capsys, *argv: str) -> list[dict]:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("system, count", [("llm", 506), ("diffusion", 79)])
def test_json_lists_one_entry_per_seed_registration(capsys, system, count):
    assert len(_json(capsys, "--system", system, "--json")) == count + len(ENGINE_ONLY_FLAGS[system])


@pytest.mark.parametrize("system", SYSTEMS)
def test_json_entries_match_the_reference_registrations(capsys, system, reference_flags):
    listed = [e for e in _json(capsys, "--system", system, "--json") if e["name"] not in ENGINE_ONLY_FLAGS[system]]
    reference = reference_flags(system)["flags"]
    assert len(listed) == len(reference)
    spellings = {s for e in listed for s in e["flags"]}
    for reg in reference:
        assert set(reg["option_strings"] + reg["negated_flags"]) <= spellings, reg["dest"]
    assert sorted(e["name"] for e in listed) == sorted(r["dest"] for r in reference)


def test_each_json_entry_carries_the_documented_fields(capsys):
    entry = _json(capsys, "--json", "--tp")[0]
    assert {"name", "flags", "type", "choices", "default", "group", "deprecated", "help"} <= set(entry)
    assert entry["name"] == "tp_size" and entry["flags"] == ["--tp-size", "--tensor-parallel-size", "--tp"]
    assert entry["short_forms"] == ["--tp"] and entry["type"] == "int" and entry["default"] == 1


def test_a_deprecated_registration_says_what_it_now_sets(capsys):
    listed = _json(capsys, "--json", "cuda_graph_backend_prefill")
    old = {e["flags"][0]: e["deprecated"] for e in listed if e["deprecated"]}
    assert old["--enable-breakable-cuda-graph"] == {"replacement": "--cuda-graph-backend-prefill=breakable",
                                                    "sets": "cuda_graph_backend_prefill", "value": "breakable"}
    assert old["--disable-piecewise-cuda-graph"]["value"] == "disabled"


def test_the_table_marks_short_forms_and_deprecations(capsys):
    assert main(["--group", "parallel"]) == 0
    out = capsys.readouterr().out
    assert "--tp-size, --tensor-parallel-size, --tp (short form)  [int]  (default 1; parallel)" in out
    assert "--nsa-prefill-cp-mode  [in-seq-split|round-robin-split]" in out and "deprecated: use --cp-strategy" in out


def test_a_word_searches_names_spellings_and_help(capsys):
    assert main(["speculative_eagle"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--speculative-eagle-topk  [int or none]")


def test_an_exact_name_shows_the_flag_in_detail(capsys):
    assert main(["--system", "diffusion", "--mode"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "performance_mode  (diffusion, group parallel, seed line 1372)"
    assert "accepts:   one of: manual, auto, speed, memory" in out


def test_the_detail_of_a_flag_lists_its_choice_metadata(capsys):
    assert main(["--system", "diffusion", "attention_backend"]) == 0
    out = capsys.readouterr().out
    assert "  choice metadata (rules read meta(attention_backend).PROPERTY):" in out
    assert "    ring (default false): Implements ring attention" in out
    assert "      true: fa, fa3, fa4, sage_attn" in out


@pytest.mark.parametrize("argv, message", [
    (["--group", "nope"], "accord flags: unknown group 'nope' for --system llm; groups: device, disagg,"),
    (["--system", "sd"], "accord flags: unknown system 'sd' for --system; use one of: llm, diffusion."),
    (["zzzq"], "accord flags: no llm flag matches 'zzzq'."),
    (["--tp-sise"], "accord flags: no llm flag matches '--tp-sise'. Did you mean --tp-size?"),
])
def test_bad_flags_queries_exit_2_with_one_line(capsys, argv, message):
    assert cli.main(["flags", *argv]) == 2
    assert capsys.readouterr().err.startswith(message)


def test_output_is_deterministic(capsys):
    first = _json(capsys, "--json")
    assert first == _json(capsys, "--json")
    assert [e["name"] for e in first] == [e["name"] for e in entries(load_catalog("llm"))]
