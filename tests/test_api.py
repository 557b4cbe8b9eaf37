"""resolver.api.resolve: what a resolve call promises beyond the rules themselves.

A choice the catalog marks as `auto_choice` means "let the rules decide": typing it pins nothing,
so the result is what the unset flag gives, and the provenance still says it was typed. Expected
values from upstream: serving_hook.py:handle_load_balance_method resolves `auto` (typed or the
default) to round_robin outside PD prefill and to follow_bootstrap_room on prefill servers
(oracle cases r13-0013, r29-0057).
"""

from resolver.api import resolve
from resolver.facts import load_facts


def _resolve(values):
    return resolve("llm", values, load_facts("h100", (), system="llm"), {name: "cli" for name in values})


def test_a_typed_auto_choice_is_decided_by_the_rules_like_an_unset_flag():
    typed = _resolve({"load_balance_method": "auto"})
    unset = _resolve({})
    assert typed.values["load_balance_method"] == unset.values["load_balance_method"] == "round_robin"
    assert typed.provenance["load_balance_method"]["rule"] == unset.provenance["load_balance_method"]["rule"]
    assert typed.provenance["load_balance_method"]["typed"] == "auto"
    assert "typed" not in unset.provenance["load_balance_method"]


def test_a_typed_auto_choice_follows_the_mode_as_upstream_does():
    config = _resolve({"load_balance_method": "auto", "disaggregation_mode": "prefill"})
    assert config.values["load_balance_method"] == "follow_bootstrap_room"


def test_a_typed_auto_choice_no_rule_decides_stays_as_typed():
    config = _resolve({"kv_cache_dtype": "auto"})
    assert config.values["kv_cache_dtype"] == "auto"
    assert config.provenance["kv_cache_dtype"] == {"source": "user", "via": "cli"}


def test_a_concrete_typed_value_is_kept():
    config = _resolve({"load_balance_method": "total_requests"})
    assert config.values["load_balance_method"] == "total_requests"
    assert config.provenance["load_balance_method"]["source"] == "user"
