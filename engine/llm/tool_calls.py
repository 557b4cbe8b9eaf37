"""Tool calling for the chat API: the request's `tools` and `tool_choice`, the output constraint a
named or required choice implies, and reading tool calls back out of generated text.

As upstream SGLang 0.5.23 does when no model-specific structural tag applies
(sglang/srt/function_call/utils.py get_json_schema_constraint), `tool_choice` "required" or a named
function constrains the output to a JSON array of at least one {"name", "parameters"} object whose
parameters follow the tool's schema; that array is then read back as the calls (serving_chat.py
_process_tool_calls). With "auto" the model writes freely and the resolved --tool-call-parser finds
the calls in its text, in the model family's own format (sglang/srt/function_call/*_detector.py).
Imports no torch.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from typing import Any, Callable

from accord.engine.llm.request_errors import BadRequest

# The --tool-call-parser values this engine implements (rules/llm/engine.yaml refuses the others).
PARSERS = ("hermes", "qwen25", "llama3", "mistral")


@dataclasses.dataclass(frozen=True)
class ToolPlan:
    tools: tuple[dict, ...]      # each {"name", "description", "parameters"}
    choice: str                  # "auto", "required" or "named"
    named: str | None = None     # the function a named choice picks
    parallel: bool = True        # parallel_tool_calls: several calls in one answer

    @property
    def constrained(self) -> bool:
        return self.choice in ("required", "named")

    def schema(self) -> dict | None:
        """The JSON schema the output must follow (required / named), as upstream builds it, with
        each item also typed "object" and closed to other keys: without them JSON Schema lets a
        non-object value or extra keys through (llguidance honours that, as it should; xgrammar
        happens to assume a closed object), and a call is exactly {"name", "parameters"}."""
        if not self.constrained:
            return None
        chosen = [t for t in self.tools if self.choice == "required" or t["name"] == self.named]
        items = [{"type": "object", "properties": {"name": {"type": "string", "enum": [t["name"]]},
                                 "parameters": t["parameters"]},
                  "required": ["name", "parameters"], "additionalProperties": False} for t in chosen]
        item = items[0] if self.choice == "named" else {"type": "object", "anyOf": items}
        schema = {"type": "array", "minItems": 1, "items": item}
        if not self.parallel:
            schema["maxItems"] = 1
        return schema


def tool_plan(body: dict) -> ToolPlan | None:
    """The request's tools and tool_choice, checked; None when no tool may be called."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise BadRequest("tool_choice needs tools: the request lists no tools to choose from")
        return None
    if not isinstance(tools, list) or not tools:
        raise BadRequest("tools must be a non-empty list of {\"type\": \"function\", \"function\": {...}} objects")
    found = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(function, dict):
            raise BadRequest(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
        name, parameters = function.get("name"), function.get("parameters")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise BadRequest(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or '-'")
        if parameters is not None and not isinstance(parameters, dict):
            raise BadRequest(f"tools[{i}].function.parameters must be a JSON schema object")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise BadRequest(f"tools[{i}].function.description must be a string")
        found.append({"name": name, "description": description or "",
                      "parameters": parameters or {"type": "object", "properties": {}}})
    names = [t["name"] for t in found]
    if len(set(names)) != len(names):
        raise BadRequest("tools: two tools share a name; give each function its own name")
    parallel = body.get("parallel_tool_calls", True)
    if parallel is None:
        parallel = True
    if not isinstance(parallel, bool):
        raise BadRequest(f"parallel_tool_calls must be true or false, got {json.dumps(parallel)}")
    if choice is None:
        choice = "auto"
    if choice == "none":
        return None
    if choice in ("auto", "required"):
        return ToolPlan(tuple(found), choice, parallel=parallel)
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(named, str) or (isinstance(choice, dict) and choice.get("type", "function") != "function"):
        raise BadRequest("tool_choice must be \"none\", \"auto\", \"required\" or "
                         "{\"type\": \"function\", \"function\": {\"name\": ...}}")
    if named not in names:
        raise BadRequest(f"tool_choice names the function {named!r}, which is not in tools ({', '.join(names)})")
    return ToolPlan(tuple(found), "named", named, parallel)


def tools_prompt(plan: ToolPlan) -> str:
    """The tools as a system-prompt block, for a chat template that has no `tools` of its own
    (the built-in model's transcript template)."""
    lines = ["You can call these functions; to call one, answer with "
             "<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>."]
    lines += [json.dumps({"type": "function", "function": t}, sort_keys=True) for t in plan.tools]
    return "\n".join(lines)


def call(name: str, arguments: Any) -> dict:
    """One OpenAI tool call; arguments are always JSON text."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": text}}


def constrained_calls(text: str) -> list[dict] | None:
    """The calls of a required / named choice's output (a JSON array of {"name", "parameters"});
    None when the text is not one (cut short by max_tokens)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in data):
        return None
    return [call(d["name"], d.get("parameters", d.get("arguments", {}))) for d in data]


def _json_objects(text: str) -> list[dict]:
    """Every top-level JSON object in `text`, in order."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while True:
        start = text.find("{", at)
        if start < 0:
            return found
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(value, dict):
            found.append(value)
        at = end


def _hermes(text: str) -> tuple[str, list[dict]]:
    """Hermes / Qwen 2.5: <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks."""
    calls, blocks = [], re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, flags=re.S)
    for block in blocks:
        calls += [o for o in _json_objects(block) if "name" in o]
    cut = text.find("<tool_call>")
    return (text if cut < 0 else text[:cut]).strip(), calls


def _llama3(text: str) -> tuple[str, list[dict]]:
    """Llama 3.x: optional <|python_tag|>, then {"name": ..., "parameters": {...}} objects split by ';'."""
    start = text.find("<|python_tag|>")
    body = text[start + len("<|python_tag|>"):] if start >= 0 else text.lstrip()
    if start < 0 and not body.startswith("{"):
        return text, []
    calls = [o for o in _json_objects(body) if "name" in o and ("parameters" in o or "arguments" in o)]
    return (text[:start] if start >= 0 else "").strip() if calls else text, calls


def _mistral(text: str) -> tuple[str, list[dict]]:
    """Mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]."""
    cut = text.find("[TOOL_CALLS]")
    if cut < 0:
        return text, []
    return text[:cut].strip(), [o for o in _json_objects(text[cut:]) if "name" in o]


_DETECTORS: dict[str, Callable[[str], tuple[str, list[dict]]]] = {
    "hermes": _hermes, "qwen25": _hermes, "llama3": _llama3, "mistral": _mistral}


def parsed_calls(parser: str | None, text: str, plan: ToolPlan) -> tuple[str, list[dict] | None]:
    """(remaining content, the calls) of an "auto" answer, read with --tool-call-parser. Calls to
    functions the request did not offer are left in the text, as upstream's detectors do."""
    if parser is None:
        return text, None
    content, found = _DETECTORS[parser](text)
    offered = {t["name"] for t in plan.tools}
    calls = [call(o["name"], o.get("arguments", o.get("parameters", {}))) for o in found if o["name"] in offered]
    return (content, calls) if calls else (text, None)
