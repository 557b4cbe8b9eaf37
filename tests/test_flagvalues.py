"""Converting one flag value (command-line text or config-file data) into its declared type."""

from __future__ import annotations

import pytest

from accord.resolver.commandline.flagvalues import (
    BadValue,
    convert_data,
    convert_text,
    describe_expected,
    parse_human_int,
)
from accord.resolver.language.catalog import load_catalog

LLM = load_catalog("llm")


@pytest.mark.parametrize("text, value", [
    ("32768", 32768), ("32k", 32000), ("32K", 32768), ("25.6k", 25600), ("1.001k", 1001),
    ("2m", 2_000_000), ("2M", 2 * 2**20), ("1g", 10**9), ("1T", 2**40), (" 8k ", 8000), ("-1", -1),
])
def test_human_readable_integers_follow_the_seed(text, value):
    assert parse_human_int(text) == value


def test_a_fraction_with_a_binary_suffix_is_refused_with_the_decimal_spelling_suggested():
    with pytest.raises(BadValue) as err:
        parse_human_int("1.5K")
    assert err.value.hint == "A fraction needs a decimal suffix: did you mean 1.5k?"


def test_human_suffixes_only_apply_to_flags_that_take_them():
    assert convert_text(LLM["context_length"], "4k") == (4000, [])
    with pytest.raises(BadValue):
        convert_text(LLM["tp_size"], "4k")


def test_integer_choice_lists_compare_as_integers():
    assert convert_text(LLM["max_lora_chunk_size"], "64") == (64, [])
    with pytest.raises(BadValue) as err:
        convert_text(LLM["max_lora_chunk_size"], "48")
    assert err.value.expected == "one of: 16, 32, 64, 128"


def test_a_closed_choice_list_rejects_other_values_and_suggests_the_nearest():
    with pytest.raises(BadValue) as err:
        convert_text(LLM["kv_cache_dtype"], "fp8_e4m4")
    assert err.value.hint == "Did you mean 'fp8_e4m3'?"


def test_an_extensible_choice_list_takes_only_declared_extra_values():
    with pytest.raises(BadValue):
        convert_text(LLM["attention_backend"], "my_plugin_attn")
    value, warnings = convert_text(LLM["attention_backend"], "my_plugin_attn", ("my_plugin_attn",))
    assert value == "my_plugin_attn" and len(warnings) == 1


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e308"])
def test_non_finite_or_absurd_floats_are_refused(text):
    with pytest.raises(BadValue, match="finite"):
        convert_text(LLM["mem_fraction_static"], text)
    with pytest.raises(BadValue, match="finite"):
        convert_data(LLM["mem_fraction_static"], float(text))


def test_json_values_are_parsed_and_bad_json_says_where():
    assert convert_text(LLM["cuda_graph_config"], '{"decode": {"max_bs": 8}}') == ({"decode": {"max_bs": 8}}, [])
    with pytest.raises(BadValue) as err:
        convert_text(LLM["cuda_graph_config"], "{decode}")
    assert err.value.expected == "JSON text (Expecting property name enclosed in double quotes at column 2)"


def test_lora_paths_take_plain_strings_or_json_objects():
    assert convert_text(LLM["lora_paths"], "name=/p") == ("name=/p", [])
    assert convert_text(LLM["lora_paths"], '{"lora_name": "a"}') == ({"lora_name": "a"}, [])


def test_optional_value_booleans_take_true_or_false_in_any_case():
    flag = load_catalog("diffusion")["webui"]
    assert convert_text(flag, "FALSE") == (False, [])
    with pytest.raises(BadValue) as err:
        convert_text(flag, "yes")
    assert err.value.expected == "true or false"


def test_config_data_keeps_native_types_and_converts_text():
    assert convert_data(LLM["tp_size"], 4) == (4, [])
    assert convert_data(LLM["tp_size"], "4") == (4, [])
    assert convert_data(LLM["mem_fraction_static"], 1) == (1.0, [])
    assert convert_data(LLM["cuda_graph_bs_decode"], [1, "2"]) == ([1, 2], [])
    assert convert_data(LLM["cuda_graph_bs_decode"], 8) == ([8], [])
    assert convert_data(LLM["cuda_graph_config"], {"decode": {}}) == ({"decode": {}}, [])
    assert convert_data(LLM["revision"], 1234) == ("1234", [])


@pytest.mark.parametrize("name, value", [("tp_size", True), ("tp_size", 2.5), ("enable_dp_attention", 1),
                                         ("tp_size", None), ("attention_backend", ["fa3"])])
def test_config_data_of_the_wrong_kind_is_refused(name, value):
    with pytest.raises(BadValue):
        convert_data(LLM[name], value)


def test_null_is_accepted_only_for_nullable_flags():
    assert convert_data(LLM["context_length"], None) == (None, [])


def test_expected_values_are_described_in_words():
    assert describe_expected(LLM["tp_size"]) == "an integer"
    assert describe_expected(LLM["cuda_graph_tc_compiler"]) == "one of: eager, inductor"
    assert describe_expected(LLM["cuda_graph_bs_decode"]) == "an integer"
    assert describe_expected(LLM["max_total_tokens"]).startswith("an integer, optionally with a suffix")
