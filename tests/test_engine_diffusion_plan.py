"""The diffusion engine's reading of a resolved config: layout, warmup plan, settings, ports.

All plain Python: these run without torch and without starting a process.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from accord.engine.diffusion.layout import ParallelLayout
from accord.engine.diffusion.ports import choose_ports
from accord.engine.diffusion.settings import EngineSettings, UnsupportedConfig
from accord.engine.diffusion.spec import load_model_spec
from accord.engine.diffusion.warmup import Resolution, WarmupEntry, parse_resolution
from accord.resolver.errors import UsageError
from accord.resolver.frozen import ResolvedConfig
from accord.resolver.language.catalog import load_catalog

CONCRETE = {"tp_size": 1, "sp_degree": 1, "ulysses_degree": 1, "ring_degree": 1, "enable_cfg_parallel": False,
            "cfg_parallel_degree": 1, "warmup_mode": "off"}


def config(**overrides) -> ResolvedConfig:
    values = {**load_catalog("diffusion").defaults(), **CONCRETE, **overrides}
    return ResolvedConfig("diffusion", {"platform": "cpu"}, values)


def settings(**overrides) -> EngineSettings:
    return EngineSettings.from_config(config(**overrides))


# -- layout -----------------------------------------------------------------------------------

def test_layout_puts_tp_innermost_then_sp_cfg_dp():
    layout = ParallelLayout(num_gpus=16, dp=2, cfg=2, sp=2, tp=2, ulysses=2, ring=1)
    assert layout.coords(0) == {"dp": 0, "cfg": 0, "sp": 0, "tp": 0}
    assert layout.coords(1) == {"dp": 0, "cfg": 0, "sp": 0, "tp": 1}
    assert layout.coords(2) == {"dp": 0, "cfg": 0, "sp": 1, "tp": 0}
    assert layout.coords(4) == {"dp": 0, "cfg": 1, "sp": 0, "tp": 0}
    assert layout.coords(8) == {"dp": 1, "cfg": 0, "sp": 0, "tp": 0}
    assert all(layout.rank_of(**layout.coords(r)) == r for r in range(16))


def test_layout_groups_partition_the_ranks_along_each_dimension():
    layout = ParallelLayout(num_gpus=8, dp=1, cfg=2, sp=2, tp=2, ulysses=1, ring=2)
    for dim in ("cfg", "sp", "tp"):
        groups = layout.groups(dim)
        assert sorted(r for g in groups for r in g) == list(range(8))
        assert all(len(g) == getattr(layout, dim) for g in groups)
    assert layout.groups("tp")[0] == (0, 1)
    assert (3, 7) in layout.groups("cfg")
    assert layout.replica_ranks(0) == tuple(range(8)) and layout.leader(0) == 0


def test_layout_replicas_have_their_own_leaders():
    layout = ParallelLayout(num_gpus=4, dp=2, cfg=2, sp=1, tp=1, ulysses=1, ring=1)
    assert layout.replica_ranks(1) == (2, 3)
    assert layout.leader(1) == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"num_gpus": 4, "dp": 1, "cfg": 2, "sp": 1, "tp": 1, "ulysses": 1, "ring": 1}, "must equal dp_size"),
    ({"num_gpus": 2, "dp": 1, "cfg": 1, "sp": 2, "tp": 1, "ulysses": 1, "ring": 1}, r"ulysses_degree \* ring_degree"),
    ({"num_gpus": 4, "dp": 1, "cfg": 4, "sp": 1, "tp": 1, "ulysses": 1, "ring": 1}, "two branches"),
    ({"num_gpus": 1, "dp": 0, "cfg": 1, "sp": 1, "tp": 1, "ulysses": 1, "ring": 1}, "at least 1"),
])
def test_layout_rejects_degrees_that_cannot_be_laid_out(kwargs, message):
    with pytest.raises(UsageError, match=message):
        ParallelLayout(**kwargs)


# -- settings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("flag, spelling", [
    ("tp_size", "--tp-size"), ("sp_degree", "--sp-degree"), ("enable_cfg_parallel", "--enable-cfg-parallel"),
    ("cfg_parallel_degree", "--cfg-parallel-size"), ("ulysses_degree", "--ulysses-degree"),
])
def test_an_unset_value_the_engine_needs_is_refused_by_its_flag_name(flag, spelling):
    with pytest.raises(UsageError, match=f"leaves {spelling} \\({flag}\\) unset"):
        settings(**{flag: None})


def test_an_unset_warmup_mode_is_refused_by_its_flag_name():
    with pytest.raises(UsageError, match="--warmup-mode"):
        settings(warmup_mode=None)


def test_cfg_flags_that_contradict_each_other_are_refused():
    with pytest.raises(UsageError, match="--enable-cfg-parallel is True but --cfg-parallel-size is 1"):
        settings(num_gpus=2, enable_cfg_parallel=True, cfg_parallel_degree=1)


def test_tp_size_must_divide_the_attention_heads():
    heads = load_model_spec(None).num_attention_heads
    with pytest.raises(UsageError, match=f"must divide the model's {heads} attention heads"):
        settings(num_gpus=3, tp_size=3)


def test_unknown_attention_backend_is_a_bug_report_and_unset_means_sdpa():
    with pytest.raises(UnsupportedConfig, match="--attention-backend 'fa'"):
        settings(attention_backend="fa")
    assert settings(attention_backend=None).describe()["attention_backend"] == "torch_sdpa (auto)"


@pytest.mark.parametrize("overrides, message", [
    ({"batching_max_size": 0}, "--batching-max-size must be at least 1"),
    ({"batching_delay_ms": -1.0}, "--batching-delay-ms must be 0 or more"),
])
def test_batching_settings_the_engine_cannot_honour_are_refused(overrides, message):
    with pytest.raises(UsageError, match=message):
        settings(**overrides)


def test_features_the_profile_refuses_are_bug_reports_when_they_reach_the_engine():
    with pytest.raises(UnsupportedConfig, match="--batching-config"):
        settings(batching_config="rules.json")
    with pytest.raises(UnsupportedConfig, match="platform 'mps'"):
        EngineSettings.from_config(ResolvedConfig("diffusion", {"platform": "mps"}, dict(config().values)))


def test_a_config_for_another_system_or_platform_is_refused():
    values = {**load_catalog("diffusion").defaults(), **CONCRETE}
    with pytest.raises(UsageError, match="no 'platform' fact"):
        EngineSettings.from_config(ResolvedConfig("diffusion", {}, values))
    with pytest.raises(UsageError, match="handed a 'llm' config"):
        EngineSettings.from_config(ResolvedConfig("llm", {"platform": "cpu"}, {}))


def test_offload_flags_may_be_unset_on_cpu_but_must_be_concrete_on_gpu():
    assert settings(dit_cpu_offload=None).describe()["component_placement"]["transformer"] == "host memory"
    values = {**load_catalog("diffusion").defaults(), **CONCRETE, "dit_cpu_offload": None}
    with pytest.raises(UsageError, match="--dit-cpu-offload"):
        EngineSettings.from_config(ResolvedConfig("diffusion", {"platform": "cuda"}, values))


def test_model_path_must_be_a_tiny_dit_folder(tmp_path):
    with pytest.raises(UsageError, match="not a local folder"):
        settings(model_path="Qwen/Qwen-Image")
    (tmp_path / "model_index.json").write_text('{"_class_name": "QwenImagePipeline"}')
    with pytest.raises(UsageError, match="declares pipeline 'QwenImagePipeline'"):
        settings(model_path=str(tmp_path))


# -- warmup plan ------------------------------------------------------------------------------

def test_breakable_graph_plan_is_resolutions_times_sorted_buckets():
    plan = settings(enable_breakable_cuda_graph=True, warmup_mode="server",
                    warmup_resolutions=["128x64", "64x64", "128x64"], bcg_text_buckets=[64, 16, 0, 16]).plan
    assert plan.text_buckets == (16, 64)
    assert plan.entries == (WarmupEntry(Resolution(128, 64), 16), WarmupEntry(Resolution(128, 64), 64),
                            WarmupEntry(Resolution(64, 64), 16), WarmupEntry(Resolution(64, 64), 64))


def test_text_bucket_is_the_smallest_that_fits_and_none_past_the_largest():
    plan = settings(enable_breakable_cuda_graph=True, warmup_mode="server", warmup_resolutions=["64x64"],
                    bcg_text_buckets=[16, 64]).plan
    assert [plan.text_bucket(n) for n in (1, 16, 17, 64, 65)] == [16, 16, 64, 64, None]
    assert plan.covers(Resolution(64, 64), 16) and not plan.covers(Resolution(128, 128), 16)


def test_without_breakable_graph_prompts_are_not_padded_and_default_size_is_warmed():
    plan = settings(warmup_mode="server").plan
    assert plan.text_bucket(5) is None
    assert [e.to_dict() for e in plan.entries] == [{"resolution": "256x256", "text_bucket": None}]
    assert settings(warmup_mode="off").plan.entries == ()


@pytest.mark.parametrize("overrides, message", [
    ({"warmup_resolutions": None}, "needs --warmup-resolutions"),
    ({"warmup_mode": "request"}, "needs --warmup-mode server"),
    ({"bcg_text_buckets": None}, "leaves --bcg-text-buckets unset"),
    ({"bcg_text_buckets": [0, -4]}, "at least one positive"),
    ({"bcg_text_buckets": [4096]}, "exceeds the text encoder"),
    ({"warmup_resolutions": ["64x60"]}, "multiple of 16"),
    ({"warmup_resolutions": ["big"]}, "not a resolution"),
])
def test_a_breakable_graph_plan_that_cannot_run_is_refused(overrides, message):
    base = {"enable_breakable_cuda_graph": True, "warmup_mode": "server", "warmup_resolutions": ["64x64"],
            "bcg_text_buckets": [64]}
    with pytest.raises(UsageError, match=message):
        settings(**{**base, **overrides})


def test_resolution_strings_are_checked_against_the_model():
    model = load_model_spec(None)
    assert parse_resolution(" 320X128 ", model) == Resolution(320, 128)
    with pytest.raises(ValueError, match="at most 4096"):
        parse_resolution("2048x2048", model)


# -- ports ------------------------------------------------------------------------------------

def _listening(port: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_strict_ports_fail_when_a_port_is_taken():
    with _listening() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} \\(--port\\) is already in use and --strict-ports"):
            choose_ports(config(strict_ports=True, port=port).values)


def test_strict_ports_refuse_one_port_for_two_uses():
    with pytest.raises(UsageError, match="same port as --port"):
        choose_ports(config(strict_ports=True, port=40123, scheduler_port=40123).values)


def test_without_strict_ports_a_taken_port_moves_by_the_seed_step():
    with _listening() as taken:
        port = taken.getsockname()[1]
        endpoints = choose_ports(config(port=port, scheduler_port=port).values)
    assert endpoints.http_port == port + 42
    assert endpoints.scheduler_port not in (port, port + 42)
    assert ("http", port, port + 42) in endpoints.moved


def test_the_supervisor_side_of_the_engine_does_not_import_torch():
    code = ("import sys; from accord.engine.diffusion import server, scheduler, http_api, request_schema; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
