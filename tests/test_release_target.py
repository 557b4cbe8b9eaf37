"""Commands for an older SGLang release: refused where that release's parser would refuse them,
launched in its words, rewritten by `accord upgrade`.

Expected values come from each release's own parser inventory (rules/llm/releases/, dumped from
the release's wheel), never from Accord's rules: an emitted command must parse with a parser built
from the inventory of the release it is for.
"""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from accord.resolver.cli import main
from accord.resolver.commandline.release_words import takes_values
from accord.resolver.commandline.releases import release_catalog
from accord.resolver.facts import probe as probing

OLDER = ["0.4.10.post2", "0.5.2", "0.5.9"]
COMMANDS = {
    "deepseek-dp-attention": ["--facts", "h200", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8",
                              "--dp", "8", "--enable-dp-attention"],
    "qwen3-defaults": ["--facts", "h100", "--model-path", "Qwen/Qwen3-8B"],
    "llama-tp2-fp8kv": ["--facts", "h100", "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2",
                        "--kv-cache-dtype", "fp8_e4m3"],
    "qwen-moe-ep": ["--facts", "h100", "--model-path", "Qwen/Qwen3-30B-A3B", "--tp", "4", "--ep", "4"],
}


def release_parser(release: str) -> argparse.ArgumentParser:
    """A parser shaped like `release`'s own: its options, what each takes, its choices (argparse's
    prefix matching on, as upstream's `prepare_server_args` leaves it)."""
    parser = argparse.ArgumentParser(prog=f"sglang {release}", exit_on_error=False, add_help=False)
    for action in release_catalog("llm").inventory(release):
        count = takes_values(action)
        choices = None if action.get("choices") is None else [str(c) for c in action["choices"]]
        if count == "0":
            parser.add_argument(*action["options"], dest=action["dest"], action="store_true")
        elif count == "1":
            parser.add_argument(*action["options"], dest=action["dest"], choices=choices)
        else:
            nargs = int(count) if count.isdigit() else count
            parser.add_argument(*action["options"], dest=action["dest"], nargs=nargs, choices=choices)
    return parser


