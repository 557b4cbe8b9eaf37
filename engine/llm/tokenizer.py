"""A byte-level tokenizer: token id = UTF-8 byte value, plus the model's special ids above 255.

The built-in model is trained on nothing, so any lossless tokenizer will do; bytes need no
vocabulary file and round-trip every string. Streaming decodes incrementally so a multi-byte
character split across steps is emitted whole, once.
"""

from __future__ import annotations

import codecs
import json
from typing import Iterable, Mapping, Sequence

BYTE_VOCAB = 256


class ByteTokenizer:
    def __init__(self, vocab_size: int, bos_token_id: int | None, eos_token_ids: Sequence[int]):
        if vocab_size < BYTE_VOCAB:
            raise ValueError(f"a byte-level tokenizer needs vocab_size >= {BYTE_VOCAB}, got {vocab_size}")
        self.vocab_size = vocab_size
        self.bos_token_id = bos_token_id
        self.eos_token_ids = tuple(eos_token_ids)

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id, *ids] if add_bos and self.bos_token_id is not None else ids

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if 0 <= i < BYTE_VOCAB).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None) -> str:
        """A plain role-tagged transcript ending with the assistant's turn; offered tools (one
        JSON object a line) in a turn of their own first, earlier tool calls as
        <tool_call>{json}</tool_call> lines, as the Hermes format writes them."""
        turns = []
        if tools:
            turns.append("<|tools|>\n" + "".join(json.dumps(t, sort_keys=True) + "\n" for t in tools))
        for m in messages:
            calls = "".join(f"<tool_call>{json.dumps(c['function'], sort_keys=True)}</tool_call>\n"
                            for c in m.get("tool_calls") or ())
            turns.append(f"<|{m['role']}|>\n{m.get('content') or ''}\n{calls}")
        return "".join(turns) + "<|assistant|>\n"


def make_tokenizer(config, model_path: str | None = None):
    """The tokenizer of a ModelConfig: a GGUF file's or a folder's BPE tokenizer when it has one,
    else bytes plus the model's BOS/EOS ids (the built-in random model)."""
    from accord.engine.llm.hf_tokenizer import folder_tokenizer, gguf_tokenizer

    if getattr(config, "gguf_path", None):
        return gguf_tokenizer(config.gguf_path, config.bos_token_id, config.eos_token_ids)
    if model_path is not None:
        from accord.rules.models.location import local_path

        folder = local_path(model_path)
        if folder is not None and (folder / "tokenizer.json").is_file():
            return folder_tokenizer(folder, config.bos_token_id, config.eos_token_ids)
    return ByteTokenizer(config.vocab_size, config.bos_token_id, config.eos_token_ids)


class IncrementalDecoder:
    """Turns a growing list of token ids into text deltas, never splitting a UTF-8 character."""

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: Iterable[int], final: bool = False) -> str:
        data = bytes(i for i in ids if 0 <= i < BYTE_VOCAB)
        return self._decoder.decode(data, final=final)


def incremental_decoder(tokenizer=None):
    """A per-request streaming decoder for `tokenizer` (None or bytes: the UTF-8 byte decoder)."""
    if tokenizer is None or isinstance(tokenizer, ByteTokenizer):
        return IncrementalDecoder()
    from accord.engine.llm.hf_tokenizer import TokenizerDecoder

    return TokenizerDecoder(tokenizer)
