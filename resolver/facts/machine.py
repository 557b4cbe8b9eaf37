"""Facts: what is true of the machine (and model) a configuration is resolved for.

Rules never look at the hardware themselves; they read a flat dict with dotted keys (`gpu.sm`,
`packages.flashinfer`, `model.attention`). That dict comes from one of three places: `probe()`
(this machine), a preset in `rules/facts/<name>.yaml` (a machine you do not have), or a facts file
that sets some keys, optionally on top of a preset. Model facts come from the model folder
(`accord.resolver.facts.model`). Explicit facts (file, then `--fact KEY=VALUE`) beat probed or preset ones.

Two kinds of "nothing" are kept apart on purpose:
- an *unknown* fact is absent from the dict; a rule that needs it reports "unknown" instead of
  guessing (a hub model id gives no model facts);
- a *known nothing* is an explicit value: `cuda: null` on a CPU machine, `gpu.count: 0`,
  `interconnect.ib: []`.
Packages are the exception: `packages.<name>` holds the version of an installed kernel library and
is absent when the library is not installed, so rules test `known(packages.flashinfer)`. A null
package value (`--fact packages.flashinfer=none`) removes the package.

Importing this module must stay cheap: torch is imported inside `probe()`, and only when the
machine has a device node an accelerator could sit behind.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import json
import math
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from accord.resolver.errors import UsageError
from accord.resolver.facts.model import model_facts
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files

PRESETS_DIR = RULES_DIR / "facts"
PACKAGE_PREFIX = "packages."

_VERSION = re.compile(r"\d+(\.\d+)*([-+.]?[0-9A-Za-z][0-9A-Za-z.+-]*)?")
_PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Keys a facts file or preset may carry besides facts: what it builds on and where its numbers
# come from. They describe the file; they are not facts.
_FILE_META = ("preset", "description", "sources")


@dataclasses.dataclass(frozen=True)
class FactSpec:
    """The type of one fact. `type` is str | version | int | number | bool | names (list of str)."""

    type: str
    help: str
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    bounds: tuple[float, float] | None = None  # plausible (low, high) of a numeric fact


def _load_schema() -> tuple[dict[str, str | None], dict[str, FactSpec]]:
    """(platform -> vendor, fact key -> FactSpec) from `rules/fact_schema.yaml`: the fact schema is
    data, so a new fact is one entry there, not a code change."""
    (data,), = read_yaml_files([RULES_DIR / "fact_schema.yaml"])
    specs = {key: FactSpec(entry["type"], entry["help"], bool(entry.get("nullable", False)),
                           tuple(entry["choices"]) if "choices" in entry else None,
                           tuple(entry["bounds"]) if "bounds" in entry else None)
             for key, entry in data["facts"].items()}
    return dict(data["platforms"]), specs


VENDOR_OF_PLATFORM, FACT_KEYS = _load_schema()
PLATFORMS = tuple(VENDOR_OF_PLATFORM)

_LARGEST_COUNT = 1 << 40  # no layer, head, expert or token count of a real model comes near this
_TYPE_WORDS = {"str": "a string", "version": "a version string such as \"12.8\"",
               "int": "an integer", "number": "a number", "bool": "true or false",
               "names": "a list of names"}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NULL = ("none", "null")


# --- the schema ---------------------------------------------------------------------------------

def fact_spec(key: str) -> FactSpec | None:
    """The spec of a fact key (`packages.<name>` included), or None when no such fact exists."""
    spec = FACT_KEYS.get(key)
    if spec is None and key.startswith(PACKAGE_PREFIX) and _PACKAGE_NAME.fullmatch(key[len(PACKAGE_PREFIX):]):
        spec = FACT_KEYS[PACKAGE_PREFIX + "*"]
    return spec


def _spec_or_error(key: str, where: str) -> FactSpec:
    spec = fact_spec(key)
    if spec is not None:
        return spec
    import difflib  # error path only

    close = difflib.get_close_matches(key, [k for k in FACT_KEYS if not k.endswith("*")], n=1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    raise UsageError(
        f"{where}: unknown fact {key!r}. {hint}Facts are {', '.join(k for k in FACT_KEYS)} "
        f"(packages.<import name> for installed libraries).")


def type_problem(key: str, value: Any) -> str | None:
    """Why `value` cannot be the fact `key` (a sentence fragment), or None when it can."""
    spec = fact_spec(key)
    if spec is None:
        return f"{key} is not a fact"
    if value is None:
        return None if spec.nullable else f"{key} cannot be null"
    checks = {
        "str": lambda v: isinstance(v, str),
        "version": lambda v: isinstance(v, str) and _VERSION.fullmatch(v) is not None,
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
        "bool": lambda v: isinstance(v, bool),
        "names": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    }
    if not checks[spec.type](value):
        hint = ""
        if spec.type == "version" and isinstance(value, (int, float)):
            hint = f" (quote it: {key}: \"{value}\", or YAML reads it as a number)"
        elif key == "gpu.sm" and isinstance(value, float):
            hint = f" (compute capability {value} is written {round(value * 10)})"
        return f"{key} must be {_TYPE_WORDS[spec.type]}, not {value!r}{hint}"
    if spec.choices and value not in spec.choices:
        return f"{key} must be one of {', '.join(spec.choices)}, not {value!r}"
    if spec.type in ("int", "number"):  # too small is an impossibility, told by `contradictions`
        high = spec.bounds[1] if spec.bounds else _LARGEST_COUNT
        if value > high:
            return f"{key} = {value!r} is not a plausible value (at most {high:g})"
    return None


def parse_fact(item: str) -> tuple[str, Any]:
    """`--fact KEY=VALUE` -> (key, typed value). `none`/`null` is a known nothing where allowed."""
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise UsageError(f"--fact {item!r}: write KEY=VALUE, e.g. --fact gpu.sm=100 or --fact cuda=none.")
    spec = _spec_or_error(key, f"--fact {item}")
    value = _typed(spec, text)
    problem = type_problem(key, value)
    if problem:
        raise UsageError(f"--fact {item}: {problem}.")
    return key, value


def _typed(spec: FactSpec, text: str) -> Any:
    """Turn command-line text into the fact's type; what does not convert stays text and is
    then rejected by `type_problem` with a message that names the expected type."""
    lowered = text.lower()
    if spec.type == "names":
        return [] if lowered in _NULL or not text else [p.strip() for p in text.split(",") if p.strip()]
    if lowered in _NULL:
        return None
    if spec.type == "bool":
        return True if lowered in _TRUE else False if lowered in _FALSE else text
    if spec.type in ("int", "number"):
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)  # for an int fact this keeps 9.0 a float, so the error can say 90
        except ValueError:
            return text
    return text


# --- combining and checking fact sets -----------------------------------------------------------

def _flatten(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Nested mappings to dotted keys: {"gpu": {"sm": 90}} -> {"gpu.sm": 90}; types checked."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            if isinstance(value, Mapping):
                walk(key + ".", value)
                continue
            _spec_or_error(key, where)
            if key in flat:
                raise UsageError(f"{where}: fact {key!r} is set twice (once nested, once dotted); keep one.")
            problem = type_problem(key, value)
            if problem:
                raise UsageError(f"{where}: {problem}.")
            flat[key] = value

    walk("", data)
    return flat


def contradictions(facts: Mapping[str, Any]) -> list[str]:
    """Combinations no real machine has, as sentence fragments (empty when the facts make sense)."""
    problems = []
    for key, value in facts.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            problems.append(f"{key} is {value}, and cannot be negative")
    platform, count = facts.get("platform"), facts.get("gpu.count")
    if platform in VENDOR_OF_PLATFORM and platform not in ("cpu", "mps") and count == 0:
        problems.append(f"platform {platform} needs at least one GPU but gpu.count is 0")
    if platform == "cpu" and isinstance(count, int) and count > 0:
        problems.append(f"platform cpu has no GPUs but gpu.count is {count}")
    if "gpu.vendor" in facts and platform in VENDOR_OF_PLATFORM \
            and facts["gpu.vendor"] != VENDOR_OF_PLATFORM[platform]:
        problems.append(f"gpu.vendor {facts['gpu.vendor']} does not match platform {platform} "
                        f"(expected {VENDOR_OF_PLATFORM[platform] or 'null'})")
    for key, own_platform in (("gpu.sm", "cuda"), ("cuda", "cuda"), ("gpu.gfx", "rocm"), ("rocm", "rocm")):
        if facts.get(key) is not None and platform is not None and platform != own_platform:
            problems.append(f"{key} is {facts[key]} but platform is {platform}, which has none "
                            f"(set {key}=none)")
    if platform == "cuda" and "gpu.sm" in facts and facts["gpu.sm"] is None:
        problems.append("platform cuda needs gpu.sm (the compute capability, e.g. 90)")
    sm = facts.get("gpu.sm")
    if isinstance(sm, int) and not 30 <= sm <= 199:
        problems.append(f"gpu.sm {sm} is not a compute capability written major*10+minor (9.0 is 90)")
    return problems


# --- presets and facts files ---------------------------------------------------------------------

def list_presets() -> list[str]:
    """Names of the simulated machines in rules/facts/, sorted."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def _is_preset(spec: str) -> bool:
    """Whether `spec` is one of `list_presets()`, asked of its one file instead of listing the
    folder (every `load_facts` asks this)."""
    return bool(spec) and "/" not in spec and os.sep not in spec and (PRESETS_DIR / f"{spec}.yaml").exists()


