"""Constrained decoding: a request's json_schema / regex / ebnf compiled by the resolved
--grammar-backend into a matcher that masks the logits of each step and follows the sampled tokens.

Two backends, as upstream SGLang 0.5.23 runs them (sglang/srt/constrained/xgrammar_backend.py and
llguidance_backend.py): xgrammar (upstream's default) and llguidance. JSON allows any whitespace
unless --constrained-json-disable-any-whitespace (base_grammar_backend.py). A grammar that does not
compile is a ValueError naming the field; the scheduler answers it as a 400.

The vocabulary each backend sees is the engine's tokenizer's: for the byte-level built-in
tokenizer, one byte per token id below 256; for a BPE tokenizer, its byte-level token strings. Ids
the tokenizer does not define (padding up to the model's vocab_size) are never allowed; the stop
(EOS) tokens are allowed once the grammar is complete.
"""

from __future__ import annotations

import json
import threading
from typing import Sequence

import torch

BACKENDS = ("xgrammar", "llguidance")


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character standing for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tokenizer) -> tuple[list[bytes], list[int]]:
    """(the bytes of every token id, the special token ids) of an engine tokenizer."""
    from accord.engine.llm.tokenizer import BYTE_VOCAB, ByteTokenizer

    if isinstance(tokenizer, ByteTokenizer):
        tokens = [bytes([i]) for i in range(BYTE_VOCAB)]
        special = list(range(BYTE_VOCAB, tokenizer.vocab_size))
        return tokens + [b""] * len(special), special
    vocab = tokenizer._tok.get_vocab(with_added_tokens=True)
    added = {t.content for t in tokenizer._tok.get_added_tokens_decoder().values() if t.special}
    by_char = _bytes_to_unicode()
    tokens, special = [b""] * tokenizer.vocab_size, []
    for text, token in vocab.items():
        if token >= len(tokens):
            continue
        if text in added:
            special.append(token)
            continue
        tokens[token] = bytes(by_char[c] for c in text if c in by_char) if all(c in by_char for c in text) \
            else text.encode("utf-8")
    return tokens, sorted(special)


class Matcher:
    """One request's grammar state."""

    def allowed(self, logits: torch.Tensor) -> torch.Tensor:
        """`logits` [V] with every token the grammar forbids next set to -inf."""
        raise NotImplementedError

    def accept(self, token: int) -> None:
        raise NotImplementedError

    @property
    def finished(self) -> bool:
        """The grammar is complete and accepted its end (a stop token): nothing may follow."""
        raise NotImplementedError


class XGrammarMatcher(Matcher):
    def __init__(self, compiled, vocab_size: int):
        import xgrammar

        self._xgr = xgrammar
        self._matcher = xgrammar.GrammarMatcher(compiled)
        self._mask = xgrammar.allocate_token_bitmask(1, vocab_size)

    def allowed(self, logits: torch.Tensor) -> torch.Tensor:
        self._matcher.fill_next_token_bitmask(self._mask)
        row = logits.unsqueeze(0).clone()
        self._xgr.apply_token_bitmask_inplace(row, self._mask.to(row.device))
        return row[0]

    def accept(self, token: int) -> None:
        self._matcher.accept_token(token)

    @property
    def finished(self) -> bool:
        return self._matcher.is_terminated()


class LLGuidanceMatcher(Matcher):
    def __init__(self, tokenizer, grammar: str, vocab_size: int):
        import llguidance
        import llguidance.torch

        self._torch = llguidance.torch
        self._matcher = llguidance.LLMatcher(tokenizer, grammar)
        if self._matcher.is_error():
            raise ValueError(self._matcher.get_error())
        self._mask = llguidance.torch.allocate_token_bitmask(1, vocab_size)

    def allowed(self, logits: torch.Tensor) -> torch.Tensor:
        self._torch.fill_next_token_bitmask(self._matcher, self._mask, 0)
        row = logits.unsqueeze(0).clone()
        self._torch.apply_token_bitmask_inplace(row, self._mask.to(row.device))
        return row[0]

    def accept(self, token: int) -> None:
        self._matcher.consume_token(token)

    @property
    def finished(self) -> bool:
        return self._matcher.is_stopped()


