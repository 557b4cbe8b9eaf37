"""Machine facts: presets, facts files, --fact overrides, contradiction checks, the probe, `accord probe`."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import accord.resolver.facts.model as model_facts_module
from accord.resolver import cli
from accord.resolver.errors import UsageError
from accord.resolver.facts import probe as probing
from accord.resolver.facts.machine import list_presets, load_facts, load_preset
from accord.resolver.facts.probe import probe
from accord.resolver.facts.schema import contradictions, fact_spec, parse_fact, type_problem

REPO = Path(__file__).resolve().parent.parent
REQUIRED_PRESETS = {"h100", "h200", "b200", "gb200", "a100", "a10g", "l40s", "l4", "rtx4090",
                    "rtx5090", "mi300x", "cpu"}
MACHINE_KEYS = {"platform", "cuda", "rocm", "torch", "gpu.vendor", "gpu.name", "gpu.sm", "gpu.gfx",
                "gpu.count", "gpu.mem_gib", "interconnect.nvlink", "interconnect.p2p",
                "interconnect.mnnvl", "interconnect.ib", "host.ram_gib", "host.amx"}


# --- presets --------------------------------------------------------------------------------------

def test_every_required_preset_exists():
    assert REQUIRED_PRESETS <= set(list_presets())


@pytest.mark.parametrize("name", list_presets())
def test_preset_is_a_complete_consistent_machine(name):
    data = load_preset(name)
    assert MACHINE_KEYS <= set(data), f"{name} misses {MACHINE_KEYS - set(data)}"
    assert not [k for k in data if k.startswith("model.")], "a preset describes a machine, not a model"
    assert contradictions(data) == []
    assert list(data) == sorted(data)


@pytest.mark.parametrize("name", list_presets())
def test_preset_file_says_what_it_is_and_where_its_numbers_come_from(name):
    import yaml

    raw = yaml.safe_load((REPO / "rules" / "facts" / f"{name}.yaml").read_text())
    assert isinstance(raw.get("description"), str) and "\n" not in raw["description"].strip()
    assert raw.get("sources") and all(isinstance(s, str) and s for s in raw["sources"])


# The memory tiers of upstream memory_hook.py (smallest GPU, GiB): each preset must land in the
# tier its real GPU lands in, or every memory-tier default computed for it is wrong.
@pytest.mark.parametrize("name, low, high", [
    ("a10g", 20, 35), ("l4", 20, 35), ("rtx4090", 20, 35), ("rtx5090", 20, 35),
    ("l40s", 35, 60), ("h100", 60, 90), ("a100", 60, 90), ("h200", 90, 160),
    ("b200", 160, 1e9), ("gb200", 160, 1e9), ("mi300x", 160, 1e9),
])
def test_preset_memory_lands_in_its_gpus_memory_tier(name, low, high):
    assert low <= load_preset(name)["gpu.mem_gib"] < high


@pytest.mark.parametrize("name, platform, sm, count", [
    ("h100", "cuda", 90, 8), ("h200", "cuda", 90, 8), ("b200", "cuda", 100, 8),
    ("gb200", "cuda", 100, 4), ("a100", "cuda", 80, 8), ("a10g", "cuda", 86, 1),
    ("l40s", "cuda", 89, 8), ("l4", "cuda", 89, 1), ("rtx4090", "cuda", 89, 1),
    ("rtx5090", "cuda", 120, 1), ("mi300x", "rocm", None, 8), ("cpu", "cpu", None, 0),
])
def test_preset_identity(name, platform, sm, count):
    data = load_preset(name)
    assert (data["platform"], data["gpu.sm"], data["gpu.count"]) == (platform, sm, count)


def test_gb200_alone_sits_in_a_multi_node_nvlink_domain():
    assert [n for n in list_presets() if load_preset(n)["interconnect.mnnvl"]] == ["gb200"]


def test_rocm_preset_has_aiter_and_no_cuda_only_libraries():
    data = load_preset("mi300x")
    assert "packages.aiter" in data and "packages.flashinfer" not in data
    assert data["cuda"] is None and data["rocm"] == "6.4" and data["gpu.gfx"] == "gfx942"


def test_cpu_preset_describes_a_machine_without_accelerator():
    data = load_preset("cpu")
    assert data["cuda"] is None and data["gpu.count"] == 0 and data["gpu.mem_gib"] is None


def test_load_preset_returns_a_fresh_copy():
    first = load_preset("h100")
    first["gpu.count"] = 1
    first["interconnect.ib"].append("bogus")
    again = load_preset("h100")
    assert again["gpu.count"] == 8 and "bogus" not in again["interconnect.ib"]


def test_unknown_preset_suggests_the_closest_and_lists_all():
    with pytest.raises(UsageError) as err:
        load_preset("h10")
    message = str(err.value)
    assert "'h10'" in message and "Did you mean 'h100'" in message and "mi300x" in message


# --- load_facts: specs, files, overrides ----------------------------------------------------------

def test_load_facts_from_preset_is_sorted_and_includes_builtin_model(monkeypatch, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    monkeypatch.setitem(model_facts_module.BUILTIN_MODELS, "llm", folder)
    result = load_facts("h100")
    assert list(result) == sorted(result)
    assert result["gpu.sm"] == 90 and result["model.architecture"] == "LlamaForCausalLM"


def test_facts_file_builds_on_preset_with_nested_and_dotted_keys(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("preset: h100\ngpu:\n  count: 4\n'interconnect.nvlink': false\n"
                    "packages:\n  flashinfer: null\n  mooncake: '0.3.5'\n")
    result = load_facts(str(path))
    assert result["gpu.count"] == 4 and result["interconnect.nvlink"] is False
    assert result["gpu.sm"] == 90  # kept from the preset
    assert "packages.flashinfer" not in result and result["packages.mooncake"] == "0.3.5"


def test_facts_file_without_preset_is_the_whole_fact_set(tmp_path):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps({"platform": "cuda", "gpu": {"sm": 100, "count": 2}}))
    result = load_facts(str(path), model_path="org/not-downloaded")
    assert result == {"gpu.count": 2, "gpu.sm": 100, "platform": "cuda"}


def test_explicit_file_model_facts_beat_the_model_folder(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    path = tmp_path / "f.yaml"
    path.write_text("preset: cpu\nmodel.num_layers: 61\n")
    assert load_facts(str(path), model_path=str(model))["model.num_layers"] == 61


def test_fact_overrides_are_typed_and_win(tmp_path):
    result = load_facts("h100", ["gpu.sm=100", "cuda=none", "interconnect.nvlink=false",
                                 "gpu.mem_gib=80", "interconnect.ib=mlx5_0,mlx5_1",
                                 "packages.flashinfer=none", "model.attention=mla"],
                        model_path="org/not-downloaded")
    assert result["gpu.sm"] == 100 and result["cuda"] is None
    assert result["interconnect.nvlink"] is False and result["gpu.mem_gib"] == 80
    assert result["interconnect.ib"] == ["mlx5_0", "mlx5_1"]
    assert "packages.flashinfer" not in result and result["model.attention"] == "mla"


def test_later_override_of_the_same_key_wins():
    assert load_facts("h100", ["gpu.count=2", "gpu.count=4"])["gpu.count"] == 4


@pytest.mark.parametrize("item, expected", [
    ("gpu.smm=90", "Did you mean 'gpu.sm'"),
    ("gpu.sm=9.0", "written 90"),
    ("gpu.count=eight", "must be an integer"),
    ("interconnect.p2p=maybe", "true or false"),
    ("model.attention=sparse", "must be one of mha"),
    ("platform=tpu", "must be one of cuda"),
    ("gpu.count=none", "cannot be null"),
    ("cuda=twelve", "version string"),
    ("gpu.sm", "write KEY=VALUE"),
])
def test_bad_fact_override_names_the_problem(item, expected):
    with pytest.raises(UsageError) as err:
        parse_fact(item)
    assert expected in str(err.value)


def test_any_package_name_is_a_fact_but_only_with_a_version():
    assert parse_fact("packages.my_kernels=1.2") == ("packages.my_kernels", "1.2")
    assert fact_spec("packages.not-a-name") is None


@pytest.mark.parametrize("overrides, expected", [
    (["gpu.count=-1"], "gpu.count is -1"),
    (["gpu.count=0"], "platform cuda needs at least one GPU"),
    (["platform=cpu"], "gpu.sm is 90 but platform is cpu"),
    (["gpu.sm=none"], "platform cuda needs gpu.sm"),
    (["gpu.sm=9"], "major*10+minor"),
    (["gpu.vendor=amd"], "gpu.vendor amd does not match platform cuda"),
])
def test_impossible_facts_are_refused(overrides, expected):
    with pytest.raises(UsageError) as err:
        load_facts("h100", overrides)
    assert expected in str(err.value) and "--facts h100" in str(err.value)


def test_cpu_with_gpus_is_refused():
    with pytest.raises(UsageError, match="platform cpu has no GPUs"):
        load_facts("cpu", ["gpu.count=2"])


@pytest.mark.parametrize("text, suffix, expected", [
    ("preset: h100\ngpu: [unclosed\n", ".yaml", "line 2"),  # the line whose bracket never closes
    ('{"preset": "h100",\n "gpu.sm": }', ".json", "line 2"),
    ("- just\n- a list\n", ".yaml", "a mapping of fact keys"),
    ("preset: h100\ngpu:\n  smm: 90\n", ".yaml", "Did you mean 'gpu.sm'"),
    ("cuda: 12.8\n", ".yaml", "quote it"),
    ("gpu.sm: 90\ngpu:\n  sm: 90\n", ".yaml", "set twice"),
    ("preset: h1000\n", ".yaml", "Did you mean 'h100'"),
])
def test_bad_facts_file_names_the_file_and_problem(tmp_path, text, suffix, expected):
    path = tmp_path / f"facts{suffix}"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        load_facts(str(path))
    message = str(err.value)
    assert expected in message
    assert "h1000" in message or str(path) in message


def test_missing_facts_file_is_not_mistaken_for_a_preset(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_facts(str(tmp_path / "site.yaml"))


# --- probe ---------------------------------------------------------------------------------------

def test_probe_gives_cpu_facts_without_accelerator(monkeypatch):
    monkeypatch.setattr(probing, "_accelerator_may_exist", lambda: False)
    result = probe()
    assert result["platform"] == "cpu" and result["cuda"] is None and result["gpu.count"] == 0
    assert contradictions(result) == []
    for key, value in result.items():
        assert type_problem(key, value) is None


def _fake_torch(cuda_available=True, hip=None, broken=False):
    """A stand-in torch module shaped like the real one's device API (two 80 GB Hopper GPUs)."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.8.0+cu128"
    torch.version = types.SimpleNamespace(cuda=None if hip else "12.8", hip=hip)

    def is_available():
        if broken:
            raise RuntimeError("CUDA driver initialization failed")
        return cuda_available

    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=81559 * 2**20,
                                  gcnArchName="gfx942:sramecc+:xnack-")
    torch.cuda = types.SimpleNamespace(
        is_available=is_available, device_count=lambda: 2,
        get_device_properties=lambda i: props, get_device_capability=lambda i: (9, 0),
        can_device_access_peer=lambda i, j: True)
    torch.xpu = types.SimpleNamespace(is_available=lambda: False)
    torch.backends = types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: False))
    return torch


