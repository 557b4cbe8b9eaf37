"""engine.llm.settings: the engine takes resolved values as they are, and refuses what it cannot honour."""

from __future__ import annotations

import pytest

from accord.engine.llm.settings import EngineSettings, Topology, UnsupportedConfig
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog

BASE = dict(model_path="tiny-llama", attention_backend="torch_native", page_size=16, mem_fraction_static=0.8, random_seed=0)


def settings(facts=None, **overrides) -> EngineSettings:
    values = {**load_catalog("llm").defaults(), **BASE, **overrides}
    return EngineSettings.from_config(ResolvedConfig("llm", facts or {"platform": "cpu", "host.ram_gib": 16},
                                                     values))


def test_resolved_values_are_taken_as_they_are():
    s = settings(tp_size=2, page_size=64, kv_cache_dtype="fp8_e4m3", chunked_prefill_size=512,
                 decode_attention_backend="triton", schedule_policy="lpm", quantization_param_path="kv.json")
    assert (s.topology.tp_size, s.page_size, s.kv_cache_dtype, s.chunked_prefill_size) == (2, 64, "fp8_e4m3", 512)
    assert s.quantization_param_path == "kv.json" and settings().quantization_param_path is None
    assert (s.prefill_attention_backend, s.decode_attention_backend) == ("torch_native", "triton")
    assert s.device_mem_gib == 8.0, "CPU ranks of one node share the host RAM"
    assert settings(chunked_prefill_size=-1).chunked_prefill_size is None


@pytest.mark.parametrize("overrides,words", [
    ({"random_seed": None}, "--random-seed resolved to None"),
    ({"page_size": None}, "--page-size resolved to None"),
    ({"mem_fraction_static": None}, "--mem-fraction-static resolved to None"),
])
def test_values_left_unset_are_refused_naming_the_flag(overrides, words):
    with pytest.raises(UsageError) as err:
        settings(**overrides)
    assert words in str(err.value)


@pytest.mark.parametrize("overrides,words", [
    ({"attention_backend": "flashinfer"}, "--attention-backend 'flashinfer'"),
    ({"kv_cache_dtype": "nvfp4"}, "--kv-cache-dtype 'nvfp4'"),
    ({"schedule_policy": "lof"}, "--schedule-policy 'lof'"),
    ({"speculative_algorithm": "EAGLE"}, "--speculative-algorithm 'EAGLE'"),
    ({"enable_dp_attention": True, "tp_size": 2, "dp_size": 2, "pp_size": 2}, "several pipeline stages"),
])
def test_an_unsupported_config_is_a_bug_report_not_a_usage_error(overrides, words):
    """The engine profile refuses these before serve starts anything; reaching the engine with one
    means the profile is wrong, so the engine asserts instead of explaining."""
    with pytest.raises(UnsupportedConfig) as err:
        settings(**overrides)
    assert words in str(err.value) and "Accord bug" in str(err.value)
    assert not isinstance(err.value, UsageError)


def test_facts_must_describe_a_platform_and_memory_the_engine_can_use():
    with pytest.raises(UnsupportedConfig, match="platform 'mps'"):
        settings({"platform": "mps"})
    with pytest.raises(UsageError, match="host.ram_gib"):
        settings({"platform": "cpu"})
    assert settings({"platform": "cpu"}, max_total_tokens=100, mem_fraction_static=None).max_total_tokens == 100
    gpu = settings({"platform": "cuda", "gpu.mem_gib": 80}, cuda_graph_bs_decode=[4, 1, 2], base_gpu_id=2,
                   gpu_id_step=2, tp_size=2)
    assert gpu.cuda_graph_bs_decode == (1, 2, 4) and gpu.device_mem_gib == 80
    assert [gpu.device_for(r) for r in gpu.topology.all_ranks()] == ["cuda:2", "cuda:4"]
    with pytest.raises(UsageError, match="--cuda-graph-bs-decode"):
        settings({"platform": "cuda", "gpu.mem_gib": 80})
    assert settings({"platform": "cuda", "gpu.mem_gib": 80}, disable_cuda_graph=True).cuda_graph_bs_decode == ()
    eager_decode = settings({"platform": "cuda", "gpu.mem_gib": 80}, cuda_graph_backend_decode="disabled")
    assert eager_decode.cuda_graph_bs_decode == ()


def test_rank_layout_without_and_with_dp_attention():
    replicas = Topology(tp_size=2, pp_size=2, dp_size=2, dp_attention=False, nnodes=1, node_rank=0)
    names = [r.name for r in replicas.all_ranks()]
    assert names[:4] == ["scheduler_dp0_pp0_tp0", "scheduler_dp0_pp0_tp1", "scheduler_dp0_pp1_tp0",
                         "scheduler_dp0_pp1_tp1"] and len(names) == 8
    assert {r.world for r in replicas.all_ranks()} == {0, 1} and replicas.world_size == 4
    dpa = Topology(tp_size=4, pp_size=1, dp_size=2, dp_attention=True, nnodes=1, node_rank=0)
    assert [(r.dp, r.tp, r.world) for r in dpa.all_ranks()] == [(0, 0, 0), (0, 1, 0), (1, 2, 0), (1, 3, 0)]
    assert dpa.attn_tp_size == 2 and dpa.num_worlds == 1


def test_each_node_starts_only_its_own_ranks():
    node1 = Topology(tp_size=4, pp_size=1, dp_size=1, dp_attention=False, nnodes=2, node_rank=1)
    assert [(r.tp, r.node_index) for r in node1.ranks_on_this_node()] == [(2, 0), (3, 1)]


def test_only_a_cpu_rank_that_runs_triton_needs_the_interpreter():
    assert settings(decode_attention_backend="triton").triton_interpreted
    assert not settings().triton_interpreted
    gpu = settings({"platform": "cuda", "gpu.mem_gib": 80}, attention_backend="triton", disable_cuda_graph=True)
    assert not gpu.triton_interpreted