class GrammarBackend:
    """Compiles request constraints for one model vocabulary. Indexing a large vocabulary takes
    seconds (SmolLM2's 49k tokens: about 4 s for xgrammar, 13 s for llguidance on a busy CPU), so
    `warm_up` does it in a background thread when the rank starts; a constraint that arrives
    before it is done waits for it."""

    def __init__(self, name: str, tokenizer, vocab_size: int, stop_ids: Sequence[int], any_whitespace: bool):
        if name not in BACKENDS:
            raise ValueError(f"unknown grammar backend {name!r}")
        self.name, self.vocab_size, self.any_whitespace = name, vocab_size, any_whitespace
        self._tokenizer, self._stop_ids = tokenizer, list(stop_ids)
        self._compiler = None
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Index the vocabulary in a background thread."""
        threading.Thread(target=self._index, name="grammar-warm-up", daemon=True).start()

    def _index(self):
        with self._lock:
            return self._xgrammar() if self.name == "xgrammar" else self._llguidance()

    def _xgrammar(self):
        if self._compiler is None:
            import xgrammar

            tokens, _ = token_bytes(self._tokenizer)
            info = xgrammar.TokenizerInfo(tokens, vocab_type=xgrammar.VocabType.RAW,
                                          vocab_size=self.vocab_size, stop_token_ids=self._stop_ids)
            self._compiler = xgrammar.GrammarCompiler(info, max_threads=1)
        return self._compiler

    def _llguidance(self):
        if self._compiler is None:
            import llguidance

            tokens, special = token_bytes(self._tokenizer)
            eos = self._stop_ids[0] if self._stop_ids else None

            class Wrapped:  # what llguidance.TokenizerWrapper reads
                eos_token_id, bos_token_id = eos, getattr(self._tokenizer, "bos_token_id", None)
                special_token_ids = special

                def __call__(inner, text):
                    text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
                    return self._tokenizer.encode(text, False)

            Wrapped.tokens = tokens + [b""] * max(0, self.vocab_size - len(tokens))
            self._compiler = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Wrapped()))
        return self._compiler

    def matcher(self, kind: str, text: str) -> Matcher:
        """A fresh matcher for a json_schema / regex / ebnf constraint; ValueError if it does not compile."""
        try:
            if self.name == "xgrammar":
                compiler = self._index()
                if kind == "json_schema":
                    compiled = compiler.compile_json_schema(_schema(text), any_whitespace=self.any_whitespace)
                elif kind == "regex":
                    compiled = compiler.compile_regex(text)
                else:
                    compiled = compiler.compile_grammar(text)
                return XGrammarMatcher(compiled, self.vocab_size)
            import llguidance

            tokenizer = self._index()
            if kind == "json_schema":
                grammar = llguidance.LLMatcher.grammar_from_json_schema(
                    _schema(text), defaults={"whitespace_flexible": self.any_whitespace})
            else:
                grammar = llguidance.grammar_from("regex" if kind == "regex" else "ebnf", text)
            return LLGuidanceMatcher(tokenizer, grammar, self.vocab_size)
        except Exception as err:  # noqa: BLE001 - each backend raises its own types for a bad grammar
            text = str(err).strip()
            if text.startswith(kind):
                raise
            first = text.splitlines()[0] if text else type(err).__name__
            raise ValueError(f"{kind} does not compile with --grammar-backend {self.name}: {first}") from None


def _schema(text: str) -> str:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"json_schema is not valid JSON: {err}") from None
    if not isinstance(schema, (dict, bool)):
        raise ValueError("json_schema must be a JSON schema object")
    return text
