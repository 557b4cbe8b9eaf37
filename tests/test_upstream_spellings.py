"""Unknown flags from current upstream launch commands get a pointer, not a look-alike guess.

The table (rules/<system>/upstream_spellings.yaml) lists spellings of upstream SGLang 0.5.23's own
argument parser that the seed spells differently or lacks; these tests protect what a user who
pastes such a command is told, and that the table only names what it claims to.
"""

from __future__ import annotations

import pytest
import yaml

from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR, SYSTEMS, load_catalog


def _error(argv: list[str]) -> str:
    with pytest.raises(UsageError) as raised:
        parse_flags(argv, system="llm")
    return str(raised.value)


def test_attention_dp_in_upstream_spelling_points_to_the_seed_spelling_not_a_look_alike():
    # Upstream: --attn-dp-size N replaces --dp-size N --enable-dp-attention (server_args.py).
    for spelling in ("--attn-dp-size", "--attention-data-parallel-size"):
        message = _error([spelling, "2"])
        assert "--dp-size N --enable-dp-attention" in message
        assert "--attn-cp-size" not in message  # context parallelism: a different feature


def test_an_upstream_alias_of_a_seed_flag_names_the_seed_flag():
    assert "--enable-hierarchical-cache" in _error(["--enable-hicache"])


def test_an_upstream_feature_the_seed_lacks_is_called_that_and_refused():
    message = _error(["--enable-kv-cache-sharding"])
    assert "does not have" in message and "did you mean" not in message


def test_a_negated_upstream_switch_names_the_seed_switch_and_its_default():
    message = _error(["--no-enable-tf32-matmul"])
    assert "--enable-tf32-matmul" in message and "off unless typed" in message


def test_a_misspelling_still_gets_a_did_you_mean():
    assert "did you mean --tp-size" in _error(["--tp-sise", "2"])


def test_a_config_file_key_in_upstream_spelling_gets_the_same_pointer(tmp_path):
    path = tmp_path / "launch.yaml"
    path.write_text("attn_dp_size: 2\n", encoding="utf-8")
    message = _error(["--config", str(path)])
    assert "line 1" in message and "--dp-size N --enable-dp-attention" in message


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_table_names_only_spellings_the_catalog_lacks_and_points_only_at_real_flags(system):
    path = RULES_DIR / system / "upstream_spellings.yaml"
    if not path.exists():
        pytest.skip(f"no upstream spelling table for {system}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    spellings = {s for flag in load_catalog(system) for s in flag.flags}
    listed = [s for e in data.get("spelled_differently") or () for s in e["flags"]] + list(data.get("not_in_seed") or ())
    assert len(listed) == len(set(listed))
    assert not set(listed) & spellings, "a listed spelling the catalog has would never be looked up"
    for entry in data.get("spelled_differently") or ():
        named = [word for word in entry["seed"].split() if word.startswith("--")]
        assert named and set(named) <= spellings, entry
