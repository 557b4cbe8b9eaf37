"""The model-facts chain: a hub id is read from the Hugging Face cache, the hub (config files only)
or a built-in card, the same files give the same facts from any source, and every answer says
where it came from.

No test uses the network: the cache is a folder the test writes, the hub a local stand-in reached
through HF_ENDPOINT (tests/hub_stand_in.py), in a subprocess so huggingface_hub reads the endpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accord.resolver.api import ConflictError, resolve
from accord.resolver.errors import UsageError
from accord.resolver.facts.machine import load_facts
from accord.resolver.facts.model import facts_of, model_facts, model_note
from accord.resolver.facts.model_sources import CARDS_DIR, cached_file, card_systems, find_model, model_card
from tests.hub_stand_in import COMMIT, StandInHub

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "differential" / "fixtures" / "models"
LLAMA = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
         "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def write_snapshot(cache: Path, repo: str, files: dict, commit: str = COMMIT, ref: str | None = "main") -> Path:
    """A repo in the Hugging Face cache layout: snapshots/<commit>/FILES and refs/<ref> -> commit."""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / commit
    for name, content in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).write_text(json.dumps(content) if not isinstance(content, str) else content)
    if ref is not None:
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / ref).write_text(commit)
    return snapshot


# --- the Hugging Face cache ----------------------------------------------------------------------

@pytest.mark.parametrize("variable, cache_of", [
    ("HF_HUB_CACHE", lambda root: root),
    ("HF_HOME", lambda root: root / "hub"),
])
def test_a_hub_id_in_the_hugging_face_cache_is_read_from_there(tmp_path, monkeypatch, variable, cache_of):
    monkeypatch.setenv(variable, str(tmp_path))
    write_snapshot(cache_of(tmp_path), "acme/llama-like", {"config.json": LLAMA})
    source = find_model("acme/llama-like", "llm").source
    assert (source.kind, source.repo, source.revision) == ("hf-cache", "acme/llama-like", COMMIT)
    assert model_facts("acme/llama-like")["model.num_layers"] == 32
    assert COMMIT in source.describe() and "Hugging Face cache" in source.describe()


def test_the_default_cache_is_under_the_home_folder(tmp_path, monkeypatch):
    for variable in ("HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    write_snapshot(tmp_path / ".cache" / "huggingface" / "hub", "acme/home-model", {"config.json": LLAMA})
    assert find_model("acme/home-model", "llm").source.kind == "hf-cache"


def test_revision_picks_a_branch_or_a_commit_of_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    old, new = "1" * 40, "2" * 40
    write_snapshot(tmp_path, "acme/two-revisions", {"config.json": {**LLAMA, "num_hidden_layers": 16}}, old, ref="v1")
    write_snapshot(tmp_path, "acme/two-revisions", {"config.json": LLAMA}, new, ref="main")
    assert model_facts("acme/two-revisions")["model.num_layers"] == 32
    assert model_facts("acme/two-revisions", revision="v1")["model.num_layers"] == 16
    assert model_facts("acme/two-revisions", revision=old)["model.num_layers"] == 16
    assert model_facts("acme/two-revisions", revision="v9") == {}
    assert "v9" not in (find_model("acme/two-revisions", "llm", "main").source.revision or "")


def test_the_revision_flag_reaches_the_chain(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    write_snapshot(tmp_path, "acme/pinned", {"config.json": {**LLAMA, "num_attention_heads": 12,
                                                             "num_key_value_heads": 12}}, "3" * 40, ref="v2")
    result = _accord("resolve", "--facts", "h100", "--model-path", "acme/pinned", "--revision", "v2",
                     "--tp-size", "8", "--json")
    assert result.returncode == 3 and "par.tp.divides_attention_heads" in result.stdout


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refs=st.dictionaries(st.sampled_from(["main", "v1", "dev"]), st.sampled_from(["a" * 40, "b" * 40]), max_size=3),
       snapshots=st.sets(st.sampled_from(["a" * 40, "b" * 40]), max_size=2),
       revision=st.sampled_from([None, "main", "v1", "dev", "a" * 40, "b" * 40, "c" * 40]))
def test_reading_the_cache_agrees_with_huggingface_hub(tmp_path_factory, refs, snapshots, revision):
    """The cache is read without huggingface_hub (it costs a fifth of a second to import); what the
    reader finds must be what the library itself finds, for every layout and revision."""
    from huggingface_hub import try_to_load_from_cache

    cache = tmp_path_factory.mktemp("cache")
    for commit in snapshots:
        write_snapshot(cache, "acme/m", {"config.json": LLAMA}, commit, ref=None)
    for ref, commit in refs.items():
        (cache / "models--acme--m" / "refs").mkdir(parents=True, exist_ok=True)
        (cache / "models--acme--m" / "refs" / ref).write_text(commit)
    theirs = try_to_load_from_cache("acme/m", "config.json", cache_dir=cache, revision=revision)
    os.environ["HF_HUB_CACHE"] = str(cache)
    try:
        ours = cached_file("acme/m", revision, "config.json")
    finally:
        del os.environ["HF_HUB_CACHE"]
    assert (str(ours[0]) if ours else None) == (theirs if isinstance(theirs, str) else None)


# --- the hub, through a local stand-in -----------------------------------------------------------

def _accord(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accord.resolver.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})


def _hub_env(hub: StandInHub, home: Path, offline: str = "0") -> dict:
    return {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": offline, "HF_HOME": str(home)}


QUANTIZED_REPO = {
    "config.json": json.dumps(LLAMA).encode(),
    "generation_config.json": b'{"temperature": 0.6}',
    "hf_quant_config.json": json.dumps({"producer": {"name": "modelopt"},
                                        "quantization": {"quant_algo": "NVFP4", "group_size": 16}}).encode(),
    "model-00001-of-00002.safetensors": b"\0" * 4096,
    "model-00002-of-00002.safetensors": b"\0" * 4096,
    "tokenizer.json": b"{}",
    "original/consolidated.00.pth": b"\0" * 64,
}


def test_the_hub_gives_only_the_small_config_files_and_the_cache_keeps_them(tmp_path):
    with StandInHub({"acme/fp4-model": QUANTIZED_REPO}) as hub:
        result = _accord("resolve", "--facts", "b200", "--model-path", "acme/fp4-model", "--json",
                         env=_hub_env(hub, tmp_path))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert sorted(hub.fetched()) == ["config.json", "generation_config.json", "hf_quant_config.json"]
    assert out["facts"]["model.quant_method"] == "modelopt_fp4"
    assert out["values"]["quantization"] == "modelopt_fp4"
    assert out["model_source"]["kind"] == "hub" and out["model_source"]["revision"] == COMMIT
    # Offline now, the next run finds the same files in the cache: same facts, same verdict.
    again = _accord("resolve", "--facts", "b200", "--model-path", "acme/fp4-model", "--json",
                    env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    cached = json.loads(again.stdout)
    assert cached["model_source"]["kind"] == "hf-cache"
    assert (cached["facts"], cached["hash"]) == (out["facts"], out["hash"])


def test_offline_mode_sends_no_request_at_all(tmp_path):
    with StandInHub({"acme/fp4-model": QUANTIZED_REPO}) as hub:
        result = _accord("resolve", "--facts", "h100", "--model-path", "acme/fp4-model",
                         env=_hub_env(hub, tmp_path, offline="1"))
    assert result.returncode == 0 and hub.requests == []
    assert "HF_HUB_OFFLINE" in result.stderr and "not checked" in result.stderr


@pytest.mark.parametrize("gated, words", [(True, "is gated"), (False, "was not found on the hub")])
def test_a_gated_or_missing_repo_is_one_paragraph_naming_it_and_how_to_log_in(tmp_path, gated, words):
    repos = {"acme/locked": QUANTIZED_REPO} if gated else {}
    with StandInHub(repos, gated=("acme/locked",) if gated else ()) as hub:
        result = _accord("resolve", "--facts", "h100", "--model-path", "acme/locked", env=_hub_env(hub, tmp_path))
    assert result.returncode == 2
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in result.stderr
    assert "acme/locked" in message and words in message and "hf auth login" in message and "HF_TOKEN" in message


def test_an_unreachable_hub_falls_back_to_the_cards_with_a_note(tmp_path):
    import socket

    with socket.socket() as closed:  # a port nothing listens on: connection refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path)}
    card = _accord("resolve", "--facts", "h100", "--model-path", "deepseek-ai/DeepSeek-V3", "--json", env=env)
    assert json.loads(card.stdout)["model_source"]["kind"] == "card"  # a conflict's JSON names it too
    unknown = _accord("resolve", "--facts", "h100", "--model-path", "acme/nowhere", env=env)
    assert unknown.returncode == 0 and "could not be reached" in unknown.stderr


# --- built-in cards ------------------------------------------------------------------------------

CARDS = sorted(CARDS_DIR.glob("*.json"))


def test_there_are_cards_for_at_least_sixty_models():
    assert len(CARDS) >= 60 and len(card_systems()) == len(CARDS)


@pytest.mark.parametrize("path", CARDS, ids=[p.stem for p in CARDS])
def test_a_card_is_the_repositorys_own_files_with_their_source(path):
    card = json.loads(path.read_text(encoding="utf-8"))
    assert path.stem == card["repo"].replace("/", "--")
    assert card["system"] in ("llm", "diffusion")
    assert {"llm": "config.json", "diffusion": "model_index.json"}[card["system"]] in card["files"]
    assert set(card["sources"]) == set(card["files"]) and all(isinstance(f, dict) for f in card["files"].values())
    assert card["revision"] is None or len(card["revision"]) == 40


@pytest.mark.parametrize("path", [p for p in CARDS if json.loads(p.read_text())["system"] == "llm"],
                         ids=lambda p: p.stem)
def test_a_card_and_the_same_files_in_a_folder_give_the_same_facts_and_verdicts(tmp_path, path):
    card = json.loads(path.read_text(encoding="utf-8"))
    folder = tmp_path / path.stem
    for name, content in card["files"].items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(content))
    from_card, from_folder = model_facts(card["repo"]), model_facts(str(folder))
    # model.id names the hub id: a card knows it, a plain folder only when its config records it.
    assert {k: v for k, v in from_card.items() if k != "model.id"} == \
           {k: v for k, v in from_folder.items() if k != "model.id"}
    for tp in (1, 8):
        verdicts = []
        for model in (card["repo"], str(folder)):
            try:
                config = resolve("llm", {"model_path": model, "tp_size": tp}, load_facts("h100", model_path=model))
                verdicts.append(("ok", {k: v for k, v in config.values.items() if k != "model_path"}))
            except ConflictError as err:
                verdicts.append(("conflict", [c.rules for c in err.conflicts]))
        assert verdicts[0] == verdicts[1]


def test_a_card_lookup_ignores_case_like_the_hub():
    assert model_card("DEEPSEEK-AI/deepseek-v3", "llm").repo == "deepseek-ai/DeepSeek-V3"


def test_deepseek_v3_by_hub_id_offline_is_refused_as_its_folder_is():
    """The issue's acceptance check: the weights of DeepSeek-V3 do not fit 8 H100s at tp 8."""
    verdicts = {}
    for model in ("deepseek-ai/DeepSeek-V3", str(FIXTURES / "deepseek-ai" / "DeepSeek-V3")):
        with pytest.raises(ConflictError) as err:
            resolve("llm", {"model_path": model, "tp_size": 8}, load_facts("h100", model_path=model))
        verdicts[model] = [c.rules for c in err.value.conflicts]
    assert len(set(map(str, verdicts.values()))) == 1
    assert any("mem.weights.fit_gpu" in rules for rules in next(iter(verdicts.values())))


