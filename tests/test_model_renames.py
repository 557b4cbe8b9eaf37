"""Renamed hub ids: the hub redirects an old id to its repository's new one, so both ids name the
same files and a built-in card stored under either answers for both (rules/models/renamed.yaml)."""

from __future__ import annotations

import pytest
import yaml

from accord.resolver.facts.model import model_facts
from accord.resolver.facts.model_sources import model_card
from accord.rules.paths import MODELS_DIR

PAIRS = yaml.safe_load((MODELS_DIR / "renamed.yaml").read_text(encoding="utf-8"))["same_repository"]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda pair: pair[0])
def test_both_ids_of_a_renamed_repository_read_the_same_card(pair, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: the card answers
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    cards = [model_card(name, "llm") for name in pair]
    if all(card is None for card in cards):
        pytest.skip(f"no built-in card for {pair}")
    assert cards[0] is not None and cards[1] is not None
    assert cards[0].files == cards[1].files
    assert model_facts(pair[0], "llm") == model_facts(pair[1], "llm")


def test_every_pair_names_two_different_hub_ids():
    for pair in PAIRS:
        assert len(pair) == 2 and pair[0].lower() != pair[1].lower() and all("/" in name for name in pair)


def test_at_least_the_old_llama_3_1_instruct_ids_have_a_card():
    """SGLang's docs name meta-llama/Meta-Llama-3.1-8B-Instruct; offline it must be read, not skipped."""
    assert model_card("meta-llama/Meta-Llama-3.1-8B-Instruct", "llm") is not None
