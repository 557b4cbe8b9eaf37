"""engine.llm.grammar: a constraint compiled by either backend masks random logits so that every
sampled sequence matches it, for the byte-level built-in tokenizer and for a byte-level BPE one.

The property checked is the constraint itself (json.loads plus the schema's own keywords, a regex
fullmatch, membership in the grammar's language), on sequences sampled from random logits: a
grammar that let one wrong token through would show up as a mismatch.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from accord.engine.llm.grammar import BACKENDS, GrammarBackend, token_bytes
from accord.engine.llm.tokenizer import ByteTokenizer

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "n", "ok"],
          "properties": {"name": {"type": "string", "pattern": "^[a-z]{1,6}$"},
                         "n": {"type": "integer", "minimum": 0, "maximum": 99},
                         "ok": {"type": "boolean"}}}
REGEX = r"(yes|no)-[0-9]{2}"
EBNF = 'root ::= "red" | "green" | "blue"'


def byte_tokenizer() -> ByteTokenizer:
    return ByteTokenizer(258, 256, [257])


def sample_with(matcher, vocab: int, seed: int, limit: int = 200, stop: int = 257) -> tuple[list[int], bool]:
    """Tokens sampled from random logits through the matcher, until it is finished, without the
    stop token (xgrammar finishes on it; llguidance as soon as nothing else can follow)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = []
    for _ in range(limit):
        logits = matcher.allowed(torch.randn(vocab, generator=generator) * 3)
        token = int(torch.multinomial(logits.softmax(-1), 1, generator=generator))
        matcher.accept(token)
        tokens.append(token)
        if matcher.finished:
            return tokens[:-1] if token == stop else tokens, True
    return tokens, False


def follows(value) -> bool:
    return (isinstance(value, dict) and set(value) == {"name", "n", "ok"}
            and re.fullmatch("[a-z]{1,6}", value["name"]) is not None
            and type(value["n"]) is int and 0 <= value["n"] <= 99 and type(value["ok"]) is bool)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("any_whitespace", [False, True])
def test_sampled_json_follows_the_schema_with_the_byte_tokenizer(backend, any_whitespace):
    grammar = GrammarBackend(backend, byte_tokenizer(), 258, [257], any_whitespace)
    for seed in range(3):
        tokens, finished = sample_with(grammar.matcher("json_schema", json.dumps(SCHEMA)), 258, seed, limit=400)
        if not finished:  # free whitespace can run long under random logits; what exists is a prefix
            assert any_whitespace
            continue
        assert follows(json.loads(bytes(tokens).decode()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_regex_and_ebnf_outputs_match_with_the_byte_tokenizer(backend):
    grammar = GrammarBackend(backend, byte_tokenizer(), 258, [257], True)
    for seed in range(3):
        tokens, finished = sample_with(grammar.matcher("regex", REGEX), 258, seed)
        assert finished and re.fullmatch(REGEX, bytes(tokens).decode())
        tokens, finished = sample_with(grammar.matcher("ebnf", EBNF), 258, seed)
        assert finished and bytes(tokens).decode() in ("red", "green", "blue")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind,text", [("json_schema", '{"type": 5}'), ("json_schema", "not json"),
                                       ("regex", "(unclosed"), ("ebnf", 'root ::= "unterminated')])
def test_a_constraint_that_does_not_compile_is_a_value_error_naming_it(backend, kind, text):
    grammar = GrammarBackend(backend, byte_tokenizer(), 258, [257], True)
    with pytest.raises(ValueError, match=kind):
        grammar.matcher(kind, text)


def test_ids_past_the_tokenizer_are_never_allowed():
    """The model's vocab_size can exceed the tokenizer's (padding rows): those ids stay masked."""
    for backend in BACKENDS:
        grammar = GrammarBackend(backend, byte_tokenizer(), 300, [257], True)
        allowed = grammar.matcher("regex", "[a-z]+").allowed(torch.zeros(300))
        assert torch.isinf(allowed[258:]).all() and torch.isfinite(allowed[ord("a")])


@pytest.fixture(scope="module")
def bpe_tokenizer(tmp_path_factory):
    pytest.importorskip("transformers")
    from accord.engine.llm.hf_tokenizer import folder_tokenizer
    from tests.test_engine_llm_hf_folders import train_tokenizer

    folder = tmp_path_factory.mktemp("bpe")
    train_tokenizer(False, folder)
    tokenizer = folder_tokenizer(folder, None, [2])
    return tokenizer


def test_bpe_token_bytes_decode_as_the_tokenizer_does(bpe_tokenizer):
    tokens, special = token_bytes(bpe_tokenizer)
    assert set(special) == {0, 1, 2}, "<|endoftext|>, <|im_start|>, <|im_end|>"
    for token in range(len(tokens)):
        if token not in special:
            assert tokens[token].decode("utf-8", errors="replace") == bpe_tokenizer.decode([token]) or \
                "\ufffd" in bpe_tokenizer.decode([token])


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampled_json_follows_the_schema_with_a_bpe_tokenizer(backend, bpe_tokenizer):
    vocab = bpe_tokenizer.vocab_size
    grammar = GrammarBackend(backend, bpe_tokenizer, vocab, [2], False)
    for seed in range(3):
        tokens, finished = sample_with(grammar.matcher("json_schema", json.dumps(SCHEMA)), vocab, seed, stop=2)
        assert finished and follows(json.loads(bpe_tokenizer.decode(tokens)))
