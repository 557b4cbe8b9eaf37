"""engine.llm.http_server through the official `openai` client: the calls real clients make succeed,
and what the engine does not implement is a 400 naming the field, never silently ignored.

One tp=1 server for the whole module; every test is a few short generations.
"""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from tests.test_engine_llm_server import API_KEY, AUTH, Server, alive, server_config

AUTH_HEADERS = AUTH

MODEL = "tiny-test"
ADMIN_KEY = "admin-test-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Compact JSON: a random-weight model left free to write whitespace may never stop.
    srv = Server(server_config(api_key=API_KEY, served_model_name=MODEL, enable_metrics=True,
                               admin_api_key=ADMIN_KEY, constrained_json_disable_any_whitespace=True),
                 tmp_path_factory.mktemp("llm-openai"))
    yield srv
    assert srv.stop() == 0
    assert [p for p in srv.pids.values() if alive(p)] == []


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
        yield c


GREEDY = {"temperature": 0, "max_tokens": 8, "extra_body": {"ignore_eos": True}}

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "days", "sunny"],
          # (a pattern, not maxLength: xgrammar 0.2.9 lets control characters into a maxLength string)
          "properties": {"city": {"type": "string", "pattern": "^[A-Z][a-z]{1,11}$"},
                         "days": {"type": "integer", "minimum": 1, "maximum": 9},
                         "sunny": {"type": "boolean"}}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather of a city",
                                         "parameters": SCHEMA}}


def test_models_list_and_lookup_by_id(client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_unknown_model_is_a_404_like_vllm(client):
    with pytest.raises(openai.NotFoundError, match="no-such-model"):
        client.completions.create(model="no-such-model", prompt="hi", **GREEDY)


def test_n_choices_and_list_prompts_each_get_an_indexed_choice(client):
    single = client.completions.create(model=MODEL, prompt="abc", **GREEDY).choices[0].text
    out = client.completions.create(model=MODEL, prompt=["abc", [256, 120, 121]], n=2, **GREEDY)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    assert out.choices[0].text == out.choices[1].text == single, "greedy: every candidate is the same"
    assert out.usage.completion_tokens == 4 * 8


def test_chat_text_content_parts_equal_a_plain_string(client):
    plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi there"}],
                                           **GREEDY)
    parts = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}], **GREEDY)
    assert parts.choices[0].message.content == plain.choices[0].message.content


def test_chat_image_part_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError, match="image_url"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}], **GREEDY)


def test_streamed_chat_with_usage_matches_the_plain_one(client):
    messages = [{"role": "user", "content": "stream me"}]
    plain = client.chat.completions.create(model=MODEL, messages=messages, n=2, **GREEDY)
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, n=2, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY))
    for index in (0, 1):
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == index)
        assert text == plain.choices[index].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_streamed_text_equals_plain_text_when_a_stop_string_matches(client):
    plain = client.completions.create(model=MODEL, prompt="stop test", **{**GREEDY, "max_tokens": 12})
    text = plain.choices[0].text
    if len(text) < 4:
        pytest.skip("the greedy continuation is too short to pick a stop string from")
    stop = text[2:4]
    cut = client.completions.create(model=MODEL, prompt="stop test", stop=[stop], **{**GREEDY, "max_tokens": 12})
    streamed = client.completions.create(model=MODEL, prompt="stop test", stop=[stop], stream=True,
                                         **{**GREEDY, "max_tokens": 12})
    assert "".join(c.choices[0].text for c in streamed) == cut.choices[0].text == text[:text.find(stop)]