def test_probe_reads_nvidia_gpus_through_torch(monkeypatch):
    monkeypatch.setattr(probing, "_accelerator_may_exist", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: NVLink cannot be told apart
    result = probe()
    assert result["platform"] == "cuda" and result["gpu.vendor"] == "nvidia"
    assert (result["gpu.sm"], result["gpu.count"], result["gpu.mem_gib"]) == (90, 2, 79.6)
    assert result["cuda"] == "12.8" and result["torch"] == "2.8.0"
    assert result["interconnect.p2p"] is True
    assert "interconnect.nvlink" not in result and "interconnect.mnnvl" not in result
    assert contradictions(result) == []


def _fake_pynvml(nvlink: bool, cluster_uuid: bytes):
    """A stand-in for nvidia-ml-py: NVLink status per GPU pair and the GPU fabric query."""
    import ctypes

    class FabricInfo(ctypes.Structure):
        _fields_ = [("clusterUuid", ctypes.c_char * 16), ("status", ctypes.c_uint),
                    ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte)]

    def fabric_info(handle, ref):
        info = ctypes.cast(ref, ctypes.POINTER(FabricInfo)).contents
        info.state = 3
        ctypes.memmove(ctypes.addressof(info) + FabricInfo.clusterUuid.offset, cluster_uuid, 16)

    return types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: i,
        NVML_P2P_CAPS_INDEX_NVLINK=4, NVML_P2P_STATUS_OK=0, NVML_GPU_FABRIC_STATE_COMPLETED=3,
        nvmlDeviceGetP2PStatus=lambda a, b, cap: 0 if nvlink else 5,
        c_nvmlGpuFabricInfo_t=FabricInfo, nvmlDeviceGetGpuFabricInfo=fabric_info)


