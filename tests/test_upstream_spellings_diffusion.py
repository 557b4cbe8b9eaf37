"""Diffusion launch flags of current upstream SGLang that the seed spells differently or lacks.

rules/diffusion/upstream_spellings.yaml lists spellings of upstream 0.5.23's diffusion parser
(`sglang serve` with a diffusion model) that seed 004's catalog does not have. Without it, the
unknown-flag error guesses a look-alike catalog flag, which is a different feature in every case
below (the guess each spelling got before is named in the test). These tests protect what a user
who pastes an upstream diffusion command is told.
"""

from __future__ import annotations

import pytest
import yaml

from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR, load_catalog

TABLE = yaml.safe_load((RULES_DIR / "diffusion" / "upstream_spellings.yaml").read_text(encoding="utf-8"))
SPELLINGS = {s for flag in load_catalog("diffusion") for s in flag.flags}


def _error(argv: list[str]) -> str:
    with pytest.raises(UsageError) as raised:
        parse_flags(["--model-path", "Qwen/Qwen-Image", *argv], system="diffusion")
    return str(raised.value)


@pytest.mark.parametrize(("argv", "seed_flags", "look_alike"), [
    # upstream picks offloaded components by name; the seed has one switch per component
    (["--cpu-offload-components", "dit"], ["--dit-cpu-offload", "--vae-cpu-offload"], "--layerwise-offload-components"),
    # a K/V all-gather SP split; the seed's SP is Ulysses x Ring
    (["--kv-gather-degree", "2"], ["--ulysses-degree", "--ring-degree"], None),
    # the denoiser role's SP of a disaggregated pipeline is the monolithic server's --sp-degree
    (["--denoiser-sp", "4"], ["--sp-degree"], None),
    (["--regional-compile"], ["--enable-torch-compile"], None),
    (["--layerwise-prefetch-size", "dit=2"], ["--dit-offload-prefetch-size"], None),
])
def test_an_upstream_spelling_of_a_seed_feature_names_the_seed_flags(argv, seed_flags, look_alike):
    message = _error(argv)
    assert all(flag in message for flag in seed_flags), message
    assert "did you mean" not in message
    if look_alike:
        assert look_alike not in message


@pytest.mark.parametrize(("spelling", "look_alike"), [
    ("--enable-metrics", "--enable-trace"),                 # Prometheus metrics, not tracing
    ("--scheduler-rpc-timeout", "--scheduler-port"),
    ("--lora-alpha", "--lora-path"),
    ("--served-model-name", None),
])
def test_an_upstream_feature_the_seed_lacks_is_called_that_not_a_look_alike(spelling, look_alike):
    message = _error([spelling, "1"])
    assert "does not have" in message and "did you mean" not in message
    if look_alike:
        assert look_alike not in message


@pytest.mark.parametrize(("argv", "says", "look_alike"), [
    (["--nnodes", "2"], "one node", None),
    (["--disagg-timeout", "60"], "disaggregated", "--dist-timeout"),
    (["--quantization-rank", "32"], "Nunchaku", None),
    (["--resolution", "720"], "pipeline configs", "--warmup-resolutions"),
    (["--vae-config.use-tiling", "true"], "pipeline configs", None),
    (["--vae-path", "/models/vae"], "--<component>-path", "--lora-path"),
])
def test_an_option_outside_the_seed_text_says_where_it_comes_from(argv, says, look_alike):
    message = _error(argv)
    assert says in message and "Remove it" in message and "did you mean" not in message
    if look_alike:
        assert look_alike not in message


def test_a_dotted_component_attention_backend_points_to_the_map_spelling():
    # seed L2045-2080: upstream reads --component-attention-backends.<component> from unknown args
    message = _error(["--component-attention-backends.transformer", "fa"])
    assert "--component-attention-backends COMPONENT=BACKEND" in message


def test_a_config_file_key_in_upstream_spelling_gets_the_same_pointer(tmp_path):
    path = tmp_path / "launch.yaml"
    path.write_text("model_path: Qwen/Qwen-Image\ncpu_offload_components: dit\n", encoding="utf-8")
    with pytest.raises(UsageError) as raised:
        parse_flags(["--config", str(path)], system="diffusion")
    assert "line 2" in str(raised.value) and "--dit-cpu-offload" in str(raised.value)


def test_a_misspelling_still_gets_a_did_you_mean():
    assert "did you mean --ulysses-degree" in _error(["--ulyses-degree", "2"])


def test_flags_upstream_retired_but_the_seed_keeps_still_parse():
    # 0.5.23 dropped --warmup and --server-warmup; the seed keeps both (seed L1566-1597)
    _, parsed = parse_flags(["--model-path", "Qwen/Qwen-Image", "--warmup", "--server-warmup"], system="diffusion")
    assert parsed.user["warmup"] is True and parsed.user["server_warmup"] is True


def test_the_table_lists_each_spelling_once_and_only_spellings_the_catalog_lacks():
    listed = [s for e in TABLE["spelled_differently"] for s in e["flags"]] + list(TABLE["not_in_seed"]) \
        + [s for e in TABLE["not_accepted"] for s in e["flags"]]
    assert len(listed) == len(set(listed))
    assert all(s.startswith("--") for s in listed)
    assert not set(listed) & SPELLINGS
    prefixes = [s[:-1] for s in listed if s.endswith(".*")]
    assert not [s for s in SPELLINGS for p in prefixes if s.startswith(p)], "a prefix would shadow nothing"
    for entry in TABLE["spelled_differently"]:
        named = [word for word in entry["seed"].split() if word.startswith("--")]
        assert named and set(named) <= SPELLINGS, entry
    assert all(entry["why"].strip() for entry in TABLE["not_accepted"])