def test_stop_token_ids_end_the_completion_at_that_token(client, http):
    ids = http.post("/generate", json={"text": "tok", "sampling_params": {
        "max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}).json()["output_ids"]
    out = client.completions.create(model=MODEL, prompt="tok", **{**GREEDY, "max_tokens": 6,
                                    "extra_body": {"ignore_eos": True, "stop_token_ids": [ids[2]]}})
    assert out.choices[0].finish_reason == "stop"
    assert out.usage.completion_tokens == ids.index(ids[2]) + 1


def test_suffix_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError, match="suffix"):
        client.completions.create(model=MODEL, prompt="x", suffix="y", **GREEDY)


def test_logit_bias_minus_100_on_the_greedy_token_changes_it(client):
    greedy_id = http_ids(client, "bias")[0]
    assert http_ids(client, "bias", logit_bias={str(greedy_id): -100})[0] != greedy_id, "native /generate"
    one = {**GREEDY, "max_tokens": 1}
    plain = client.completions.create(model=MODEL, prompt="bias", logprobs=0, **one).choices[0].logprobs
    biased = client.completions.create(model=MODEL, prompt="bias", logprobs=0, logit_bias={str(greedy_id): -100},
                                       **one).choices[0].logprobs
    assert (biased.tokens[0], biased.token_logprobs[0]) != (plain.tokens[0], plain.token_logprobs[0])


def http_ids(client, prompt: str, **sampling) -> list[int]:
    """Greedy output ids of SGLang's native /generate for the same prompt."""
    response = httpx.post(f"{str(client.base_url).removesuffix('/v1/')}/generate", headers=AUTH_HEADERS,
                          json={"text": prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0,
                                                                   "ignore_eos": True, **sampling}}, timeout=120)
    return response.json()["output_ids"]


def test_completion_top_logprobs_are_sorted_and_the_greedy_token_is_the_best(client):
    out = client.completions.create(model=MODEL, prompt="rank", logprobs=5, **GREEDY).choices[0]
    lp = out.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        values = list(top.values())
        assert values == sorted(values, reverse=True) and chosen == pytest.approx(values[0])
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(8)]


def test_echo_returns_the_prompt_and_its_logprobs_agree_with_generation(client):
    prompt = [256, *b"echo me"]
    plain = client.completions.create(model=MODEL, prompt=prompt, logprobs=1, **{**GREEDY, "max_tokens": 1})
    token_lp = plain.choices[0].logprobs.token_logprobs[0]
    next_id = http_ids(client, "echo me")[0]
    echoed = client.completions.create(model=MODEL, prompt=[*prompt, next_id], echo=True, logprobs=1,
                                       **{**GREEDY, "max_tokens": 1}).choices[0]
    lp = echoed.logprobs
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "the first token follows nothing"
    assert len(lp.tokens) == len(prompt) + 2
    assert lp.token_logprobs[len(prompt)] == pytest.approx(token_lp, abs=1e-4), \
        "a prompt token's logprob equals the one it had when it was generated"
    assert echoed.text.startswith("echo me")
    text_only = client.completions.create(model=MODEL, prompt="echo me", echo=True, **GREEDY).choices[0]
    assert text_only.text == "echo me" + client.completions.create(model=MODEL, prompt="echo me",
                                                                   **GREEDY).choices[0].text


def test_streamed_logprobs_concatenate_to_the_plain_ones(client):
    kwargs = dict(model=MODEL, prompt="stream lp", logprobs=2, echo=True, **GREEDY)
    plain = client.completions.create(**kwargs).choices[0].logprobs
    tokens, values = [], []
    for chunk in client.completions.create(stream=True, **kwargs):
        if chunk.choices and chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.tokens
            values += chunk.choices[0].logprobs.token_logprobs
    assert tokens == plain.tokens and values[0] is None
    assert values[1:] == pytest.approx(plain.token_logprobs[1:], abs=1e-6)


def test_chat_logprobs_and_top_logprobs_streamed_and_not(client):
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "lp"}], logprobs=True, top_logprobs=3, **GREEDY)
    plain = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    assert len(plain) == 8
    for token in plain:
        assert len(token.top_logprobs) == 3 and token.logprob == pytest.approx(token.top_logprobs[0].logprob)
        assert token.bytes == list(token.token.encode())
    streamed = [t for chunk in client.chat.completions.create(stream=True, **kwargs)
                if chunk.choices and chunk.choices[0].logprobs for t in chunk.choices[0].logprobs.content]
    assert [(t.token, round(t.logprob, 5)) for t in streamed] == [(t.token, round(t.logprob, 5)) for t in plain]
    no_lp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "lp"}], **GREEDY)
    assert no_lp.choices[0].logprobs is None