def test_the_report_says_which_source_answered():
    result = _accord("resolve", "--facts", "h100", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp-size", "8")
    assert result.returncode == 3
    assert "model: deepseek-ai/DeepSeek-V3 from Accord's built-in model card" in " ".join(result.stderr.split())


def test_tune_takes_a_hub_id_from_the_cards():
    result = _accord("tune", "--facts", "h100", "--model-path", "deepseek-ai/DeepSeek-V3", "--json")
    assert result.returncode in (0, 3), result.stderr
    assert "needs the model's config.json" not in result.stderr


# --- quantization read as upstream reads it ------------------------------------------------------

def _folder_with(tmp_path: Path, files: dict) -> str:
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    return str(tmp_path)


@pytest.mark.parametrize("files, method", [
    # upstream _parse_modelopt_quant_config (configs/model_config.py:1838): quant_algo decides
    ({"hf_quant_config.json": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}}}, "modelopt_fp4"),
    ({"hf_quant_config.json": {"quantization": {"quant_algo": "FP8"}}}, "modelopt_fp8"),
    ({"hf_quant_config.json": {"quantization": {"quant_algo": "MIXED_PRECISION",
                                                "quantized_layers": {"a": {"quant_algo": "NVFP4"}}}}}, "modelopt_mixed"),
    ({"hf_quant_config.json": {"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {}}}}, "w4afp8"),
    # a quantization_config without quant_method, or with "modelopt", is a ModelOpt export
    ({"config.json": {**LLAMA, "quantization_config": {"quant_algo": "FP8"}}}, "modelopt_fp8"),
    ({"config.json": {**LLAMA, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}},
     "modelopt_fp4"),
    ({"config.json": {**LLAMA, "quantization_config": {"quant_method": "compressed-tensors"}}}, "compressed-tensors"),
    ({"config.json": {**LLAMA, "compression_config": {"quant_method": "compressed-tensors"}}}, "compressed-tensors"),
    ({"quant_model_description.json": {"model_quant_type": "W8A8"}}, "modelslim"),
    ({"quantize_config.json": {"bits": 4, "group_size": 128, "desc_act": False}}, "gptq"),
    ({"quant_config.json": {"w_bit": 4, "q_group_size": 128, "zero_point": True}}, "awq"),
    ({}, None),
])
def test_the_checkpoints_quantization_is_read_from_the_files_upstream_reads(tmp_path, files, method):
    path = _folder_with(tmp_path, {"config.json": LLAMA, **files})
    assert model_facts(path)["model.quant_method"] == method


def test_w8a8_fp8_quantizes_an_unquantized_checkpoint_while_loading(tmp_path):
    """Upstream 0.5.23: W8A8Fp8Config has no config file, so an unquantized checkpoint gets the
    default config, is_checkpoint_fp8_serialized=False (w8a8_fp8.py:58, weight_utils.py:344-372)."""
    path = _folder_with(tmp_path, {"config.json": LLAMA})
    config = resolve("llm", {"model_path": path, "quantization": "w8a8_fp8"}, load_facts("h100", model_path=path))
    assert config.values["quantization"] == "w8a8_fp8"
    with pytest.raises(ConflictError):  # a method that needs a quantized checkpoint is still refused
        resolve("llm", {"model_path": path, "quantization": "gptq"}, load_facts("h100", model_path=path))


def test_a_folder_source_reads_its_files_on_demand_and_a_card_from_memory():
    folder = find_model(str(FIXTURES / "Qwen" / "Qwen3-8B"), "llm").source
    card = model_card("deepseek-ai/DeepSeek-V3", "llm")
    assert folder.read("config.json")["num_hidden_layers"] == 36 and folder.read("hf_quant_config.json") is None
    assert facts_of(card, "llm")["model.attention"] == "mla"


def test_a_hub_id_of_the_other_system_says_which_system_to_give(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    write_snapshot(tmp_path, "acme/pipeline", {"model_index.json": {"_class_name": "FluxPipeline"}})
    with pytest.raises(UsageError, match="--system diffusion"):
        model_note("acme/pipeline", "llm")


@pytest.mark.parametrize("env", [
    {"HF_HUB_CACHE": "/tmp/a"}, {"HUGGINGFACE_HUB_CACHE": "/tmp/b"}, {"HF_HOME": "/tmp/c"},
    {"XDG_CACHE_HOME": "/tmp/d"}, {"HF_HOME": "/tmp/c", "HF_HUB_CACHE": "/tmp/a"}, {},
    {"HF_HUB_OFFLINE": "true"}, {"HF_HUB_OFFLINE": "0"}, {"HF_HUB_OFFLINE": "ON"},
])
def test_the_cache_folder_and_offline_switch_are_read_as_huggingface_hub_reads_them(env):
    """Read without importing the library (it costs a fifth of a second); held to its constants."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_HUB_OFFLINE")}
    script = ("import json, huggingface_hub.constants as c; "
              "from accord.resolver.facts.model_sources import hub_cache_dir, hub_offline; "
              "print(json.dumps([str(hub_cache_dir()), c.HF_HUB_CACHE, hub_offline(), c.HF_HUB_OFFLINE]))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**clean, **env}, check=True).stdout
    ours_dir, theirs_dir, ours_offline, theirs_offline = json.loads(out)
    assert (ours_dir, ours_offline) == (theirs_dir, theirs_offline)
