"""accord.resolver.api.resolve: what a resolve call promises beyond the rules themselves.

A choice the catalog marks as `auto_choice` means "let the rules decide": typing it pins nothing,
so the result is what the unset flag gives, and the provenance still says it was typed. Expected
values from upstream: serving_hook.py:handle_load_balance_method resolves `auto` (typed or the
default) to round_robin outside PD prefill and to follow_bootstrap_room on prefill servers
(oracle cases r13-0013, r29-0057).
"""

import pytest

from accord.resolver import api
from accord.resolver.api import resolve
from accord.resolver.facts.machine import load_facts


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


# --relax answers a conflict about a value upstream rewrites with upstream's value, reported. Oracle:
# upstream keeps trtllm_mha on B200 and rewrites --page-size 1 to 64 (r13-0395); under DP attention it
# runs 0.3 x the typed conservativeness (r29-0299: 0.5 -> 0.15).

MODELS = "tests/differential/fixtures/models"


def _relaxed(preset, values, model):
    import pathlib
    path = str(pathlib.Path(__file__).resolve().parents[1] / MODELS / model)
    values = {"model_path": path, **values}
    facts = load_facts(preset, (), model_path=path, system="llm")
    return resolve("llm", values, facts, {name: "cli" for name in values}, relax=True)


def test_relax_gives_upstreams_page_size_and_keeps_its_default_kernel():
    config = _relaxed("b200", {"page_size": 1, "tp_size": 8}, "Qwen/Qwen3-8B")
    assert config.values["attention_backend"] == "trtllm_mha" and config.values["page_size"] == 64
    assert config.provenance["page_size"] == {"source": "relax", "rule": "kv.page_size.default_backend", "was": 1}


def test_relax_gives_upstreams_scaled_conservativeness_under_dp_attention():
    config = _relaxed("b200", {"tp_size": 4, "dp_size": 4, "enable_dp_attention": True,
                               "schedule_conservativeness": 0.5}, "Qwen/Qwen3-8B")
    assert config.values["schedule_conservativeness"] == pytest.approx(0.15)


def test_a_fix_command_keeps_a_typed_auto_choice():
    """`--moe-runner-backend auto` pins nothing, so the solver never sees it; the command each fix
    prints is still the launch as typed, with only the fix applied."""
    from accord.resolver.facts.machine import load_preset

    typed = {"moe_runner_backend": "auto", "enable_scattered_sconv": True}
    with pytest.raises(api.ConflictError) as err:
        api.resolve("llm", typed, load_preset("h100"))
    details = [d for c in err.value.to_dict()["conflicts"] for d in c["fix_details"]]
    assert details
    for detail in details:
        assert detail["command"][:2] == ["--moe-runner-backend", "auto"], detail