def test_native_generate_returns_logprobs_in_upstreams_shape(http):
    body = {"text": "native", "return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": 0,
            "return_text_in_logprobs": True,
            "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}
    out = http.post("/generate", json=body).json()
    info = out["meta_info"]
    assert [t for _, t, _ in info["output_token_logprobs"]] == out["output_ids"]
    assert len(info["input_token_logprobs"]) == info["prompt_tokens"] and info["input_token_logprobs"][0][0] is None
    assert info["input_top_logprobs"][0] is None and all(len(t) == 2 for t in info["output_top_logprobs"])
    events = [line for line in http.post("/generate", json={**body, "stream": True}).text.splitlines()
              if line.startswith("data: {")]
    import json
    last = json.loads(events[-1][len("data: "):])["meta_info"]
    assert [t for _, t, _ in last["output_token_logprobs"]] == out["output_ids"]
    assert len(last["input_token_logprobs"]) == info["prompt_tokens"]


def test_min_tokens_keeps_a_stop_token_out_until_reached(client):
    first = http_ids(client, "min")[0]
    stopped = client.completions.create(model=MODEL, prompt="min", **{**GREEDY, "extra_body": {
        "ignore_eos": True, "stop_token_ids": [first]}})
    assert stopped.usage.completion_tokens == 1
    held = client.completions.create(model=MODEL, prompt="min", logprobs=0, **{**GREEDY, "extra_body": {
        "ignore_eos": True, "stop_token_ids": [first], "min_tokens": 3}})
    assert held.usage.completion_tokens >= 3
    assert first not in http_ids(client, "min", stop_token_ids=[first], min_new_tokens=3)[:3]


def test_frequency_penalty_changes_nothing_before_the_first_repeat(client):
    plain = http_ids(client, "repeat repeat", max_new_tokens=48)
    repeat = next((i for i, t in enumerate(plain) if t in plain[:i]), None)
    assert repeat is not None, "the tiny model repeats itself within 48 greedy tokens"
    penalized = http_ids(client, "repeat repeat", max_new_tokens=48, frequency_penalty=2.0, presence_penalty=2.0)
    assert penalized[:repeat] == plain[:repeat]
    assert penalized != plain
    assert client.completions.create(model=MODEL, prompt="repeat repeat", frequency_penalty=2.0,
                                     presence_penalty=2.0, **{**GREEDY, "max_tokens": 48,
                                     "extra_body": {"ignore_eos": True, "repetition_penalty": 1.5}}).choices


@pytest.mark.parametrize("extra,word", [
    ({"frequency_penalty": 3}, "frequency_penalty"),
    ({"logit_bias": {"999999": 1}}, "logit_bias"),
    ({"logprobs": 50}, "logprobs"),
    ({"extra_body": {"min_tokens": 99}}, "min_tokens"),
])
def test_out_of_range_sampling_fields_are_a_400_naming_them(client, extra, word):
    with pytest.raises(openai.BadRequestError, match=word):
        client.completions.create(model=MODEL, prompt="x", **{**GREEDY, **extra})


@pytest.mark.parametrize("extra,field", [
    ({"stop": 5}, "stop"),
    ({"max_tokens": True}, "max_tokens"),
    ({"extra_body": {"n": "2"}}, "n"),
    ({"temperature": "hot"}, "temperature"),
    ({"seed": 1.5}, "seed"),
    ({"stream_options": {"include_usage": "yes"}, "stream": True}, "include_usage"),
    ({"extra_body": {"echo": 1}}, "echo"),
    ({"extra_body": {"stop_token_ids": "7"}}, "stop_token_ids"),
    ({"extra_body": {"regex": 5}}, "regex"),
    ({"extra_body": {"regex": "a+", "ebnf": "root ::= \"a\""}}, "constraint"),
    ({"extra_body": {"response_format": {"type": "xml"}}}, "response_format"),
    ({"extra_body": {"regex": "("}}, "regex"),
])
def test_a_malformed_field_is_a_400_naming_it(client, extra, field):
    with pytest.raises(openai.BadRequestError, match=field):
        client.completions.create(model=MODEL, prompt="x", **{**GREEDY, **extra})


@pytest.mark.parametrize("extra,field", [
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": 5}}}}, "json_schema"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
    ({"messages": "hello"}, "messages"),
    ({"model": 5}, "model"),
    ({"logprobs": True, "top_logprobs": 99}, "top_logprobs"),
])
def test_a_malformed_chat_field_is_a_400_naming_it(client, extra, field):
    with pytest.raises(openai.BadRequestError, match=field):
        client.chat.completions.create(**{"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                          **GREEDY, **extra})


def test_n_choices_with_a_seed_are_distinct_and_reproducible(client):
    kwargs = dict(model=MODEL, prompt="sample", n=4, seed=7, temperature=1.0, max_tokens=12,
                  extra_body={"ignore_eos": True})
    first = [c.text for c in client.completions.create(**kwargs).choices]
    again = [c.text for c in client.completions.create(**kwargs).choices]
    assert first == again, "the same seed gives the same choices"
    assert len(set(first)) == 4, "each choice is its own sample"
    one = client.completions.create(**{**kwargs, "n": 1}).choices[0].text
    assert one == first[0], "the first choice is the seed's own sample"


def test_a_large_body_does_not_hold_up_health(server, http):
    """A 5 MB prompt is parsed, tokenized and checked off the event loop: /health keeps answering
    while it is (then the prompt is refused for the context length). Relative to the machine's
    speed: no /health waits anywhere near as long as the large request takes. With the body
    parsed on the event loop, a probe waits for nearly all of it (on loopback the upload is a few
    milliseconds and the server's work is the rest); the bound leaves room for the short stretches
    the loop does spend on the request (reading its chunks, writing the answer)."""
    import concurrent.futures
    import time

    body = {"model": MODEL, "prompt": "x" * (5 * 1024 * 1024), "max_tokens": 1}
    waits = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server.url, timeout=60) as probe:
        began = time.monotonic()
        big = pool.submit(http.post, "/v1/completions", json=body)
        while not big.done():
            sent = time.monotonic()
            assert probe.get("/health").status_code == 200
            waits.append(time.monotonic() - sent)
        response = big.result()
        took = time.monotonic() - began
    assert response.status_code == 400 and "context length" in response.json()["error"]["message"]
    assert max(waits) < 0.75 * took, f"a /health waited {max(waits):.2f} s of the {took:.2f} s the body took"


def follows_schema(value) -> bool:
    """SCHEMA, checked by hand (the checks its keywords state)."""
    return (isinstance(value, dict) and set(value) == {"city", "days", "sunny"}
            and isinstance(value["city"], str) and re.fullmatch("[A-Z][a-z]{1,11}", value["city"]) is not None
            and isinstance(value["days"], int) and not isinstance(value["days"], bool) and 1 <= value["days"] <= 9
            and isinstance(value["sunny"], bool))


JSON_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
ROOMY = {"max_tokens": 200, "temperature": 0}


@pytest.mark.parametrize("stream", [False, True])
def test_chat_json_schema_output_follows_the_schema(client, stream):
    import json
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "weather?"}], response_format=JSON_SCHEMA_FORMAT,
                  **ROOMY)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs)
                       if c.choices)
    else:
        out = client.chat.completions.create(**kwargs).choices[0]
        assert out.finish_reason == "stop"
        text = out.message.content
    assert follows_schema(json.loads(text))


