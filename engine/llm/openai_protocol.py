"""The request and response shapes of the HTTP API: OpenAI's /v1/completions and
/v1/chat/completions, and SGLang's native /generate. Plain functions from a decoded JSON body to
checked values, and from engine output items to response objects; no sockets, no event loop, no
torch, so a handler can run the parsing of a large body in a worker thread and tests can call it
directly.

Every malformed field is a BadRequest (HTTP 400) that names it. What the engine does not implement
is refused the same way, never silently ignored. Output constraints follow upstream SGLang 0.5.23
(sglang/srt/entrypoints/openai/protocol.py to_sampling_params): `response_format` json_schema and
json_object (as the schema {"type": "object"}), and the extra fields `regex`, `ebnf` and (on
completions) `json_schema`; a tool choice of "required" or a named function adds its JSON schema
(tool_calls.py). At most one constraint per request.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Callable

from accord.engine.llm.request_errors import BadRequest
from accord.engine.llm.sampling_params import MAX_NEW_TOKENS_DEFAULT, SamplingParams
from accord.engine.llm.tool_calls import ToolPlan, tool_plan

if TYPE_CHECKING:
    from accord.engine.llm.front_end import FrontEnd

OPENAI_COMPLETION_DEFAULT_MAX_TOKENS = 16
# Fields this engine does not implement: a request that sets them is refused, never half-served.
UNSUPPORTED_WHEN_SET = ("suffix", "functions", "function_call")
MAX_TOP_LOGPROBS = 20  # as vLLM and OpenAI's chat API allow
MAX_CHOICES = 128


def parse_json(data: bytes) -> dict:
    """The request body as a JSON object."""
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadRequest(f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bool_field(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false, got {shown(value)}")
    return value


def choice_count(body: dict) -> int:
    """`n` (and `best_of`, which must not ask for more candidates than are returned)."""
    n, best_of = body.get("n", 1), body.get("best_of")
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CHOICES:
        raise BadRequest(f"n must be an integer in [1, {MAX_CHOICES}], got {shown(n)}")
    if best_of is not None and best_of != n:
        raise BadRequest("best_of must equal n: this server returns every candidate it samples")
    return n


def choice_seed(seed: int | None, index: int) -> int | None:
    """The seed of choice `index` of a seeded request: the request's seed for the first choice, a
    different one derived from it for each other, so n > 1 gives distinct samples that the same
    seed reproduces."""
    if seed is None or index == 0:
        return seed
    return (seed * 1_000_003 + index * 7_919) % (2**63)


def include_usage(body: dict) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise BadRequest(f"stream_options must be an object, got {shown(options)}")
    value = options.get("include_usage", False)
    if not isinstance(value, bool):
        raise BadRequest(f"stream_options.include_usage must be true or false, got {shown(value)}")
    return value


def top_count(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise BadRequest(f"{field} must be an integer in [0, {MAX_TOP_LOGPROBS}], got {shown(value)}")
    return value


def completion_logprobs(body: dict) -> dict | None:
    """Completions: `logprobs` N asks for N alternatives per token; with `echo`, the prompt's too."""
    if body.get("logprobs") is None:
        return None
    return {"top": top_count(body["logprobs"], "logprobs"), "start": 0 if bool_field(body, "echo") else None}


def chat_logprobs(body: dict) -> dict | None:
    """Chat: `logprobs: true` asks for them, `top_logprobs` N for N alternatives."""
    wanted = bool_field(body, "logprobs")
    top = body.get("top_logprobs")
    if top is not None and not wanted:
        raise BadRequest("top_logprobs needs logprobs: true")
    return {"top": top_count(top or 0, "top_logprobs"), "start": None} if wanted else None


def native_logprobs(body: dict) -> dict | None:
    """/generate: return_logprob, top_logprobs_num, logprob_start_len (-1: output only), as upstream."""
    if not bool_field(body, "return_logprob"):
        return None
    start = body.get("logprob_start_len", -1)
    if start is None:
        start = -1
    if not isinstance(start, int) or isinstance(start, bool) or start < -1:
        raise BadRequest(f"logprob_start_len must be an integer >= -1 (-1: output tokens only), got {shown(start)}")
    return {"top": top_count(body.get("top_logprobs_num") or 0, "top_logprobs_num"),
            "start": None if start == -1 else start}


