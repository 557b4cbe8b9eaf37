"""The built-in text encoder's tokenizer: a start token, then the prompt's UTF-8 bytes.

Kept apart from the networks so the HTTP front end can measure prompts without importing torch.
"""

from __future__ import annotations

BOS_TOKEN = 256  # after the 256 byte values
PAD_TOKEN = 0


def tokenize(prompt: str) -> list[int]:
    return [BOS_TOKEN, *prompt.encode("utf-8")]
