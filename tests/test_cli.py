"""The `accord` command line end to end: exit codes 0/2/3, one-paragraph errors, the JSON contract.

Most cases run `accord.resolver.cli.main` in-process on the toy rules (stable rule ids, fast); a few run
on the real rule set (only properties that hold whatever its rules say) and two as real processes.
"""

import json
import os
import subprocess
import sys

import pytest

from accord.resolver.cli import main
from tests.toy import B200, CPU, H100, toy_plan

TOY_FACTS = {"h100": H100, "b200": B200, "cpu": CPU}
CONFLICT_KEYS = {"flags", "rules", "facts", "message", "fixes"}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy rules and toy presets behind every command."""
    # Modules bind `plan_for` and `load_facts` when first imported: import them all before patching,
    # or the patched function becomes the "original" that monkeypatch restores after the test.
    import accord.resolver.commands.matrix  # noqa: F401
    import accord.resolver.commands.serve  # noqa: F401
    import accord.resolver.commands.why  # noqa: F401
    import accord.resolver.exploring.dryrun  # noqa: F401
    import accord.resolver.exploring.matrix_axes  # noqa: F401
    import accord.resolver.exploring.matrix_space  # noqa: F401
    plan = toy_plan(tmp_path)
    for target in ("accord.resolver.api.plan_for", "accord.resolver.exploring.dryrun.plan_for", "accord.resolver.exploring.matrix_axes.plan_for",
                   "accord.resolver.exploring.matrix_space.plan_for",
                   "accord.resolver.commands.matrix.plan_for"):
        monkeypatch.setattr(target, lambda system, strict=False: plan)

    def facts(spec="probe", overrides=(), model_path=None, system="llm", revision=None):
        return TOY_FACTS[spec]
    monkeypatch.setattr("accord.resolver.commands.resolve.load_facts", facts)
    monkeypatch.setattr("accord.resolver.facts.machine.load_facts", facts)
    return plan


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_paragraph(err: str, command: str) -> None:
    assert err.startswith(f"accord {command}: ")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# -- exit codes -------------------------------------------------------------------------------------

def test_resolve_exit_codes(toy, capsys):
    assert run(capsys, "resolve", "--facts", "b200", "--tp-size", "8")[0] == 0
    assert run(capsys, "resolve", "--facts", "b200", "--tp-sise", "8")[0] == 2
    code, out, err = run(capsys, "resolve", "--facts", "b200", "--attention-backend", "fa3")
    assert code == 3 and out == "" and "rule      attn.fa3.hopper" in err and "\033" not in err


def test_why_exit_codes(toy, capsys):
    code, out, _ = run(capsys, "why", "attention_backend", "--facts", "b200")
    assert code == 0 and out.startswith("attention_backend = flashinfer   (rule attn.backend.order)")
    code, _, err = run(capsys, "why", "attention_backnd", "--facts", "b200")
    assert code == 2 and "did you mean attention_backend" in err
    assert run(capsys, "why", "attention_backend", "--facts", "b200", "--attention-backend", "fa3")[0] == 3


def test_matrix_exit_codes(toy, capsys):
    code, out, err = run(capsys, "matrix", "--facts", "h100,b200", "--axes", "attention_backend",
                         "--format", "github")
    assert code == 0 and {"facts", "attention_backend", "args", "hash"} <= set(json.loads(out)["include"][0])
    assert "pairwise coverage" in err
    code, _, err = run(capsys, "matrix", "--facts", "b200", "--axes", "attention_backend",
                       "--values", "attention_backend=fa3")
    assert code == 3 and "attn.fa3.hopper" in err
    code, _, err = run(capsys, "matrix", "--facts", "h100", "--axes", "attention_backend", "--fix", "--tp-size", "16")
    assert code == 3 and "par.world_size.fits" in err


def test_matrix_fixed_flags_reach_every_row(toy, capsys):
    code, out, _ = run(capsys, "matrix", "--facts", "h100", "--axes", "kv_cache_dtype", "--format", "json",
                       "--fix", "--tp-size 2")
    rows = json.loads(out)["rows"]
    assert code == 0 and rows and all(r["args"].startswith("--tp-size 2 --kv-cache-dtype") for r in rows)


def test_serve_reports_a_conflict_and_starts_nothing(toy, capsys):
    code, out, err = run(capsys, "serve", "--facts", "b200", "--attention-backend", "fa3")
    assert code == 3 and out == "" and err.startswith("error: no legal llm configuration")


def test_rules_and_probe_exit_codes(capsys):
    assert run(capsys, "rules", "--stats", "--system", "diffusion", "--json")[0] == 0
    assert run(capsys, "rules", "--stats", "--bogus")[0] == 2
    code, out, _ = run(capsys, "probe", "--facts", "h100", "--json")
    assert code == 0 and json.loads(out)["gpu.sm"] == 90
    assert run(capsys, "probe", "--facts", "h1000")[0] == 2


# -- bad input: one paragraph on stderr, exit 2, nothing on stdout ---------------------------------

@pytest.fixture
def broken_config(tmp_path):
    path = tmp_path / "launch.yaml"
    path.write_text("tp_size: 2\n  page_size: [\n")
    return path


@pytest.mark.parametrize("argv, expected", [
    (["resolve", "--facts", "h100", "--tp-sise", "8"], "did you mean --tp-size"),
    (["resolve", "--facts", "h100", "--tp-size", "eight"], "'eight' for --tp-size"),
    (["resolve", "--facts", "h1000"], "unknown facts preset 'h1000'"),
    (["resolve", "--facts", "h100", "--fact", "platform=cpu"], "impossible facts"),
    (["resolve", "--facts", "h100", "--fact", "gpu.sm=fast"], "gpu.sm"),
    (["resolve", "--dry-run", "--facts", "h100", "--flag", "atention_backend"], "did you mean attention_backend"),
    (["matrix", "--facts", "h100", "--axes", "atention_backend"], "did you mean attention_backend"),
    (["matrix", "--facts", "h100", "--axes", "tp_size", "--values", "tp_size=1,two"], "'two'"),
    (["matrix", "--facts", "h100", "--axes", "attention_backend", "--strategy", "4-wise"], "--strategy"),
    (["matrix", "--facts", "h100", "--axes", "attention_backend", "--fix", "--tp-sise", "2"], "did you mean --tp-size"),
    (["why", "--facts", "h100"], "name the flag"),
])
def test_bad_input_is_one_paragraph_with_exit_2(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert_one_paragraph(err, argv[0])
    assert expected in err


def test_malformed_config_file_names_the_file_and_line(capsys, broken_config):
    code, out, err = run(capsys, "resolve", "--facts", "h100", "--config", str(broken_config))
    assert code == 2 and out == ""
    assert_one_paragraph(err, "resolve")
    assert str(broken_config) in err and "line 2" in err


# -- the JSON contract of a conflict (DESIGN.md) ----------------------------------------------------

def test_conflict_json_matches_the_contract(toy, capsys):
    code, out, err = run(capsys, "resolve", "--json", "--facts", "b200", "--tp-size", "8", "--dp-size", "3",
                         "--enable-dp-attention", "--attention-backend", "fa3")
    assert code == 3 and err == ""
    data = json.loads(out)
    assert data["error"] == "conflict" and len(data["conflicts"]) == 2
    for conflict in data["conflicts"]:
        assert CONFLICT_KEYS <= set(conflict)
        assert all(isinstance(conflict[k], list) for k in ("flags", "rules", "facts", "fixes"))
        assert isinstance(conflict["message"], str) and conflict["fixes"]
    assert data["conflicts"][1]["rules"] == ["attn.fa3.hopper"] and data["conflicts"][1]["facts"] == ["gpu.sm"]


# -- the real rule set, as real processes -----------------------------------------------------------

def accord(*argv):
    return subprocess.run([sys.executable, "-m", "accord.resolver.cli", *argv], capture_output=True, text=True, timeout=120)


def test_real_rules_resolve_and_conflict_as_processes():
    ok = accord("resolve", "--json", "--facts", "h100", "--tp", "8")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["values"]["tp_size"] == 8
    bad = accord("resolve", "--json", "--facts", "h100", "--tp", "64")
    assert bad.returncode == 3 and "Traceback" not in bad.stderr
    data = json.loads(bad.stdout)
    assert data["error"] == "conflict" and all(CONFLICT_KEYS <= set(c) for c in data["conflicts"])


def test_real_rules_dry_run_as_a_process():
    done = accord("resolve", "--dry-run", "--json", "--facts", "h100", "--tp", "8", "--flag", "kv_cache_dtype")
    assert done.returncode == 0, done.stderr
    (choice,) = json.loads(done.stdout)["choices"]
    assert choice["flag"] == "kv_cache_dtype" and choice["chosen"] in choice["legal"]
    assert all(item["rules"] for item in choice["excluded"])


def test_real_matrix_is_the_same_in_every_process():
    argv = ["matrix", "--facts", "h100,mi300x", "--axes", "attention_backend,kv_cache_dtype", "--values",
            "attention_backend=fa3,triton,aiter", "--values", "kv_cache_dtype=auto,fp8_e4m3", "--format", "json"]
    outputs = []
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-m", "accord.resolver.cli", *argv], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] and json.loads(outputs[0])["rows"]


@pytest.mark.parametrize("words, flag", [
    (["--page-size"], "page_size"), (["tp"], "tp_size"), (["--tp"], "tp_size"), (["tp-size"], "tp_size"),
    (["page-size", "--tp"], "page_size"),
])
def test_why_accepts_any_spelling_of_the_flag(capsys, words, flag):
    """Real rules: `why --page-size`, the short form `tp`, dashed spellings all name the flag."""
    tail = ["2"] if words[-1] == "--tp" and len(words) > 1 else []
    code, out, err = run(capsys, "why", *words, *tail, "--facts", "h100")
    assert code == 0, err
    assert out.startswith(f"{flag} = ")


def test_why_help_prints_usage_and_exits_0(capsys):
    code, out, _ = run(capsys, "why", "--help")
    assert code == 0 and out.startswith("usage: accord why FLAG")


def test_why_names_a_deprecated_flag_left_out_of_the_values(capsys):
    code, out, _ = run(capsys, "why", "disable_cuda_graph", "--facts", "h100")
    assert code == 0 and out.startswith("disable_cuda_graph: retired, or deprecated and not set")


# -- fixes an operator would apply (real rules) -------------------------------------------------------

def _conflict_json(capsys, *argv):
    code, out, _ = run(capsys, "resolve", "--json", *argv)
    assert code == 3
    return json.loads(out)


def _all_fixes(data):
    return [f for c in data["conflicts"] for f in c["fix_details"]]


def test_tp_16_on_one_8_gpu_node_offers_two_nodes_with_an_address_to_fill_in(capsys):
    data = _conflict_json(capsys, "--facts", "h100", "--tp-size", "16")
    nodes = next(f for f in _all_fixes(data) if any(c["flag"] == "nnodes" for c in f["changes"]))
    assert {c["flag"]: c["to"] for c in nodes["changes"]} == {"nnodes": 2, "dist_init_addr": "HOST:PORT"}
    assert [item["flag"] for item in nodes["fill_in"]] == ["dist_init_addr"]
    assert nodes["command"][:2] == ["--tp-size", "16"]  # the parallel degree asked for stays
    assert run(capsys, "resolve", "--facts", "h100", *nodes["command"])[0] == 0


def test_relax_of_tp_16_keeps_the_most_parallelism_that_fits_one_node(capsys):
    code, out, _ = run(capsys, "resolve", "--json", "--relax", "--facts", "h100", "--tp-size", "16")
    assert code == 0
    data = json.loads(out)
    # Upstream's world size must fit gpu.count=8 GPUs; tp 8 is the largest that does (not tp 1).
    assert data["relaxed"] == [{"flag": "tp_size", "from": 16, "to": 8, "rule": "par.world_size.fits_gpus"}]



def test_a_json_flag_value_prints_in_the_table_and_in_relaxed_changes(capsys):
    """A JSON object flag (held read-only in the resolved config) prints as JSON text in the value
    table, and `--relax` that drops it reports the object it dropped, in text and in --json."""
    config = '{"protected_threshold": 3}'
    code, out, _ = run(capsys, "resolve", "--facts", "h100", "--radix-eviction-policy", "slru",
                       "--radix-eviction-policy-config", config)
    assert code == 0 and '{"protected_threshold": 3}' in out
    limit = ["--facts", "h100", "--limit-mm-data-per-request", '{"images": 2}']
    code, out, _ = run(capsys, "resolve", "--json", "--relax", *limit)
    assert code == 0
    assert json.loads(out)["relaxed"] == [{"flag": "limit_mm_data_per_request", "from": {"images": 2},
                                          "to": None, "rule": "mm.limit_per_request.modalities"}]
    code, _, err = run(capsys, "resolve", "--relax", *limit)
    assert code == 0 and "dropped --limit-mm-data-per-request '{\"images\": 2}'" in err

LLAMA_70B = {   # meta-llama/Llama-3.1-70B-Instruct config.json, the fields the model facts read
    "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
    "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80,
    "max_position_embeddings": 131072, "vocab_size": 128256, "torch_dtype": "bfloat16"}


def test_a_70b_model_on_one_h100_is_fixed_by_tensor_parallelism_first(capsys, tmp_path):
    # About 140 GB of bf16 weights cannot load on one 80 GB GPU (upstream: "Not enough memory" at
    # load); splitting them keeps the model's precision (a fix never quantizes a checkpoint the user
    # did not), and over 2 GPUs the weights fit but leave about 1.3 GiB for the KV cache, below one
    # 131072-token request: tp 4 is the first fix that serves (rules/preferences/llm.yaml kv_floor).
    model = tmp_path / "Llama-3.1-70B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA_70B))
    data = _conflict_json(capsys, "--facts", "h100", "--model-path", str(model))
    best = _all_fixes(data)[0]
    assert [(c["flag"], c["to"]) for c in best["changes"]] == [("tp_size", 4)]
    assert all(c["flag"] != "quantization" for f in _all_fixes(data) for c in f["changes"])
    assert run(capsys, "resolve", "--facts", "h100", *best["command"])[0] == 0
    assert all(c["to"] != "unquant" for f in _all_fixes(data) for c in f["changes"])  # no smaller


def test_diffusion_tp_2_on_one_gpu_offers_num_gpus_2(capsys):
    data = _conflict_json(capsys, "--system", "diffusion", "--facts", "h100", "--tp-size", "2")
    best = _all_fixes(data)[0]
    assert best["changes"] == [{"flag": "num_gpus", "from": None, "to": 2, "rule": best["changes"][0]["rule"]}]
    assert run(capsys, "resolve", "--system", "diffusion", "--facts", "h100", *best["command"])[0] == 0


def test_breakable_cuda_graphs_without_resolutions_offers_the_model_default_size(capsys):
    # Z-Image samples at 1024x1024 by default (upstream configs/sample/zimage.py), which upstream
    # 0.5.23 captures when --warmup-resolutions is missing.
    argv = ["--system", "diffusion", "--facts", "h100", "--model-path", "Tongyi-MAI/Z-Image",
            "--enable-breakable-cuda-graph"]
    data = _conflict_json(capsys, *argv)
    best = _all_fixes(data)[0]
    assert best["changes"] == [{"flag": "warmup_resolutions", "from": None, "to": ["1024x1024"],
                                "rule": "cg.bcg.needs_resolutions"}]
    assert best["command"][:len(argv) - 4] == argv[4:]
    assert run(capsys, "resolve", "--system", "diffusion", "--facts", "h100", *best["command"])[0] == 0


def test_the_conflict_report_fits_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "72")
    code, _, err = run(capsys, "resolve", "--system", "diffusion", "--facts", "h100", "--model-path",
                       "Tongyi-MAI/Z-Image", "--enable-breakable-cuda-graph", "--dp-size", "2")
    assert code == 3 and max(len(line) for line in err.splitlines()) <= 72