def native_sampling(raw: Any) -> SamplingParams:
    """/generate's sampling_params, as SGLang names them."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise BadRequest(f"sampling_params must be a JSON object, got {shown(raw)}")
    try:
        return SamplingParams.from_request(raw)
    except (ValueError, TypeError) as err:
        raise BadRequest(f"sampling_params: {err}") from None


def response_format_schema(body: dict) -> str | None:
    """`response_format` as the JSON schema text it constrains the output to (None: free text)."""
    form = body.get("response_format")
    if form is None:
        return None
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return '{"type": "object"}'
    if kind == "json_schema":
        spec = form.get("json_schema")
        if not isinstance(spec, dict):
            raise BadRequest("response_format.json_schema must be an object with a \"schema\"")
        schema = spec.get("schema", {})
        if not isinstance(schema, dict):
            raise BadRequest(f"response_format.json_schema.schema must be a JSON schema object, got {shown(schema)}")
        return json.dumps(schema, sort_keys=True)
    raise BadRequest(f"response_format.type must be \"text\", \"json_object\" or \"json_schema\", got "
                     f"{shown(kind)}")


def output_constraint(body: dict, tools: ToolPlan | None, completions: bool) -> dict[str, str]:
    """The request's output constraint as sampling fields ({} when unconstrained)."""
    found = {}
    schema = response_format_schema(body)
    if schema is not None:
        found["json_schema"] = schema
    for field in ("regex", "ebnf") + (("json_schema",) if completions else ()):
        value = body.get(field)
        if value is None:
            continue
        if field == "json_schema" and isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{field} must be a non-empty string, got {shown(value)}")
        if field in found:
            raise BadRequest("json_schema and response_format both constrain the output; keep one")
        found[field] = value
    if len(found) > 1:
        raise BadRequest(f"only one output constraint per request; got {' and '.join(sorted(found))}")
    if tools is not None and tools.constrained:
        if found:
            raise BadRequest("tool_choice \"required\" or a named tool cannot be combined with "
                             "response_format, regex or ebnf: both constrain the output")
        found["json_schema"] = json.dumps(tools.schema(), sort_keys=True)
    return found


def openai_sampling(body: dict, default_max_tokens: int | None, constraint: dict[str, str]) -> SamplingParams:
    for field in UNSUPPORTED_WHEN_SET:
        if body.get(field) not in (None, False, [], {}):
            raise BadRequest(f"{field} is not supported by this server; remove it from the request")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = default_max_tokens if default_max_tokens is not None else MAX_NEW_TOKENS_DEFAULT
    raw = {"max_new_tokens": max_tokens,
           "temperature": body.get("temperature"), "top_p": body.get("top_p"), "top_k": body.get("top_k"),
           "stop": body.get("stop"), "seed": body.get("seed"), "ignore_eos": body.get("ignore_eos"),
           "stop_token_ids": body.get("stop_token_ids"), "frequency_penalty": body.get("frequency_penalty"),
           "presence_penalty": body.get("presence_penalty"),
           "repetition_penalty": body.get("repetition_penalty"), "min_new_tokens": body.get("min_tokens"),
           "logit_bias": body.get("logit_bias"), **constraint}
    try:
        return SamplingParams.from_request(raw)
    except (ValueError, TypeError) as err:
        field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        raise BadRequest(str(err).replace("max_new_tokens", field).replace("min_new_tokens", "min_tokens")) from None