@pytest.mark.parametrize("nvlink, cluster_uuid, mnnvl", [
    (True, bytes(16), False),              # HGX: NVSwitch fabric, but no multi-node cluster
    (True, b"\0" + b"\x07" * 15, True),    # NVL72 tray: a cluster id, even one starting with 0
    (False, bytes(16), False),             # PCIe cards
])
def test_probe_reads_nvlink_and_mnnvl_from_nvml(monkeypatch, nvlink, cluster_uuid, mnnvl):
    monkeypatch.setattr(probing, "_accelerator_may_exist", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(nvlink, cluster_uuid))
    result = probe()
    assert (result["interconnect.nvlink"], result["interconnect.mnnvl"]) == (nvlink, mnnvl)


def test_facts_file_can_build_on_this_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(probing, "_accelerator_may_exist", lambda: False)
    path = tmp_path / "here.yaml"
    path.write_text("preset: probe\nhost.ram_gib: 1\n")
    result = load_facts(str(path))
    assert result["platform"] == "cpu" and result["host.ram_gib"] == 1


def test_probe_reads_amd_gpus_through_torch(monkeypatch):
    monkeypatch.setattr(probing, "_accelerator_may_exist", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(hip="6.4.43482-0f2d60242"))
    result = probe()
    assert (result["platform"], result["gpu.vendor"], result["rocm"]) == ("rocm", "amd", "6.4")
    assert result["gpu.gfx"] == "gfx942" and result["gpu.sm"] is None and result["cuda"] is None
    assert contradictions(result) == []