def load_preset(name: str) -> dict[str, Any]:
    """The facts of one preset machine, sorted by key (a fresh dict each call)."""
    return {k: list(v) if isinstance(v, list) else v for k, v in _preset(name).items()}


@lru_cache(maxsize=None)
def _preset(name: str) -> dict[str, Any]:
    path = PRESETS_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise UsageError(_unknown_preset_message(name))
    base, facts = _read_facts_file(path, shipped=True)
    if base is not None:
        raise UsageError(f"{path}: a preset describes a whole machine and cannot build on "
                         f"another (remove 'preset: {base}').")
    return dict(sorted(facts.items()))


def _unknown_preset_message(name: str) -> str:
    import difflib  # error path only

    presets = list_presets()
    close = difflib.get_close_matches(name, presets, n=1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    return (f"unknown facts preset {name!r}. {hint}Give a preset ({', '.join(presets)}), "
            f"a YAML/JSON facts file, or 'probe' for this machine.")


def _read_facts_file(path: Path, shipped: bool = False) -> tuple[str | None, dict[str, Any]]:
    """(the preset it builds on or None, its facts) for a YAML or JSON facts file.

    A `shipped` file (a preset) is parsed through the YAML cache, so a cold start needs no YAML
    parser; anything that cache cannot read as one document is parsed below, with its message."""
    documents = None
    if shipped and path.suffix != ".json":
        try:
            documents = read_yaml_files([path])[0]
        except UsageError:
            documents = None
    if documents is not None and len(documents) <= 1:
        return _facts_from_data(path, documents[0] if documents else None)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read facts file {path}: {err}.") from None
    import yaml  # here, not at the top: a preset or no facts file at all never needs it

    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}, line {err.lineno}: not valid JSON ({err.msg}).") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or "not valid YAML"
        raise UsageError(f"{where}: not valid YAML ({problem}).") from None
    return _facts_from_data(path, data)