def text_content(content: Any, where: str) -> str:
    """A chat message's content: a string, or a list of {"type": "text"} parts (joined)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadRequest(f"{where}.content: only text parts are supported, got {kind!r}")
            texts.append(part["text"])
        return "".join(texts)
    raise BadRequest(f"{where}.content must be a string or a list of text parts")


def chat_messages(raw: Any) -> list[dict]:
    """The conversation as the chat template reads it: role and text content, plus an assistant
    turn's tool calls (arguments as objects, as templates expect) and a tool turn's call id."""
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages must be a non-empty list of {\"role\": str, \"content\": ...} objects")
    messages = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"{where} must be an object with a string \"role\"")
        if message["role"] not in ("system", "developer", "user", "assistant", "tool"):
            raise BadRequest(f"{where}.role must be system, developer, user, assistant or tool, "
                             f"got {shown(message['role'])}")
        turn = {"role": message["role"], "content": text_content(message.get("content"), where)}
        calls = message.get("tool_calls")
        if calls:
            if message["role"] != "assistant" or not isinstance(calls, list):
                raise BadRequest(f"{where}.tool_calls must be a list, on an assistant message")
            turn["tool_calls"] = [_tool_call_of_history(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        if message["role"] == "tool" and isinstance(message.get("tool_call_id"), str):
            turn["tool_call_id"] = message["tool_call_id"]
        messages.append(turn)
    return messages


def _tool_call_of_history(raw: Any, where: str) -> dict:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise BadRequest(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \"arguments\": ...}}}}")
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            raise BadRequest(f"{where}.function.arguments is not valid JSON") from None
    return {"id": raw.get("id"), "type": "function", "function": {"name": function["name"], "arguments": arguments}}


def chat_tools(body: dict) -> ToolPlan | None:
    return tool_plan(body)


# -- requests, parsed (run in a worker thread) ----------------------------------------------------

@dataclasses.dataclass
class Call:
    """One generation request as parsed: its prompts and what to do with them."""

    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    logprobs: dict | None = None
    n: int = 1
    usage_wanted: bool = False
    echoed: list[str] = dataclasses.field(default_factory=list)
    tools: ToolPlan | None = None
    with_text: bool = False     # /generate: text in logprob entries
    rid: str | None = None      # /generate: the caller's request id


def prompt_ids(front: FrontEnd, prompt: Any, field: str) -> list[int]:
    """A prompt given as text or as token ids."""
    if isinstance(prompt, list):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            raise BadRequest(f"{field} must be a list of integer token ids")
        return prompt
    if isinstance(prompt, str):
        if front.settings.skip_tokenizer_init:
            raise BadRequest("the server runs with --skip-tokenizer-init: send token ids, not text")
        return front.tokenizer.encode(prompt)
    raise BadRequest(f"{field} must be a string or a list of token ids, got {shown(prompt)}")


def prompt_list(raw: Any) -> list:
    """A completion prompt (text, token ids, or a non-empty list of either) as a list of them."""
    if isinstance(raw, list) and raw and all(isinstance(p, (str, list)) for p in raw):
        return raw
    return [raw]


def checked(front: FrontEnd, call: Call) -> Call:
    for ids in call.prompts:
        front.check_prompt(ids, call.params)
    return call


def parse_generate(front: FrontEnd, body: dict) -> Call:
    params = native_sampling(body.get("sampling_params"))
    if "input_ids" not in body and "text" not in body:
        raise BadRequest("text or input_ids is required")
    field = "input_ids" if "input_ids" in body else "text"
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest(f"rid must be a string, got {shown(rid)}")
    return checked(front, Call([prompt_ids(front, body[field], field)], params, bool_field(body, "stream"),
                               native_logprobs(body), with_text=bool_field(body, "return_text_in_logprobs"),
                               rid=rid))


def parse_completion(front: FrontEnd, body: dict) -> Call:
    check_model(front, body)
    params = openai_sampling(body, OPENAI_COMPLETION_DEFAULT_MAX_TOKENS,
                                   output_constraint(body, None, completions=True))
    call = Call([], params, bool_field(body, "stream"), completion_logprobs(body),
                choice_count(body), include_usage(body))
    if "prompt" not in body:
        raise BadRequest("prompt is required")
    listed = prompt_list(body["prompt"])
    call.prompts = [prompt_ids(front, p, "prompt" if listed[0] is body["prompt"] else f"prompt[{i}]")
                    for i, p in enumerate(listed)]
    echo = bool_field(body, "echo")
    skip_text = front.settings.skip_tokenizer_init
    call.echoed = [(r if isinstance(r, str) else front.tokenizer.decode(ids)) if echo and not skip_text else ""
                   for r, ids in zip(listed, call.prompts)]
    return checked(front, call)


def parse_chat(front: FrontEnd, body: dict) -> Call:
    check_model(front, body)
    tools = chat_tools(body)
    params = openai_sampling(body, None, output_constraint(body, tools, completions=False))
    call = Call([], params, bool_field(body, "stream"), chat_logprobs(body),
                choice_count(body), include_usage(body), tools=tools)
    messages = chat_messages(body.get("messages"))
    if front.settings.skip_tokenizer_init:
        raise BadRequest("chat needs the tokenizer; the server runs with --skip-tokenizer-init")
    offered = [{"type": "function", "function": t} for t in tools.tools] if tools else None
    try:
        text = front.tokenizer.apply_chat_template(messages, tools=offered)
    except ValueError as err:  # the template's raise_exception: the conversation does not fit it
        raise BadRequest(f"messages: the model's chat template refused them: {err}") from None
    call.prompts = [front.tokenizer.encode(text)]
    return checked(front, call)


def parse_tokenize(front: FrontEnd, body: dict) -> dict:
    if front.settings.skip_tokenizer_init:
        raise BadRequest("the server runs with --skip-tokenizer-init: no tokenizer")
    if "messages" in body:
        text = front.tokenizer.apply_chat_template(chat_messages(body["messages"]))
    else:
        text = body.get("prompt", body.get("text"))
    if not isinstance(text, str):
        raise BadRequest("prompt (a string) or messages is required")
    add_special = body.get("add_special_tokens", True)
    if not isinstance(add_special, bool):
        raise BadRequest(f"add_special_tokens must be true or false, got {shown(add_special)}")
    ids = front.tokenizer.encode(text, add_special)
    return {"tokens": ids, "count": len(ids), "max_model_len": front.context_length}


def check_model(front: FrontEnd, body: dict) -> None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {shown(model)}")
    if model is not None and model != front.model_name:
        raise BadRequest(f"The model `{model}` does not exist. This server serves `{front.model_name}`.", 404)


# -- responses ----------------------------------------------------------------------------------

def finish_reason(item: dict) -> str | None:
    reason = item.get("finish_reason")
    return None if reason is None else ("length" if reason["type"] == "length" else "stop")


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def top_dict(alternatives: list, token_str: Callable[[int], str]) -> dict:
    """{token text: logprob}, best first; tokens that decode alike keep the best logprob."""
    found: dict[str, float] = {}
    for value, token in alternatives:
        found.setdefault(token_str(token), value)
    return found


def completion_logprob_fields(entries: list, offset: int, token_str: Callable[[int], str]) -> dict:
    """The legacy completions shape; text offsets count from `offset` in the choice's text."""
    tokens = [token_str(t) for _, t, _ in entries]
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token)
    return {"tokens": tokens, "token_logprobs": [lp for lp, _, _ in entries],
            "top_logprobs": [None if lp is None else top_dict(alts, token_str) for lp, _, alts in entries],
            "text_offset": offsets}


