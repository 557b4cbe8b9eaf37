"""engine.llm.reasoning: reasoning split from the answer in upstream's DeepSeek-R1 and Qwen3 formats,
and streamed deltas that concatenate to exactly the split of the finished text."""

from __future__ import annotations

import pytest

from accord.engine.llm.reasoning import PARSERS, StreamSplitter, split

TEXTS = ["I weigh it</think>The answer is 42.", "<think>I weigh it</think>The answer is 42.",
         "The answer is 42.", "<think>cut short", "  <think>a</think>b</think>c", "<thin", "</think>"]


@pytest.mark.parametrize("parser,text,expected", [
    ("deepseek-r1", "I weigh it</think>The answer is 42.", ("I weigh it", "The answer is 42.")),
    ("deepseek-r1", "<think>I weigh it</think>The answer is 42.", ("I weigh it", "The answer is 42.")),
    ("deepseek-r1", "still thinking", ("still thinking", "")),
    ("qwen3", "<think>I weigh it</think>The answer is 42.", ("I weigh it", "The answer is 42.")),
    ("qwen3", "The answer is 42.", ("", "The answer is 42.")),
    ("qwen3", "<think>cut short", ("cut short", "")),
])
def test_split_follows_upstreams_formats(parser, text, expected):
    assert split(parser, text) == expected


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("piece", [1, 3])
def test_streamed_deltas_concatenate_to_the_finished_split(parser, text, piece):
    splitter = StreamSplitter(parser)
    reasoning = answer = ""
    chunks = [text[i:i + piece] for i in range(0, len(text), piece)]
    for i, chunk in enumerate(chunks):
        r, a = splitter.feed(chunk, i == len(chunks) - 1)
        reasoning, answer = reasoning + r, answer + a
    assert (reasoning, answer) == split(parser, text)
