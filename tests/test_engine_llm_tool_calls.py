"""engine.llm.tool_calls: the request's tools and tool_choice, the schema a named or required
choice constrains the output to (upstream's get_json_schema_constraint), and tool calls read back
from text in each implemented --tool-call-parser format (the formats of upstream's detectors)."""

from __future__ import annotations

import json

import pytest

from accord.engine.llm.request_errors import BadRequest
from accord.engine.llm.tool_calls import PARSERS, constrained_calls, parsed_calls, tool_plan

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
PING = {"type": "function", "function": {"name": "ping"}}


def test_named_and_required_schemas_are_upstreams_arrays():
    named = tool_plan({"tools": [WEATHER, PING], "tool_choice": {"type": "function", "function": {"name": "ping"}}})
    assert named.schema() == {"type": "array", "minItems": 1, "items": {
        "type": "object", "properties": {"name": {"type": "string", "enum": ["ping"]},
                       "parameters": {"type": "object", "properties": {}}},
        "required": ["name", "parameters"], "additionalProperties": False}}
    required = tool_plan({"tools": [WEATHER, PING], "tool_choice": "required", "parallel_tool_calls": False})
    schema = required.schema()
    assert schema["maxItems"] == 1 and [i["properties"]["name"]["enum"] for i in schema["items"]["anyOf"]] == \
        [["get_weather"], ["ping"]]
    assert tool_plan({"tools": [WEATHER]}).choice == "auto" and tool_plan({"tools": [WEATHER]}).schema() is None
    assert tool_plan({"tools": [WEATHER], "tool_choice": "none"}) is None


@pytest.mark.parametrize("body,word", [
    ({"tools": []}, "tools"), ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ({"tools": [WEATHER, WEATHER]}, "share a name"), ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
])
def test_bad_tools_are_a_400_naming_the_field(body, word):
    with pytest.raises(BadRequest, match=word.replace("[", r"\[").replace("]", r"\]")):
        tool_plan(body)


def test_constrained_output_reads_back_as_calls_with_json_arguments():
    calls = constrained_calls('[{"name": "get_weather", "parameters": {"city": "Oslo"}}]')
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"} and calls[0]["id"].startswith("call_")
    assert constrained_calls('[{"name": "get_weather", "param') is None, "cut short by max_tokens"


@pytest.mark.parametrize("parser,text", [
    ("hermes", 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'),
    ("qwen25", 'Let me look.<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'),
    ("llama3", 'Let me look.<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}'),
    ("mistral", 'Let me look. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}]'),
])
def test_each_parser_reads_its_format(parser, text):
    plan = tool_plan({"tools": [WEATHER]})
    content, calls = parsed_calls(parser, text, plan)
    assert content == "Let me look."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize("parser", PARSERS)
def test_plain_text_and_unoffered_functions_stay_text(parser):
    plan = tool_plan({"tools": [WEATHER]})
    assert parsed_calls(parser, "Just an answer.", plan) == ("Just an answer.", None)
    unoffered = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    assert parsed_calls(parser, unoffered, plan) == (unoffered, None)
    assert parsed_calls(None, '<tool_call>{"name": "get_weather"}</tool_call>', plan)[1] is None, "no parser"