def _facts_from_data(path: Path, data: Any) -> tuple[str | None, dict[str, Any]]:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a facts file is a mapping of fact keys to values "
                         f"(e.g. 'preset: h100' and 'gpu.sm: 100'), not a {type(data).__name__}.")
    base = data.get("preset")
    if base is not None and not isinstance(base, str):
        raise UsageError(f"{path}: 'preset' names a preset (e.g. preset: h100), not {base!r}.")
    facts = _flatten({k: v for k, v in data.items() if k not in _FILE_META}, str(path))
    return base, facts


def _base_facts(spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(probed or preset facts, explicit facts) for a `--facts` value."""
    if spec == "probe":
        return probe(), {}
    if _is_preset(spec):
        return load_preset(spec), {}
    path = Path(spec).expanduser()
    if path.is_file():
        base, explicit = _read_facts_file(path)
        if base is None:
            return {}, explicit  # a file without `preset:` is the whole fact set
        return (probe() if base == "probe" else load_preset(base)), explicit
    if path.suffix in (".yaml", ".yml", ".json") or os.sep in spec:
        raise UsageError(f"facts file {spec} does not exist. Give an existing YAML/JSON file, a "
                         f"preset ({', '.join(list_presets())}), or 'probe'.")
    raise UsageError(_unknown_preset_message(spec))


def load_facts(spec: str = "probe", overrides: Sequence[str] = (), model_path: str | None = None,
               system: str = "llm") -> dict[str, Any]:
    """The facts to resolve against, sorted by key.

    Layered, later wins: the machine (probe, a preset, or what a facts file's `preset:` names,
    which may be `probe`), then the model folder's facts, then the facts file's own values, then
    each `--fact KEY=VALUE`. A facts file without `preset:` is the whole machine: nothing is
    probed, so it resolves the same everywhere. Raises
    UsageError for an unknown preset or key, a bad value, or facts no machine could have.
    """
    base, explicit = _base_facts(spec)
    facts = {**base, **model_facts(model_path, system), **explicit}
    facts.update(parse_fact(item) for item in overrides)
    facts = {k: v for k, v in facts.items() if not (k.startswith(PACKAGE_PREFIX) and v is None)}
    problems = contradictions(facts)
    if problems:
        given = f"--facts {spec}" + "".join(f" --fact {o}" for o in overrides)
        raise UsageError(
            f"impossible facts from {given}: {'; '.join(problems)}. Correct the facts file or "
            f"--fact values, or start from a preset that matches the machine "
            f"({', '.join(list_presets())}).")
    return dict(sorted(facts.items()))


# --- probing this machine ------------------------------------------------------------------------

PACKAGES_FILE = RULES_DIR / "packages.yaml"


def known_packages() -> dict[str, list[str]]:
    """Libraries the rules care about, by import name, with the distributions that provide them
    (data: rules/packages.yaml)."""
    (documents,) = read_yaml_files([PACKAGES_FILE])
    return dict(documents[0]["packages"]) if documents else {}


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