def chat_logprob_fields(entries: list, token_str: Callable[[int], str]) -> dict:
    def one(lp, token):
        text = token_str(token)
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
    return {"content": [{**one(lp, t), "top_logprobs": [one(a, b) for a, b in alts]}
                        for lp, t, alts in entries], "refusal": None}


def native_logprob_fields(entries: dict, top: int, with_text: bool, token_str: Callable[[int], str]) -> dict:
    """Upstream's meta_info shape: (logprob, token id, text or None) per position, and per
    position its top alternatives (None where there is no logprob: the first prompt token)."""
    def one(lp, token):
        return [lp, token, token_str(token) if with_text else None]
    fields = {}
    for side in ("input", "output"):
        fields[f"{side}_token_logprobs"] = [one(lp, t) for lp, t, _ in entries[side]]
        if top:
            fields[f"{side}_top_logprobs"] = [None if lp is None else [one(a, b) for a, b in alts]
                                              for lp, _, alts in entries[side]]
    return fields


def native_meta(item: dict, rid: str, logprobs: dict | None = None) -> dict:
    info = {"id": rid, "finish_reason": item.get("finish_reason"),
            "prompt_tokens": item["prompt_tokens"], "completion_tokens": item["completion_tokens"],
            "cached_tokens": item["cached_tokens"]}
    return {**info, **(logprobs or {})}
