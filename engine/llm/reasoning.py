"""--reasoning-parser: a reasoning model's thinking split out of its answer, as `reasoning_content`.

The two formats implemented follow upstream SGLang 0.5.23's detectors
(sglang/srt/parser/reasoning_parser.py): `deepseek-r1` reasons from the first token (its template
opens the <think> block, so the text may or may not repeat the tag) up to </think>; `qwen3`
reasons only inside an explicit <think> ... </think>. Text before </think> is the reasoning, text
after it the answer; with no </think> yet, everything after the start is reasoning (cut short, or
still streaming). While streaming, a tail that could be the start of a tag is held back, so the
deltas concatenate to exactly what the finished text parses to. Imports no torch.
"""

from __future__ import annotations

PARSERS = {"deepseek-r1": True, "qwen3": False}   # name -> reasons from the first token
START, END = "<think>", "</think>"


def split(parser: str, text: str) -> tuple[str, str]:
    """(reasoning, answer) of a finished text."""
    opened = text.lstrip()
    if opened.startswith(START):
        body = opened[len(START):]
    elif PARSERS[parser]:
        body = text
    else:
        return "", text
    end = body.find(END)
    if end < 0:
        return body, ""
    return body[:end], body[end + len(END):]


def _held(text: str) -> int:
    """Trailing characters that could begin a tag, or leading whitespace that could precede
    <think> (wait for the next delta)."""
    if START.startswith(text.lstrip()):  # blank so far, or the start of <think>
        return len(text)
    for n in range(min(len(END) - 1, len(text)), 0, -1):
        if END.startswith(text[-n:]) or START.startswith(text[-n:]):
            return n
    return 0


class StreamSplitter:
    """Deltas of reasoning and answer for one streamed choice."""

    def __init__(self, parser: str):
        self.parser, self.text = parser, ""
        self._reasoning = self._answer = 0

    def feed(self, delta: str, finished: bool) -> tuple[str, str]:
        self.text += delta
        visible = self.text if finished else self.text[:len(self.text) - _held(self.text)]
        reasoning, answer = split(self.parser, visible)
        out = reasoning[self._reasoning:], answer[self._answer:]
        self._reasoning, self._answer = max(self._reasoning, len(reasoning)), max(self._answer, len(answer))
        return out
