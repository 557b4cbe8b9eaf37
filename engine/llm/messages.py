"""The wire format between engine processes: msgpack maps, never pickle.

Unpickling bytes from a socket runs code chosen by whoever wrote them; msgpack only ever yields
plain data. Every message is a map with a "type" key:

    front end -> scheduler   {"type": "generate", "rid", "input_ids", "sampling", "stream",
                              "logprobs": None or {"top": alternatives, "start": prompt position or None}}
                             {"type": "abort", "rid"}
                             {"type": "flush_cache"}
    scheduler -> detokenizer {"type": "outputs", "items": [{"rid", "ids", "finished",
                              "finish_reason", "prompt_tokens", "completion_tokens",
                              "cached_tokens", "stop", "error", "logprobs": None or {"input": [...],
                              "output": [...]}, entries [logprob, token id, [[logprob, token id], ...]]}]}
    detokenizer -> front end the same items, each with "text" (the new text) added
"""

from __future__ import annotations

from typing import Any

import msgpack


def pack(message: dict[str, Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def unpack(data: bytes) -> dict[str, Any]:
    message = msgpack.unpackb(data, raw=False, strict_map_key=True)
    if not isinstance(message, dict) or "type" not in message:
        raise ValueError("malformed engine message: expected a map with a 'type' key")
    return message