def test_json_object_output_is_a_json_object(client):
    """The random model writes keys without end; a bias towards '"' and '}' (the grammar masks
    after the bias) lets it close them, and whatever it writes is then a JSON object."""
    import json
    out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "json"}],
                                         response_format={"type": "json_object"},
                                         logit_bias={str(ord('"')): 20, str(ord("}")): 20}, **ROOMY)
    assert out.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(out.choices[0].message.content), dict)


def test_completions_take_regex_ebnf_and_json_schema(client):
    import json
    kwargs = dict(model=MODEL, prompt="date:", **ROOMY)
    date = client.completions.create(**kwargs, extra_body={"regex": r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"})
    assert re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]", date.choices[0].text)
    answer = client.completions.create(**kwargs, extra_body={"ebnf": 'root ::= "yes" | "no" | "maybe"'})
    assert answer.choices[0].text in ("yes", "no", "maybe")
    streamed = client.completions.create(**kwargs, stream=True, extra_body={"json_schema": json.dumps(SCHEMA)})
    assert follows_schema(json.loads("".join(c.choices[0].text for c in streamed)))


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_call_has_schema_valid_arguments(client, stream):
    import json
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "weather in Paris?"}], tools=[TOOL],
                  tool_choice={"type": "function", "function": {"name": "get_weather"}},
                  parallel_tool_calls=False, **ROOMY)
    if stream:
        chunks = [c for c in client.chat.completions.create(stream=True, **kwargs) if c.choices]
        calls = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
        reason = chunks[-1].choices[0].finish_reason
    else:
        choice = client.chat.completions.create(**kwargs).choices[0]
        calls, reason = choice.message.tool_calls, choice.finish_reason
    assert reason == "tool_calls" and calls
    for call in calls:
        assert call.function.name == "get_weather" and call.id
        assert follows_schema(json.loads(call.function.arguments))


