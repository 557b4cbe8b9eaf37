"""The SGLang-compatible command line: every seed spelling parses, bad input gets one clear paragraph."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from accord.resolver.commandline.flagparse import detect_system, parse_flags
from accord.resolver import cli
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS, Flag, load_catalog

PY_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "json": (dict, list)}
SAMPLE_WORDS = {"int": (["7"], 7), "float": (["0.25"], 0.25), "str": (["some-text"], "some-text"),
                "json": (['{"k": [1, 2]}'], {"k": [1, 2]})}
SAMPLE_ELEMENTS = {"int": (["1", "2"], [1, 2]), "float": (["0.5", "2"], [0.5, 2.0]), "str": (["a", "b"], ["a", "b"]),
                   "json_or_str": (["a=b", '{"lora_name": "x"}'], ["a=b", {"lora_name": "x"}])}


def _sample(flag: Flag) -> tuple[list[str], object]:
    """Words that set `flag` after one of its value-taking spellings, and the value they mean."""
    if flag.type == "bool":
        return (["false"], False) if flag.value_optional else ([], True)
    if flag.type == "enum":
        return [str(flag.choices[-1])], flag.choices[-1]
    if flag.type == "list":
        if flag.choices:
            return [str(c) for c in flag.choices[:2]], list(flag.choices[:2])
        return SAMPLE_ELEMENTS[flag.element or "str"]
    if flag.format == "json":
        return ['{"k": 1}'], '{"k": 1}'
    return SAMPLE_WORDS[flag.type]


def _cases():
    """(system, argv, flag, expected value or None when nothing is stored) for every spelling."""
    for system in SYSTEMS:
        for flag in load_catalog(system):
            if flag.meta:
                continue
            words, value = _sample(flag)
            retired = (flag.deprecated or {}).get("ignored")
            for spelling in flag.flags + flag.short_forms:
                expected = None if retired else value
                yield pytest.param(system, [spelling, *words], flag, expected, id=f"{system}{spelling}")
            for spelling in flag.negated:
                yield pytest.param(system, [spelling], flag, False, id=f"{system}{spelling}")
            for old in flag.deprecated_spellings:
                argv = [old.flag] if old.value is not None else [old.flag, *words]
                expected = old.value if old.value is not None else value
                yield pytest.param(system, argv, flag, expected, id=f"{system}{old.flag}")


def _assert_declared_type(flag: Flag, value) -> None:
    if flag.type == "enum":
        assert value in flag.choices
    elif flag.type == "list":
        assert isinstance(value, list)
    else:
        assert isinstance(value, PY_TYPES[flag.type]) and not (flag.type == "int" and isinstance(value, bool))


@pytest.mark.parametrize("system, argv, flag, expected", list(_cases()))
def test_every_spelling_parses_to_the_declared_type(system, argv, flag, expected):
    if (flag.deprecated or {}).get("removed"):
        with pytest.raises(UsageError):
            parse_flags(argv, system=system)
        return
    _, parsed = parse_flags(argv, system=system)
    if expected is None:
        assert parsed.user == {} and len(parsed.warnings) == 1
        return
    assert parsed.user == {flag.name: expected}
    assert parsed.sources == {flag.name: "cli"}
    _assert_declared_type(flag, parsed.user[flag.name])


def test_equals_spelling_and_separate_value_mean_the_same():
    _, a = parse_flags(["--tp-size=4", "--attention-backend=fa3"])
    _, b = parse_flags(["--tp-size", "4", "--attention-backend", "fa3"])
    assert a.user == b.user == {"tp_size": 4, "attention_backend": "fa3"}


def test_a_launch_command_from_the_wild_parses_unchanged():
    argv = ("--model-path meta-llama/Llama-3.1-8B-Instruct --tp 8 --dp 2 --enable-dp-attention "
            "--mem-fraction 0.85 --context-length 128k --chunked-prefill-size -1 --cuda-graph-bs 1 2 4 8 "
            "--kv-cache-dtype fp8_e4m3 --json-model-override-args {\"rope_scaling\":null}").split()
    _, parsed = parse_flags(argv)
    assert parsed.user == {
        "model_path": "meta-llama/Llama-3.1-8B-Instruct", "tp_size": 8, "dp_size": 2, "enable_dp_attention": True,
        "mem_fraction_static": 0.85, "context_length": 128000, "chunked_prefill_size": -1,
        "cuda_graph_bs_decode": [1, 2, 4, 8], "kv_cache_dtype": "fp8_e4m3",
        "json_model_override_args": '{"rope_scaling":null}',
    }


def test_the_last_occurrence_of_a_flag_wins():
    _, parsed = parse_flags(["--tp", "2", "--tensor-parallel-size", "4"])
    assert parsed.user == {"tp_size": 4}


def test_a_deprecated_spelling_sets_its_replacement_and_warns_once():
    _, parsed = parse_flags(["--enable-breakable-cuda-graph"])
    assert parsed.user == {"cuda_graph_backend_prefill": "breakable"}
    assert parsed.warnings == ("--enable-breakable-cuda-graph is deprecated; use "
                               "--cuda-graph-backend-prefill=breakable instead (it sets cuda_graph_backend_prefill).",)


def test_a_renamed_spelling_takes_the_new_flags_value():
    _, parsed = parse_flags(["--cuda-graph-max-bs", "160"])
    assert parsed.user == {"cuda_graph_max_bs_decode": 160}
    assert parsed.warnings == ("--cuda-graph-max-bs is deprecated; use --cuda-graph-max-bs-decode instead "
                               "(it sets cuda_graph_max_bs_decode).",)


def test_a_deprecated_flag_that_still_works_is_stored_with_a_warning():
    _, parsed = parse_flags(["--disable-cuda-graph"])
    assert parsed.user == {"disable_cuda_graph": True}
    assert parsed.warnings == ("--disable-cuda-graph is deprecated; use --cuda-graph-backend-{decode,prefill}=disabled "
                               "instead.",)


def test_an_ignored_flag_stores_nothing_and_warns():
    _, parsed = parse_flags(["--collect-tokens-histogram"])
    assert parsed.user == {}
    assert parsed.warnings == ("--collect-tokens-histogram is deprecated and has no effect; it was ignored.",)


def test_a_value_outside_a_plugin_extensible_list_is_refused_unless_declared():
    with pytest.raises(UsageError) as err:
        parse_flags(["--attention-backend", "flashinfr"])
    assert "Did you mean 'flashinfer'?" in str(err.value)
    assert "--extend-choices attention_backend=flashinfr" in str(err.value)
    _, parsed = parse_flags(["--attention-backend", "my_attn", "--extend-choices", "attention_backend=my_attn"])
    assert parsed.user == {"attention_backend": "my_attn"}
    assert "--extend-choices declares it" in parsed.warnings[0]


def test_extend_choices_is_refused_for_a_fixed_upstream_list():
    with pytest.raises(UsageError, match="fixed choice list upstream"):
        parse_flags(["--extend-choices", "kv_cache_dtype=fp6"])


def test_upstream_registry_names_are_known_values():
    _, parsed = parse_flags(["--reasoning-parser", "deepseek-r1", "--tool-call-parser", "qwen3_coder"])
    assert parsed.user == {"reasoning_parser": "deepseek-r1", "tool_call_parser": "qwen3_coder"}
    assert parsed.warnings == ()


def test_a_flag_given_twice_warns_with_both_values_and_keeps_the_last():
    _, parsed = parse_flags(["--tp", "2", "--tp-size", "4"])
    assert parsed.user == {"tp_size": 4}
    assert parsed.warnings == ("--tp-size is given twice (--tp 2, then --tp-size 4); the last one is used.",)


# --- bad input: one paragraph naming what is wrong and how to fix it ---------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--tp-sise", "2"], "unknown flag --tp-sise; did you mean --tp-size? Search with "
                         "`accord flags --system llm WORD`."),
    (["--tp_size", "2"], "unknown flag --tp_size; did you mean --tp-size? Search with "
                         "`accord flags --system llm WORD`."),
    (["--enable-dp", "--tp", "2"], "ambiguous flag --enable-dp: it is the start of --enable-dp-attention, "
                                   "--enable-dp-attention-local-control-broadcast, --enable-dp-lm-head, as "
                                   "upstream's argparse also finds; write the full name."),
    (["--tp", "two"], "invalid value 'two' for --tp: expected an integer."),
    (["--mem-fraction-static", "most"], "invalid value 'most' for --mem-fraction-static: expected a number."),
    (["--kv-cache-dtype", "fp8_e4m4"], "invalid value 'fp8_e4m4' for --kv-cache-dtype: expected one of: auto, "
                                       "fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16, fp4_e2m1. "
                                       "Did you mean 'fp8_e4m3'?"),
    (["--context-length", "1.5K"], "invalid value '1.5K' for --context-length: expected an integer, optionally with a "
                                   "suffix k/m/g/t (x1000) or K/M/G/T (x1024), e.g. 32k. A fraction needs a decimal "
                                   "suffix: did you mean 1.5k?"),
    (["--cuda-graph-config", "{bad"], "invalid value '{bad' for --cuda-graph-config: expected JSON text (Expecting "
                                      "property name enclosed in double quotes at column 2)."),
    (["--tp-size"], "--tp-size needs a value: an integer."),
    (["--cuda-graph-bs-decode"], "--cuda-graph-bs-decode needs a value: an integer."),
    (["--enable-dp-attention", "true"], "unexpected value 'true': --enable-dp-attention is a switch and takes no "
                                        "value."),
    (["--enable-dp-attention=1"], "unexpected value '1': --enable-dp-attention is a switch and takes no value."),
    (["stray"], "unexpected argument 'stray': every value must follow the flag it belongs to."),
    (["--enable-expert-distribution-metrics"], "--enable-expert-distribution-metrics was removed and no longer works; "
                                               "use --expert-balancedness-report-mode instead."),
    (["--system", "sd"], "unknown system 'sd' for --system; use one of: llm, diffusion."),
    (["--mem-fraction-static", "nan"], "invalid value 'nan' for --mem-fraction-static: expected a finite number of "
                                       "reasonable size (at most 1e+15)."),
    (["--mem-fraction-static", "1e308"], "invalid value '1e308' for --mem-fraction-static: expected a finite number "
                                         "of reasonable size (at most 1e+15)."),
    (["--served-model-name", ""], "invalid value '' for --served-model-name: expected a non-empty value (a string). "
                                  "Give a value, or leave the flag out to keep its default."),
    (["--json-model-override-args", "{bad"], "invalid value '{bad' for --json-model-override-args: expected JSON "
                                             "text (Expecting property name enclosed in double quotes at column 2)."),
    (["--", "--tp", "2"], "unexpected `--`: it ends option parsing, so every flag after it would be read as a bare "
                          "word. Remove it; a launch command is flags and their values only."),
])
def test_bad_command_lines_get_one_paragraph_naming_flag_value_and_legal_values(argv, message):
    with pytest.raises(UsageError) as err:
        parse_flags(argv)
    assert str(err.value) == message and err.value.exit_code == 2


def test_a_diffusion_choice_error_names_the_diffusion_values():
    with pytest.raises(UsageError) as err:
        parse_flags(["--system", "diffusion", "--performance-mode", "speeed"])
    assert str(err.value) == ("invalid value 'speeed' for --performance-mode: expected one of: manual, auto, speed, "
                              "memory. Did you mean 'speed'?")


def test_the_cli_prints_a_usage_error_as_one_line_with_exit_code_2(capsys):
    assert cli.main(["resolve", "--tp-sise", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accord resolve: unknown flag --tp-sise; did you mean --tp-size?")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_help_lists_the_flag_groups_and_help_group_the_flags_of_one_and_exits_0(capsys):
    with pytest.raises(SystemExit) as done:
        parse_flags(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: accord [--system SYSTEM] [--config FILE]") and "parallel (" in out
    assert "--tp-size" not in out
    with pytest.raises(SystemExit) as done:
        parse_flags(["--help", "parallel"])
    assert done.value.code == 0
    assert "--tp-size, --tensor-parallel-size, --tp (short form)  [int]" in capsys.readouterr().out


# --- the calling command's own options ----------------------------------------------------------------------------

def _resolve_like_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", default="probe")
    parser.add_argument("--json", action="store_true")


def test_command_options_come_back_in_the_namespace_and_flags_in_parsed_flags():
    opts, parsed = parse_flags(["--facts", "h100", "--tp", "2", "--json"], add_options=_resolve_like_options)
    assert vars(opts) == {"facts": "h100", "json": True, "system": "llm", "config": None}
    assert parsed.user == {"tp_size": 2}


def test_an_explicit_system_must_agree_with_the_command_line():
    with pytest.raises(UsageError, match="--system diffusion contradicts this command, which works on the llm system"):
        parse_flags(["--system", "diffusion"], system="llm")


# --- --config ----------------------------------------------------------------------------------------------------

@pytest.fixture(params=["yaml", "json"])
def config_file(request, tmp_path):
    data = {"tp-size": 4, "dp": 2, "enable_dp_attention": True, "context_length": "32k",
            "cuda_graph_config": {"decode": {"backend": "full"}}}
    path = tmp_path / f"launch.{request.param}"
    if request.param == "json":
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    else:
        path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in data.items()), encoding="utf-8")
    return str(path)


def test_config_file_values_are_typed_and_the_command_line_wins(config_file):
    opts, parsed = parse_flags(["--config", config_file, "--tp", "8"])
    assert opts.config == config_file
    assert parsed.user == {"tp_size": 8, "dp_size": 2, "enable_dp_attention": True, "context_length": 32000,
                             "cuda_graph_config": {"decode": {"backend": "full"}}}
    from_file = f"config:{config_file}"
    assert parsed.sources == {"tp_size": "cli", "dp_size": from_file, "enable_dp_attention": from_file,
                              "context_length": from_file, "cuda_graph_config": from_file}


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_config_keys_may_be_deprecated_or_negated_spellings(tmp_path):
    path = _config(tmp_path, "stream-output: true\nno-lora-strict-loading: true\nenable-breakable-cuda-graph: false\n")
    _, parsed = parse_flags(["--config", path])
    assert parsed.user == {"incremental_streaming_output": True, "lora_strict_loading": False}
    assert parsed.warnings[0] == (f"{path}: stream-output is deprecated; use --incremental-streaming-output instead "
                                  "(it sets incremental_streaming_output).")


@pytest.mark.parametrize("text, message", [
    ("tp_size: 2\ntp_sise: 3\n", "line 2: unknown key 'tp_sise'; did you mean 'tp_size'? Keys are flag names such as "
                                 "tp_size or tp-size."),
    ("parallel:\n  tp_size: 2\n", "line 1: key 'parallel' holds a nested mapping; config files are flat, one flag per "
                                  "key (e.g. tp_size: 2), and only JSON-valued or map-valued flags take a mapping."),
    ("tp_size:\n  a: 1\n", "line 1: key 'tp_size' holds a nested mapping; config files are flat, one flag per key "
                           "(e.g. tp_size: 2), and only JSON-valued or map-valued flags take a mapping."),
    ("tp_size: two\n", "line 1: invalid value 'two' for tp_size: expected an integer."),
    ("enable_dp_attention: 1\n", "line 1: invalid value '1' for enable_dp_attention: expected true or false."),
    ("config: other.yaml\n", "line 1: key 'config' cannot be set inside a config file."),
])
def test_bad_config_entries_name_the_file_line_and_key(tmp_path, text, message):
    path = _config(tmp_path, text)
    with pytest.raises(UsageError) as err:
        parse_flags(["--config", path])
    assert str(err.value) == f"config file {path}, {message}"


# --- which system --------------------------------------------------------------------------------------------------

def test_system_is_llm_unless_told_or_a_diffusion_model_folder_is_given(tmp_path):
    assert detect_system([]) == "llm"
    assert detect_system(["--system", "diffusion"]) == "diffusion"
    assert detect_system(["--system=diffusion"]) == "diffusion"
    (tmp_path / "model_index.json").write_text("{}", encoding="utf-8")
    assert detect_system(["--model-path", str(tmp_path)]) == "diffusion"
    assert detect_system(["--model-path", str(tmp_path), "--system", "llm"]) == "llm"
    assert detect_system(["--model", str(tmp_path / "missing")]) == "llm"


def test_a_diffusion_model_folder_switches_the_flags_to_diffusion(tmp_path):
    (tmp_path / "model_index.json").write_text("{}", encoding="utf-8")
    opts, parsed = parse_flags(["--model-path", str(tmp_path), "--num-gpus", "2"])
    assert opts.system == parsed.system == "diffusion"
    assert parsed.user == {"model_path": str(tmp_path), "num_gpus": 2}


def test_optional_values_fall_back_to_the_seeds_constant():
    _, llm = parse_flags(["--model-checksum"])
    assert llm.user == {"model_checksum": ""}
    _, diffusion = parse_flags(["--system", "diffusion", "--webui", "--trust-remote-code", "false"])
    assert diffusion.user == {"webui": True, "trust_remote_code": False}


def test_a_deprecated_switch_in_a_config_file_must_be_true_or_false(tmp_path):
    path = _config(tmp_path, "stream-output: yes please\n")
    with pytest.raises(UsageError) as err:
        parse_flags(["--config", path])
    assert str(err.value) == (f"config file {path}, line 1: invalid value 'yes please' for stream-output: "
                              "expected true or false.")


# -- aliases that imply other settings (catalog `alias_implies`) ------------------------------------
# Upstream (serving_hook.py:_handle_deprecated_args) reads tokenspeed_mla as cutedsl_mla with an FP8
# KV cache (oracle: h-tokenspeed-mla-b200 resolves kv_cache_dtype fp8_e4m3).

def test_an_alias_sets_what_it_implies_and_says_so():
    _, parsed = parse_flags(["--attention-backend", "tokenspeed_mla"])
    assert parsed.user == {"attention_backend": "cutedsl_mla", "kv_cache_dtype": "fp8_e4m3"}
    assert parsed.sources["kv_cache_dtype"] == "cli"
    assert any("also sets --kv-cache-dtype fp8_e4m3" in w for w in parsed.warnings)


def test_an_implied_value_replaces_a_typed_auto_choice():
    _, parsed = parse_flags(["--kv-cache-dtype", "auto", "--decode-attention-backend", "tokenspeed_mla"])
    assert parsed.user["kv_cache_dtype"] == "fp8_e4m3"


def test_an_implied_value_never_overwrites_another_typed_value():
    with pytest.raises(UsageError) as err:
        parse_flags(["--attention-backend", "tokenspeed_mla", "--kv-cache-dtype", "bf16"])
    text = str(err.value)
    assert "--kv-cache-dtype bf16" in text and "--attention-backend cutedsl_mla" in text


def test_the_canonical_value_implies_nothing_even_over_an_alias_in_the_config_file(tmp_path):
    path = _config(tmp_path, "attention_backend: tokenspeed_mla\n")
    _, parsed = parse_flags(["--config", path])
    assert parsed.user["kv_cache_dtype"] == "fp8_e4m3"
    _, parsed = parse_flags(["--config", path, "--attention-backend", "cutedsl_mla"])
    assert parsed.user == {"attention_backend": "cutedsl_mla"}


# --- prefixes, read as upstream's argparse reads them (issue 30) ------------------------------------

UPSTREAM_PREFIXES = json.loads((Path(__file__).parent / "differential" / "fixtures" /
                                "upstream_prefixes_llm.json").read_text())["prefixes"]


def _accord_reading(word: str):
    """('reads_as', flag) | ('ambiguous', None) | ('pointer', text) | ('exact', None) for one word."""
    from accord.resolver.commandline.flagspellings import expand_prefixes
    from accord.resolver.language.catalog import load_catalog

    try:
        argv, warnings = expand_prefixes([word], load_catalog("llm"), frozenset())
    except UsageError as err:
        return ("ambiguous", str(err)) if str(err).startswith("ambiguous flag") else ("error", str(err))
    return ("reads_as", argv[0]) if argv[0] != word else ("unchanged", None)


@pytest.mark.parametrize("word", sorted(UPSTREAM_PREFIXES))
def test_a_prefix_reads_as_upstreams_argparse_reads_it(word):
    """tests/differential/fixtures/upstream_prefixes_llm.json: what 0.5.23's own parser makes of
    each word (dumped from the oracle venv). A unique prefix becomes the same flag here, an
    ambiguous one is refused naming the same candidates, an exact spelling is left alone."""
    upstream = UPSTREAM_PREFIXES[word]
    kind, detail = _accord_reading(word)
    if "reads_as" in upstream:
        assert (kind, detail) == ("reads_as", upstream["reads_as"])
    elif "ambiguous" in upstream:
        assert kind == "ambiguous"
        named = [c for c in upstream["ambiguous"] if c in detail]
        assert len(named) >= 2, detail
    else:
        assert kind == "unchanged"


def test_a_unique_prefix_warns_which_flag_it_became():
    _, parsed = parse_flags(["--speculative-algo", "EAGLE3", "--trust-remote"])
    assert parsed.user["speculative_algorithm"] == "EAGLE3" and parsed.user["trust_remote_code"] is True
    assert any("--speculative-algo is read as --speculative-algorithm" in w for w in parsed.warnings)
    assert any("--trust-remote is read as --trust-remote-code" in w for w in parsed.warnings)


def test_an_accord_short_form_takes_no_part_in_prefixes():
    """--mem-fraction is Accord's alias, not upstream's: --mem-frac is --mem-fraction-static there."""
    _, parsed = parse_flags(["--mem-frac", "0.8"])
    assert parsed.user["mem_fraction_static"] == 0.8


def test_a_removed_flag_names_its_real_successor():
    with pytest.raises(UsageError, match=r"--enable-ep-moe: it was removed .* use --ep-size"):
        parse_flags(["--tp", "8", "--enable-ep-moe"])
    with pytest.raises(UsageError, match=r"--enable-deepep-moe: it was removed .* use --moe-a2a-backend deepep"):
        parse_flags(["--tp", "8", "--enable-deepep-moe"])
