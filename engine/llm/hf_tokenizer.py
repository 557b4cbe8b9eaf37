"""A real model's tokenizer: byte-level BPE built with the `tokenizers` package, chat template by jinja2.

From a GGUF file the vocabulary, merges, control tokens and chat template come from its metadata
(read by the pure-Python header reader); from a Hugging Face folder, from tokenizer.json and
tokenizer_config.json. The template renders as transformers renders it (sandboxed jinja2 with
trim_blocks / lstrip_blocks and loop controls), so a chat prompt has the same tokens either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping, Sequence

# GGUF tokenizer.ggml.pre names whose pre-tokenizer splits digits one by one before byte-level BPE.
_DIGIT_SPLITTING_PRE = ("smollm",)
_CONTROL = 3  # tokenizer.ggml.token_type of control (special) tokens


class HFTokenizer:
    def __init__(self, tokenizer, chat_template: str | None, bos_token_id: int | None,
                 eos_token_ids: Sequence[int], add_bos: bool, special: Mapping[str, str]):
        self._tok, self.chat_template = tokenizer, chat_template
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.bos_token_id, self.eos_token_ids = bos_token_id, tuple(eos_token_ids)
        self.add_bos, self.special = add_bos, dict(special)

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_bos and self.add_bos and self.bos_token_id is not None and ids[:1] != [self.bos_token_id]:
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def apply_chat_template(self, messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None) -> str:
        """The prompt of a conversation; `tools` (OpenAI function objects) go to the template as
        transformers passes them, for templates that describe tools to the model."""
        if not self.chat_template:
            return "".join(f"{m['role']}: {m.get('content') or ''}\n" for m in messages) + "assistant:"
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise ValueError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=list(messages), tools=list(tools) if tools else None, add_generation_prompt=True,
            **self.special)


def gguf_tokenizer(path: str, bos_token_id: int | None, eos_token_ids: Sequence[int]) -> HFTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from accord.rules.models.gguf_header import read_header

    meta = read_header(path, keep_arrays=True).metadata
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=bool(meta.get("tokenizer.ggml.add_space_prefix")))
    if meta.get("tokenizer.ggml.pre") in _DIGIT_SPLITTING_PRE:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type") or []
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, kind in enumerate(types) if kind == _CONTROL])
    special = {"bos_token": tokens[bos_token_id] if bos_token_id is not None else "",
               "eos_token": tokens[eos_token_ids[0]] if eos_token_ids else ""}
    return HFTokenizer(tok, meta.get("tokenizer.chat_template"), bos_token_id, eos_token_ids,
                       bool(meta.get("tokenizer.ggml.add_bos_token", False)), special)


def folder_tokenizer(folder: Path, bos_token_id: int | None, eos_token_ids: Sequence[int]) -> HFTokenizer:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    template = config.get("chat_template")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")

    def text(value):
        return value.get("content", "") if isinstance(value, dict) else (value or "")

    special = {"bos_token": text(config.get("bos_token")), "eos_token": text(config.get("eos_token"))}
    return HFTokenizer(tok, template, bos_token_id, eos_token_ids, bool(config.get("add_bos_token", False)),
                       special)


class TokenizerDecoder:
    """Incremental text of a growing id list for a BPE tokenizer: decode all ids so far and emit only
    what is new and complete (a trailing replacement character waits for the rest of its bytes)."""

    def __init__(self, tokenizer: HFTokenizer):
        self._tokenizer, self._ids, self._emitted = tokenizer, [], 0

    def feed(self, ids: Iterable[int], final: bool = False) -> str:
        self._ids.extend(ids)
        text = self._tokenizer.decode(self._ids)
        if not final and text.endswith("\ufffd"):
            return ""
        delta, self._emitted = text[self._emitted:], len(text)
        return delta