def test_required_tool_choice_calls_one_of_the_tools(client):
    import json
    other = {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"], "additionalProperties": False}}}
    choice = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}],
                                            tools=[TOOL, other], tool_choice="required",
                                            parallel_tool_calls=False, **ROOMY).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        arguments = json.loads(call.function.arguments)
        assert (call.function.name == "get_weather" and follows_schema(arguments)) or \
               (call.function.name == "ping" and set(arguments) == {"n"} and 0 <= arguments["n"] <= 9)


def test_tool_history_goes_through_the_chat_template(client):
    """A conversation with an earlier call and its result is accepted; "auto" without a
    --tool-call-parser answers text (as upstream does)."""
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Paris", "days": 1, "sunny": true}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    out = client.chat.completions.create(model=MODEL, messages=history, tools=[TOOL], **GREEDY).choices[0]
    assert out.message.tool_calls is None and isinstance(out.message.content, str)


def test_tokenize_and_detokenize_round_trip(http):
    tokens = http.post("/tokenize", json={"prompt": "héllo"}).json()
    assert tokens["count"] == len(tokens["tokens"])
    assert http.post("/detokenize", json={"tokens": tokens["tokens"]}).json()["prompt"] == "héllo"
    assert http.get("/get_model_info").json()["served_model_name"] == MODEL


def test_admin_routes_take_the_admin_key_and_server_info_shows_no_key(http):
    assert http.get("/server_info").status_code == 401, "the plain API key is not an admin key"
    assert http.post("/flush_cache").status_code == 401
    response = http.get("/server_info", headers=ADMIN)
    assert response.status_code == 200
    assert API_KEY not in response.text and ADMIN_KEY not in response.text and "<redacted>" in response.text


def test_wrong_key_is_a_401_and_unknown_routes_are_json(server, http):
    assert httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
    missing = http.get("/no/such/route")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == 404
    wrong_method = http.get("/v1/completions")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == 405


def test_health_generate_runs_a_real_generation(server):
    response = httpx.get(f"{server.url}/health_generate", timeout=60)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_a_body_over_the_limit_is_a_413(http):
    from accord.engine.llm.http_server import MAX_BODY_BYTES
    response = http.post("/generate", content=b" " * (MAX_BODY_BYTES + 1),
                         headers={"content-type": "application/json"})
    assert response.status_code == 413 and "limit" in response.json()["error"]["message"]



def test_metrics_count_requests_and_tokens_in_prometheus_format(client, server):
    client.completions.create(model=MODEL, prompt="count me", **GREEDY)
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    model = ("model_name", MODEL)
    assert samples[("accord_requests_total", (model, ("outcome", "finished")))] >= 1
    assert samples[("accord_generation_tokens_total", (model,))] >= 8
    assert samples[("accord_time_to_first_token_seconds_count", (model,))] >= 1
    assert ("accord_num_requests_running", (model,)) in samples
    assert samples[("accord_kv_capacity_tokens", (("dp", "0"), model))] > 0
    assert 0 <= samples[("accord_token_usage", (("dp", "0"), model))] <= 1


