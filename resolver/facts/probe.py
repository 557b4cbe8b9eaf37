"""Probing: the facts of the machine `accord` runs on, for `--facts probe` (the default).

Separate from presets and facts files (`machine`) because it is the only code that looks at real
hardware: device nodes, /proc and /sys, installed distributions, torch and NVML. It never raises:
what cannot be determined is left out (an unknown fact), and a missing or broken torch means CPU
facts.

Importing this module must stay cheap: torch is imported inside `probe()`, and only when the
machine has a device node an accelerator could sit behind.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from accord.resolver.facts.schema import FACT_KEYS, PACKAGE_PREFIX, VENDOR_OF_PLATFORM
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files

PACKAGES_FILE = RULES_DIR / "packages.yaml"


def known_packages() -> dict[str, list[str]]:
    """Libraries the rules care about, by import name, with the distributions that provide them
    (data: rules/packages.yaml)."""
    (documents,) = read_yaml_files([PACKAGES_FILE])
    return dict(documents[0]["packages"]) if documents else {}


def engine_package() -> str:
    """The import name of the serving engine the launch commands are for (rules/packages.yaml
    `engine`): `packages.<it>` is the release a command targets."""
    (documents,) = read_yaml_files([PACKAGES_FILE])
    return str(documents[0]["engine"])


# An accelerator is reachable only through one of these device nodes (or Metal on macOS). Without
# any of them torch cannot see a GPU, so probe answers without paying seconds to import it.
_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/kfd", "/dev/davinci[0-9]*",
                 "/dev/dri/renderD*", "/dev/dxg")
_UNKNOWN_VERSION = "0+unknown"  # importable, but no distribution metadata says which version
_UNKNOWN = object()  # a probe step found the fact undeterminable: `probe()` drops the key


def probe() -> dict[str, Any]:
    """The facts of this machine, sorted by key. Never raises: what cannot be determined is left
    out (unknown), and a torch that is missing or broken means CPU facts."""
    facts: dict[str, Any] = {
        "platform": "cpu", "cuda": None, "rocm": None, "torch": _strip_local(_dist_version("torch")),
        "gpu.vendor": None, "gpu.name": None, "gpu.sm": None, "gpu.gfx": None, "gpu.count": 0,
        "gpu.mem_gib": None, "interconnect.nvlink": False, "interconnect.p2p": False,
        "interconnect.mnnvl": False,
    }
    facts.update(_host_facts())
    facts.update(_package_facts())
    facts.update(_environment_facts())
    if facts["torch"] is not None and _accelerator_may_exist():
        facts.update(_torch_facts())
    return dict(sorted((k, v) for k, v in facts.items() if v is not _UNKNOWN))


def _accelerator_may_exist() -> bool:
    return sys.platform == "darwin" or any(glob.glob(pattern) for pattern in _DEVICE_NODES)


def _dist_version(*dists: str) -> str | None:
    from importlib import metadata

    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _strip_local(version: str | None) -> str | None:
    """'2.8.0+cu128' -> '2.8.0': the build tag is already in the `cuda` / `rocm` facts."""
    return version.split("+")[0] if version else version


def _package_facts() -> dict[str, str]:
    """Installed kernel libraries: importable (found without importing them) plus their version."""
    facts = {}
    for name, dists in known_packages().items():
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            facts[PACKAGE_PREFIX + name] = _dist_version(*dists) or _UNKNOWN_VERSION
    return facts


def _environment_facts() -> dict[str, bool]:
    """The `env.*` facts whose variable is set in this environment, which a launch from here
    inherits, read as SGLang reads a boolean variable; a word it would refuse is left unknown."""
    words = {"true": True, "1": True, "yes": True, "y": True, "false": False, "0": False, "no": False, "n": False}
    facts = {}
    for key, spec in FACT_KEYS.items():
        raw = os.environ.get(spec.variable) if spec.variable else None
        if raw is not None and spec.type == "bool" and raw.lower() in words:
            facts[key] = words[raw.lower()]
    return facts


def _host_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {}
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        facts["host.ram_gib"] = round(pages * page_size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    if sys.platform.startswith("linux"):
        ib = Path("/sys/class/infiniband")
        facts["interconnect.ib"] = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
            flags = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
            facts["host.amx"] = "amx_tile" in flags.split()
        except OSError:
            pass
    return facts


def _torch_facts() -> dict[str, Any]:
    """Device facts through torch; {} (the CPU facts stand) if torch fails in any way."""
    try:
        import torch

        facts: dict[str, Any] = {"torch": _strip_local(torch.__version__)}
        if torch.cuda.is_available() and getattr(torch.version, "hip", None):
            facts.update(_cuda_api_facts(torch, "rocm"))
        elif torch.cuda.is_available() and torch.version.cuda:
            facts.update(_cuda_api_facts(torch, "cuda"))
        elif hasattr(torch, "xpu") and torch.xpu.is_available():
            facts.update(_xpu_facts(torch))
        elif _npu_available(torch):
            facts.update({"platform": "npu", "gpu.vendor": "huawei", "gpu.count": torch.npu.device_count(),
                          "gpu.name": torch.npu.get_device_name(0), "gpu.mem_gib": _UNKNOWN})
        elif torch.backends.mps.is_available():  # unified memory: no separate GPU memory size
            facts.update({"platform": "mps", "gpu.vendor": "apple", "gpu.count": 1,
                          "gpu.name": _UNKNOWN, "gpu.mem_gib": _UNKNOWN})
        return facts
    except Exception:  # a broken torch install must not break `accord resolve`
        return {}


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _cuda_api_facts(torch: Any, platform: str) -> dict[str, Any]:
    """NVIDIA and AMD GPUs both answer through torch.cuda; memory is the smallest GPU's, as the
    memory-tier rules expect."""
    count = torch.cuda.device_count()
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    facts: dict[str, Any] = {
        "platform": platform, "gpu.vendor": VENDOR_OF_PLATFORM[platform], "gpu.count": count,
        "gpu.name": props[0].name, "gpu.mem_gib": round(min(p.total_memory for p in props) / 2**30, 1),
        "interconnect.p2p": count > 1 and all(torch.cuda.can_device_access_peer(i, j)
                                              for i in range(count) for j in range(count) if i != j),
    }
    if platform == "rocm":
        facts["rocm"] = _major_minor(torch.version.hip)
        facts["gpu.gfx"] = props[0].gcnArchName.split(":")[0]
    else:
        major, minor = torch.cuda.get_device_capability(0)
        facts["cuda"] = _major_minor(torch.version.cuda)
        facts["gpu.sm"] = major * 10 + minor
        facts.update(_nvml_facts(count))
    return facts


def _xpu_facts(torch: Any) -> dict[str, Any]:
    count = torch.xpu.device_count()
    props = [torch.xpu.get_device_properties(i) for i in range(count)]
    return {"platform": "xpu", "gpu.vendor": "intel", "gpu.count": count, "gpu.name": props[0].name,
            "gpu.mem_gib": round(min(p.total_memory for p in props) / 2**30, 1)}


def _npu_available(torch: Any) -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    import torch_npu  # noqa: F401  (registers torch.npu)

    return torch.npu.is_available()


def _nvml_facts(count: int) -> dict[str, Any]:
    """NVLink between every GPU pair and multi-node NVLink membership, from NVML (nvidia-ml-py).
    Without NVML both stay unknown: NVLink cannot be told from PCIe through torch alone."""
    try:
        import ctypes

        import pynvml
    except ImportError:
        return {"interconnect.nvlink": _UNKNOWN, "interconnect.mnnvl": _UNKNOWN}
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        nvlink = count > 1 and all(
            pynvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
            == pynvml.NVML_P2P_STATUS_OK for i in range(count) for j in range(count) if i != j)
        facts: dict[str, Any] = {"interconnect.nvlink": nvlink, "interconnect.mnnvl": _UNKNOWN}
        try:
            fabric = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(handles[0], ctypes.byref(fabric))
            uuid = type(fabric).clusterUuid  # read raw: a char-array attribute stops at a zero byte
            cluster = ctypes.string_at(ctypes.addressof(fabric) + uuid.offset, uuid.size)
            facts["interconnect.mnnvl"] = (fabric.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
                                           and any(cluster))
        except Exception:  # drivers before 525 and older bindings have no fabric query
            pass
        pynvml.nvmlShutdown()
        return facts
    except Exception:
        return {"interconnect.nvlink": _UNKNOWN, "interconnect.mnnvl": _UNKNOWN}
