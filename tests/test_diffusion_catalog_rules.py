"""Diffusion seed rules that the flag catalog encodes by itself (rules/diffusion/coverage.yaml `in_catalog`).

An alias, a choice list or a type is enforced by the parser built from rules/diffusion/flags.yaml,
so no rule names these seed ids; each one is checked here on a command line instead, and the
coverage file may only claim a seed id that has a check below.
"""

from __future__ import annotations

import pytest
import yaml

from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR, load_catalog
from accord.resolver.language.ruleset import load_rules

COVERAGE = yaml.safe_load((RULES_DIR / "diffusion" / "coverage.yaml").read_text(encoding="utf-8"))
IN_CATALOG = {entry["seed"]: entry["flag"] for entry in COVERAGE["in_catalog"]}
NOT_ENCODED = {entry["seed"] for entry in COVERAGE["not_encoded"]}


def _values(*argv: str) -> dict:
    return parse_flags(["--system", "diffusion", *argv])[1].user


# seed id -> (command lines the catalog accepts, with the values they store; values it rejects)
ACCEPTED = {
    "d.par.dp.alias": [(["--data-parallel-size", "1"], {"dp_size": 1}), (["--dp-size", "1"], {"dp_size": 1}),
                       (["--dp", "1"], {"dp_size": 1})],
    "d.attn.fa_alias": [(["--attention-backend", name], {"attention_backend": "fa"}) for name in ("fa", "fa3", "fa4")],
    "d.par.cfg_size.alias": [(["--cfg-parallel-size", "2"], {"cfg_parallel_degree": 2})],
    "d.par.mode.alias": [(["--mode", "speed"], {"performance_mode": "speed"}),
                         (["--performance-mode", "memory"], {"performance_mode": "memory"})],
    "d.off.layerwise.alias": [(["--layerwise-offload-modules", "dit", "vae"],
                               {"layerwise_offload_components": ["dit", "vae"]})],
    "d.off.ltx2.valid": [(["--ltx2-two-stage-device-mode", "original"], {"ltx2_two_stage_device_mode": "original"}),
                         (["--ltx2-two-stage-device-mode", "resident"], {"ltx2_two_stage_device_mode": "resident"})],
    "d.warm.mode_valid": [(["--warmup-mode", mode], {"warmup_mode": mode}) for mode in ("off", "request", "server")],
    "d.cfg.backend": [(["--backend", b], {"backend": b}) for b in ("auto", "sglang", "diffusers")],
    "d.cfg.batching.mode": [(["--batching-mode", "dynamic"], {"batching_mode": "dynamic"})],
    "d.obs.log_requests_level": [(["--log-requests-level", str(n)], {"log_requests_level": n}) for n in range(4)],
    "d.srt_encoder.timeout_type": [(["--srt-encoder-connection-timeout", "3.05"],
                                    {"srt_encoder_connection_timeout": 3.05}),
                                   (["--srt-encoder-connection-timeout", "5"], {"srt_encoder_connection_timeout": 5.0})],
}
REJECTED = {
    "d.off.ltx2.valid": ["--ltx2-two-stage-device-mode", "hybrid"],
    "d.warm.mode_valid": ["--warmup-mode", "always"],
    "d.cfg.backend": ["--backend", "torch"],
    "d.cfg.batching.mode": ["--batching-mode", "static"],
    "d.obs.log_requests_level": ["--log-requests-level", "4"],
    "d.srt_encoder.timeout_type": ["--srt-encoder-connection-timeout", "soon"],
}


def test_every_in_catalog_claim_has_a_command_line_check_of_the_flag_it_names():
    assert sorted(IN_CATALOG) == sorted(ACCEPTED)
    assert set(REJECTED) <= set(ACCEPTED)
    for seed, cases in ACCEPTED.items():
        assert all(set(stored) == {IN_CATALOG[seed]} for _, stored in cases), seed


def test_in_catalog_claims_name_a_catalog_flag_and_no_rule_or_reason_claims_them_too():
    catalog = load_catalog("diffusion")
    by_rules = {seed for rule in load_rules("diffusion") for seed in rule.seed}
    for seed, flag in IN_CATALOG.items():
        assert flag in catalog.flags, seed
        assert seed not in by_rules and seed not in NOT_ENCODED, seed


@pytest.mark.parametrize("seed, argv, stored", [(seed, argv, stored) for seed, cases in ACCEPTED.items()
                                                for argv, stored in cases])
def test_catalog_spellings_and_choices_store_the_seed_value(seed, argv, stored):
    values = _values(*argv)
    assert values == stored, seed
    assert all(type(values[name]) is type(value) for name, value in stored.items()), seed


@pytest.mark.parametrize("seed, argv", sorted(REJECTED.items()))
def test_catalog_rejects_a_value_outside_the_seed_domain(seed, argv):
    with pytest.raises(UsageError) as err:
        _values(*argv)
    assert err.value.exit_code == 2 and argv[0] in str(err.value), seed