def test_flush_cache_makes_the_next_request_recompute_its_prefix(http):
    body = {"text": "a prefix long enough to fill one KV page at least", "sampling_params": {
        "max_new_tokens": 2, "temperature": 0, "ignore_eos": True}}
    http.post("/generate", json=body)
    assert http.post("/generate", json=body).json()["meta_info"]["cached_tokens"] >= 16
    assert http.post("/flush_cache", headers=ADMIN).status_code == 200
    assert http.post("/generate", json=body).json()["meta_info"]["cached_tokens"] == 0


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    """A server with the other grammar backend, small prefill chunks and a reasoning parser."""
    srv = Server(server_config(grammar_backend="llguidance", constrained_json_disable_any_whitespace=True,
                               chunked_prefill_size=16, max_total_tokens=16384, reasoning_parser="qwen3"),
                 tmp_path_factory.mktemp("llm-openai-2"))
    yield srv
    assert srv.stop() == 0


def test_llguidance_backend_serves_schema_valid_json_and_tool_calls(second):
    """The same structured outputs under --grammar-backend llguidance."""
    import json
    with openai.OpenAI(base_url=f"{second.url}/v1", api_key="none", max_retries=0, timeout=120) as c:
        model = c.models.list().data[0].id
        out = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "weather?"}],
                                        response_format=JSON_SCHEMA_FORMAT, **ROOMY)
        assert follows_schema(json.loads(out.choices[0].message.content))
        choice = c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "weather?"}], tools=[TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False,
            **ROOMY).choices[0]
        assert choice.finish_reason == "tool_calls"
        assert follows_schema(json.loads(choice.message.tool_calls[0].function.arguments))


def test_a_running_stream_keeps_decoding_while_a_long_prompt_is_prefilled(second):
    """Mixed steps: while a 1900-token prompt is prefilled in 16-token chunks (119 steps), a stream
    that is already running gets a token in each of those steps; prefill-first scheduling would
    give it none until the new request's first token (only the few of the request's way in)."""
    import threading
    import time

    stamps: list[float] = []
    streaming = threading.Event()
    with openai.OpenAI(base_url=f"{second.url}/v1", api_key="none", max_retries=0, timeout=300) as c:
        model = c.models.list().data[0].id

        def run() -> None:
            for _ in c.completions.create(model=model, prompt="go", max_tokens=1500, temperature=0, stream=True,
                                          extra_body={"ignore_eos": True}):
                stamps.append(time.monotonic())
                if len(stamps) == 5:
                    streaming.set()

        running = threading.Thread(target=run)
        running.start()
        assert streaming.wait(60)
        began = time.monotonic()
        new = c.completions.create(model=model, prompt=[256] + [65 + i % 26 for i in range(1900)], max_tokens=1,
                                   temperature=0, stream=True)
        next(iter(new))
        first = time.monotonic()
        running.join(300)
    between = sum(began < t < first for t in stamps)
    assert between >= 80, f"the running stream got {between} tokens during the 119 prefill steps"


@pytest.mark.parametrize("stream", [False, True])
def test_the_reasoning_parser_splits_thinking_from_the_answer(second, stream):
    """--reasoning-parser qwen3: the text inside <think> ... </think> is reasoning_content, the
    rest the answer (the output is shaped by a regex, since the model is random)."""
    with openai.OpenAI(base_url=f"{second.url}/v1", api_key="none", max_retries=0, timeout=120) as c:
        kwargs = dict(model=c.models.list().data[0].id, messages=[{"role": "user", "content": "think"}],
                      max_tokens=40, temperature=0, extra_body={"regex": "<think>[a-z]{3}</think>[a-z]{2}"})
        if stream:
            deltas = [ch.choices[0].delta for ch in c.chat.completions.create(stream=True, **kwargs) if ch.choices]
            reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
            content = "".join(d.content or "" for d in deltas)
        else:
            message = c.chat.completions.create(**kwargs).choices[0].message
            reasoning, content = message.reasoning_content, message.content
    assert re.fullmatch("[a-z]{3}", reasoning) and re.fullmatch("[a-z]{2}", content)
