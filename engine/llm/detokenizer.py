"""The detokenizer process: scheduler token ids in, text deltas out to the front end.

It keeps one incremental decoder per request, so a streamed multi-byte character is emitted once,
whole, and cuts the final text at a matched stop string (as OpenAI servers do). While a request
runs, a tail of its text that could be the start of one of its stop strings is held back, so the
streamed deltas concatenate to exactly the non-streamed text. With
--skip-tokenizer-init it passes ids through and adds no text. Imports no torch.
"""

from __future__ import annotations

from typing import Any

import zmq

from accord.engine.llm.messages import pack, unpack
from accord.engine.llm.model_config import load_model_config
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.tokenizer import incremental_decoder, make_tokenizer
from accord.engine.ports import Endpoints, bind_private
from accord.engine.supervisor import report_ready
from accord.resolver.frozen import ResolvedConfig


class RequestText:
    """The text produced so far for one request."""

    def __init__(self, tokenizer=None):
        self._decoder = incremental_decoder(tokenizer)
        self._text = ""
        self._emitted = 0

    def update(self, ids: list[int], finished: bool, stop: str | None,
               stops: tuple[str, ...] = ()) -> str:
        """Feed new ids; returns the text to add to what was already emitted."""
        self._text += self._decoder.feed(ids, final=finished)
        visible = self._text
        if finished and stop:
            cut = visible.find(stop)
            visible = visible if cut < 0 else visible[:cut]
        elif not finished:
            visible = visible[:len(visible) - held_back(visible, stops)]
        delta = visible[self._emitted:]
        self._emitted = max(self._emitted, len(visible))
        return delta


def held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters of `text` might begin a stop string (not emitted yet)."""
    longest = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:n]):
                longest = n
                break
    return longest


class Detokenizer:
    def __init__(self, with_text: bool, tokenizer=None):
        self.with_text, self.tokenizer = with_text, tokenizer
        self._requests: dict[str, RequestText] = {}

    def convert(self, item: dict[str, Any]) -> dict[str, Any]:
        if not self.with_text:
            return {**item, "text": None}
        state = self._requests.setdefault(item["rid"], RequestText(self.tokenizer))
        reason = item.get("finish_reason") or {}
        stop = reason.get("matched") if isinstance(reason.get("matched"), str) else None
        text = state.update(item["ids"], item["finished"], stop, tuple(item.get("stop") or ()))
        if item["finished"]:
            del self._requests[item["rid"]]
        return {**item, "text": text}


def run_detokenizer(config_data: dict, endpoints: Endpoints) -> None:
    """Process entry point."""
    settings = EngineSettings.from_config(ResolvedConfig.from_dict(config_data))
    model = load_model_config(settings.model_path)  # fail here too if the model folder is unusable
    tokenizer = None if settings.skip_tokenizer_init else make_tokenizer(model, settings.model_path)
    detokenizer = Detokenizer(with_text=not settings.skip_tokenizer_init, tokenizer=tokenizer)
    context = zmq.Context()
    context.setsockopt(zmq.LINGER, 0)  # never block exit on unsent messages
    inbox = context.socket(zmq.PULL)
    bind_private(inbox, endpoints.detokenizer)
    outbox = context.socket(zmq.PUSH)
    outbox.connect(endpoints.tokenizer)
    report_ready()
    while True:
        message = unpack(inbox.recv())
        if message["type"] == "outputs":
            message = {"type": "outputs", "items": [detokenizer.convert(i) for i in message["items"]]}
        outbox.send(pack(message))