def test_probe_falls_back_to_cpu_when_torch_breaks(monkeypatch):
    monkeypatch.setattr(probing, "_accelerator_may_exist", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(broken=True))
    assert probe()["platform"] == "cpu"


def test_probe_lists_importable_packages_only(monkeypatch):
    monkeypatch.setattr(probing, "known_packages", lambda: {"yaml": ["PyYAML"], "surely_not_installed_pkg": ["x"]})
    found = probing._package_facts()
    assert list(found) == ["packages.yaml"] and found["packages.yaml"][0].isdigit()


@pytest.mark.parametrize("word, expected", [("1", True), ("True", True), ("y", True), ("0", False), ("no", False),
                                             ("maybe", None)])
def test_probe_reads_env_facts_from_their_variable_as_sglang_does(monkeypatch, word, expected):
    """SGLANG_ENABLE_SPEC_V2 is read with SGLang's boolean words (environ.py EnvBool); a word SGLang
    would refuse leaves the fact unknown rather than guessed."""
    monkeypatch.setattr(probing, "_accelerator_may_exist", lambda: False)
    monkeypatch.setenv("SGLANG_ENABLE_SPEC_V2", word)
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)
    found = probe()
    assert found.get("env.spec_v2") == expected
    assert "env.allow_longer_context" not in found


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


def test_importing_facts_loads_no_heavy_module():
    out = _run("import sys, accord.resolver.facts.machine, accord.resolver.facts.model, accord.resolver.commands.probe;"
               "print(sorted(m for m in ('torch', 'triton', 'numpy', 'zmq') if m in sys.modules))")
    assert out.strip() == "[]"


@pytest.mark.skipif(probing._accelerator_may_exist(), reason="this machine may have an accelerator")
def test_probe_without_accelerator_does_not_import_torch():
    out = _run("import sys, accord.resolver.facts.probe as f; p = f.probe();"
               "print(p['platform'], 'torch' in sys.modules)")
    assert out.split() == ["cpu", "False"]


# --- accord probe ----------------------------------------------------------------------------------

def test_accord_probe_json_prints_the_preset_facts(capsys):
    assert cli.main(["probe", "--facts", "h100", "--fact", "gpu.count=2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["gpu.count"] == 2 and printed["gpu.name"] == "NVIDIA H100 80GB HBM3"


def test_accord_probe_table_is_deterministic(capsys):
    cli.main(["probe", "--facts", "mi300x"])
    first = capsys.readouterr().out
    cli.main(["probe", "--facts", "mi300x"])
    assert capsys.readouterr().out == first
    lines = [line.split() for line in first.splitlines()]
    assert ["platform", "rocm"] in lines and ["cuda", "null"] in lines


def test_accord_probe_reads_a_diffusion_model_folder(tmp_path, capsys):
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    cli.main(["probe", "--facts", "cpu", "--system", "diffusion", "--model-path", str(tmp_path), "--json"])
    assert json.loads(capsys.readouterr().out)["model.pipeline"] == "FluxPipeline"


@pytest.mark.parametrize("argv, expected", [
    (["--facts", "h10"], "Did you mean 'h100'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--fact", "gpu.sm=9.0"], "written 90"),
])
def test_accord_probe_bad_input_is_one_paragraph_exit_2(argv, expected):
    done = subprocess.run([sys.executable, "-m", "accord.resolver.cli", "probe", *argv], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("override, expected", [
    ("gpu.mem_gib=1e308", "gpu.mem_gib = 1e+308 is not a plausible value"),
    ("gpu.mem_gib=nan", "gpu.mem_gib must be a number, not nan"),
    ("gpu.mem_gib=inf", "gpu.mem_gib must be a number, not inf"),
    ("host.ram_gib=1e30", "host.ram_gib = 1e+30 is not a plausible value"),
    ("gpu.count=100000", "gpu.count = 100000 is not a plausible value"),
])
def test_non_finite_or_absurd_fact_values_are_usage_errors(override, expected):
    with pytest.raises(UsageError) as err:
        load_facts("h100", [override])
    assert str(err.value).startswith(f"--fact {override}: {expected}") and err.value.exit_code == 2