def dry_run(capsys, argv: list[str]) -> tuple[int, dict | str]:
    code = main(["launch", "--dry-run", "--json", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


@pytest.mark.parametrize("release", OLDER)
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_launch_for_an_older_release_parses_with_that_releases_parser(capsys, release, name):
    code, launch = dry_run(capsys, [*COMMANDS[name], "--fact", f"packages.sglang={release}"])
    assert code == 0, launch
    assert launch["sglang_release"] == release
    parser = release_parser(release)
    launcher = 3  # python3 -m sglang.launch_server
    parser.parse_args(launch["command"][launcher:])  # raises on a word the release does not take


def test_launch_without_a_release_is_the_rules_own_release(capsys):
    code, launch = dry_run(capsys, COMMANDS["qwen3-defaults"])
    assert code == 0 and "sglang_release" not in launch


def test_older_release_says_attention_dp_as_it_did(capsys):
    """0.5.23 writes attention DP as --attn-dp-size; a release without that option gets the
    --dp-size / --enable-dp-attention pair its own parser has."""
    release = "0.5.2"
    assert release_catalog("llm").action(release, "--attn-dp-size") is None
    code, launch = dry_run(capsys, [*COMMANDS["deepseek-dp-attention"], "--fact", f"packages.sglang={release}"])
    words = launch["command"]
    assert "--enable-dp-attention" in words and words[words.index("--dp-size") + 1] == "8"
    assert "--attn-dp-size" not in words


def test_a_value_the_release_cannot_say_is_named_in_a_warning(capsys):
    release = "0.4.10.post2"
    catalog = release_catalog("llm")
    assert catalog.action(release, "--cuda-graph-backend-decode") is None
    code, launch = dry_run(capsys, [*COMMANDS["qwen3-defaults"], "--fact", f"packages.sglang={release}"])
    lost = [w for w in launch["warnings"] if f"SGLang {release} has no option for" in w]
    assert lost and "--cuda-graph-backend-decode" in lost[0]


def test_typed_flag_the_release_lacks_is_refused_naming_both_releases(capsys):
    release = "0.5.2"
    catalog = release_catalog("llm")
    first, _ = catalog.span("--enable-deterministic-inference")
    assert catalog.compare(first, release) > 0
    code = main(["resolve", *COMMANDS["qwen3-defaults"], "--enable-deterministic-inference",
                 "--fact", f"packages.sglang={release}"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"SGLang {release}" in err and first in err and "--enable-deterministic-inference" in err


def test_typed_value_the_release_lacks_is_refused(capsys):
    release = "0.5.2"
    catalog = release_catalog("llm")
    assert "fa4" not in catalog.action(release, "--attention-backend")["choices"]
    code = main(["why", "attention_backend", *COMMANDS["qwen3-defaults"], "--attention-backend", "fa4",
                 "--fact", f"packages.sglang={release}"])
    err = capsys.readouterr().err
    assert code == 2 and "fa4" in err and f"SGLang {release}" in err


def test_a_config_file_entry_the_release_lacks_is_refused_naming_the_file(capsys, tmp_path):
    """Upstream's config merger hands a config file's entries to the same parser as typed flags, so a
    key the release lacks fails there as a typed flag would."""
    release = "0.5.2"
    first, _ = release_catalog("llm").span("--enable-deterministic-inference")
    config = tmp_path / "launch.yaml"
    config.write_text("tp-size: 2\nenable-deterministic-inference: true\n")
    code = main(["resolve", *COMMANDS["qwen3-defaults"], "--config", str(config),
                 "--fact", f"packages.sglang={release}"])
    err = capsys.readouterr().err
    assert code == 2
    assert str(config) in err and "--enable-deterministic-inference" in err and first in err


def test_a_config_file_the_release_parses_is_accepted(capsys, tmp_path):
    config = tmp_path / "launch.yaml"
    config.write_text("tp_size: 2\ntrust-remote-code: true\nenable-dp-attention: false\n")
    code = main(["resolve", *COMMANDS["qwen3-defaults"], "--config", str(config), "--fact", "packages.sglang=0.5.9"])
    assert code == 0, capsys.readouterr().err


def test_a_saved_values_file_is_read_by_dest_and_its_nulls_leave_flags_unset(capsys, tmp_path):
    """`accord resolve --json` values are keyed by dest (`ep_join_rank_offset` is the option
    `--elastic-ep-join-rank-offset`) and hold nulls for unset flags, some of which the release lacks:
    both read as Accord reads the file, so the file feeds back."""
    config = tmp_path / "values.yaml"
    config.write_text("ep_join_rank_offset: 0\ndrain_timeout: null\ntp_size: 1\n")
    code = main(["resolve", *COMMANDS["qwen3-defaults"], "--config", str(config)])
    assert code == 0, capsys.readouterr().err


def test_an_older_releases_own_spelling_is_read_and_the_launch_parses_there(capsys):
    """A user of 0.4.10.post2 types its spellings (`--enable-deepep-moe`, retired since); Accord reads
    it as that release does and writes a command that release parses."""
    release = "0.4.10.post2"
    assert release_catalog("llm").action(release, "--enable-deepep-moe") is not None
    code, launch = dry_run(capsys, [*COMMANDS["qwen-moe-ep"], "--enable-deepep-moe", "--fact",
                                    f"packages.sglang={release}"])
    assert code == 0, launch
    assert launch["values"]["moe_a2a_backend"] == "deepep"
    assert main(["resolve", "--json", *COMMANDS["qwen-moe-ep"], "--enable-deepep-moe", "--fact",
                 f"packages.sglang={release}"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any(w.startswith(f"read --enable-deepep-moe as SGLang {release} does") for w in warnings)
    release_parser(release).parse_args(launch["command"][3:])


def test_an_older_option_the_rules_cannot_carry_is_a_usage_error(capsys):
    release = "0.4.10.post2"
    code = main(["resolve", *COMMANDS["qwen3-defaults"], "--torchao-config", "int4wo-128",
                 "--fact", f"packages.sglang={release}"])
    err = capsys.readouterr().err
    assert code == 2 and "--torchao-config" in err and release in err


def test_typed_flag_the_release_has_is_accepted(capsys):
    code = main(["resolve", *COMMANDS["qwen3-defaults"], "--fact", "packages.sglang=0.5.9", "--json"])
    assert code == 0, capsys.readouterr().err


def test_release_newer_than_the_catalog_reads_as_the_newest(capsys):
    code, launch = dry_run(capsys, [*COMMANDS["qwen3-defaults"], "--fact", "packages.sglang=0.9.0"])
    assert code == 0 and "sglang_release" not in launch


def test_release_older_than_the_catalog_is_a_usage_error(capsys):
    code = main(["resolve", *COMMANDS["qwen3-defaults"], "--fact", "packages.sglang=0.3.6"])
    assert code == 2 and "0.3.6" in capsys.readouterr().err


# --- accord upgrade -------------------------------------------------------------------------------


def upgrade(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main(["upgrade", "--json", *argv])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else {})


def test_upgrade_rewrites_retired_switches_into_what_the_new_release_parses(capsys):
    source, target = "0.4.10.post2", "0.5.23"
    words = ["--model-path", "m", "--tp-size", "8", "--enable-deepep-moe", "--cuda-graph-max-bs", "64"]
    release_parser(source).parse_args(words)
    code, result = upgrade(capsys, ["--from", source, "--to", target, *words])
    assert code == 0 and result["expressed"]
    release_parser(target).parse_args(result["command"])
    assert {c["before"] for c in result["changes"]} == {"--enable-deepep-moe", "--cuda-graph-max-bs 64"}
    assert all(c["why"] for c in result["changes"])


@pytest.mark.parametrize("tp", [None, "4"])
def test_upgrade_carries_a_switch_that_copied_another_options_value(capsys, tp):
    """0.5.2's --enable-ep-moe set ep_size to tp_size (server_args.py __post_init__): carried to a
    release without the switch it is --ep-size with the command's own tp, or the source default."""
    source, target = "0.5.2", "0.5.23"
    words = ["--model-path", "m", *(["--tp-size", tp] if tp else []), "--enable-ep-moe"]
    release_parser(source).parse_args(words)
    code, result = upgrade(capsys, ["--from", source, "--to", target, *words])
    assert code == 0 and result["expressed"]
    parsed = release_parser(target).parse_args(result["command"])
    default_tp = str(release_catalog("llm").action(source, "--tp-size")["default"])
    assert parsed.ep_size == (tp or default_tp)


def test_upgrade_lists_defaults_that_changed_under_untyped_settings(capsys):
    catalog = release_catalog("llm")
    code, result = upgrade(capsys, ["--from", "0.5.2", "--to", "0.5.23", "--model-path", "m"])
    for entry in result["defaults_changed"]:
        assert catalog.action("0.5.23", entry["option"])["default"] == entry["after"]
    assert code == 0 and result["defaults_changed"]


def test_upgrade_to_a_release_that_cannot_express_the_command_exits_3(capsys):
    code, result = upgrade(capsys, ["--to", "0.5.2", "--model-path", "m", "--attention-backend", "fa4"])
    assert code == 3 and not result["expressed"]
    assert [c["kind"] for c in result["changes"]] == ["choice-gone"]


def test_upgrade_guesses_the_source_release_and_says_so(capsys):
    code, result = upgrade(capsys, ["--to", "0.5.23", "--model-path", "m", "--enable-deepep-moe"])
    catalog = release_catalog("llm")
    assert result["from_guessed"] and catalog.action(result["from"], "--enable-deepep-moe") is not None
    later = catalog.releases[catalog.releases.index(result["from"]) + 1]
    assert catalog.action(later, "--enable-deepep-moe") is None


def test_upgrade_refuses_a_word_the_source_release_does_not_parse(capsys):
    code = main(["upgrade", "--from", "0.4.10.post2", "--to", "0.5.23", "--model-path", "m", "--attn-dp-size", "2"])
    assert code == 2 and "--attn-dp-size" in capsys.readouterr().err


# --- the probe ------------------------------------------------------------------------------------


def test_probe_reads_the_installed_sglang_release_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('the probe must not import sglang')\n")
    info = tmp_path / "sglang-0.5.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = probing._package_facts()
    assert found["packages.sglang"] == "0.5.9" and "sglang" not in sys.modules
