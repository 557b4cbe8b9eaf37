"""Where the kernels build: each kernel compiled offline for each GPU target, per Triton release.

Whether a kernel builds for a GPU depends on the Triton release as much as on the GPU: Triton 3.2
and 3.3 lower the attention kernels' tl.dot only from sm_80 while 3.4 and newer build them from
sm_70; Triton 3.9's fp32 -> e5m2 conversion needs sm_80 where 3.3 to 3.8 convert in software; Triton
3.2's bundled ptxas predates Blackwell and targets no sm_100 or sm_120. None of this needs a GPU to
find out: Triton compiles for any :class:`GPUTarget` with its bundled ptxas (CUDA) or LLVM (ROCm),
so :func:`probe` compiles every kernel of every module for every target of :data:`TARGETS`, once
per KV-cache / model element-type pair, and records where it builds.

- ``benchmarks/kernel_capabilities.py`` runs :func:`probe` under each supported Triton release
  (one virtual environment each) and writes the results to ``kernels/capabilities.yaml``.
- The kernel modules declare their needs in ``REQUIREMENTS`` (``min_cuda_sm`` per KV dtype and
  ``max_cuda_sm``, as steps over Triton releases: :func:`at_release`); tests/test_kernels_compile.py
  checks those declarations against the stored table for every release, and the stored row of the
  installed Triton against fresh compiles at each of its boundaries. rules/llm/kernels.yaml mirrors the declarations for the
  resolver, which reads the machine's ``packages.triton``.

This module imports triton only when it compiles, so the table can be read without it.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from pathlib import Path

import yaml

TABLE_PATH = Path(__file__).with_name("capabilities.yaml")

TARGETS = ("sm70", "sm75", "sm80", "sm86", "sm89", "sm90", "sm100", "sm120", "gfx942")
"""GPU targets probed: NVIDIA Volta through Blackwell (consumer sm120 too), and AMD MI300."""

KV_COMBOS = {
    "auto": ("fp16/fp16", "bf16/bf16"),
    "bf16": ("bf16/bf16", "bf16/fp16"),
    "bfloat16": ("bf16/bf16", "bf16/fp16"),
    "fp8_e4m3": ("fp8e4nv/fp16", "fp8e4nv/bf16"),
    "fp8_e5m2": ("fp8e5/fp16", "fp8e5/bf16"),
}
"""The "cache/model" Triton element types a kv_cache_dtype value is probed with: the KV cache's
type, then the activations' (an fp16 or bf16 model). "auto" caches hold the model's own dtype.
A KV dtype builds for a target when it builds with every model dtype: the conversions differ
(Triton 3.2 turns e4m3 into bf16 through a cvt.bf16.f16 that needs sm_90)."""

COMBOS = tuple(sorted({combo for combos in KV_COMBOS.values() for combo in combos}))

MODULE_KERNELS = {
    # kernel module (under accord.kernels): its kernels; those that touch the KV cache first
    "attention.decode": {"kv": ("decode_split",), "other": ("decode_merge",)},
    "attention.extend": {"kv": ("extend",), "other": ()},
    "kv_quant": {"kv": ("store_kv", "quantize", "dequantize"), "other": ()},
    "rmsnorm": {"kv": (), "other": ("rms_norm",)},
}

TINY = 16
"""head_dim and tile size of capability probes: whether an element type builds does not depend on
tile sizes, and small tiles compile several times faster than the shipped ones."""


def gpu_target(name: str):
    """The Triton GPUTarget of a :data:`TARGETS` name ("sm90" -> cuda 90, "gfx942" -> hip)."""
    from triton.backends.compiler import GPUTarget

    if name.startswith("sm"):
        return GPUTarget("cuda", int(name[2:]), 32)
    return GPUTarget("hip", name, 64)


def launch(name: str, cache: str = "fp16", model: str = "fp16", head_dim: int = 128) -> tuple:
    """(kernel, argument types, constexprs, num_warps) of a kernel as its wrapper launches it.

    ``cache`` and ``model`` are Triton element types of the KV cache and of the activations;
    head_dim == :data:`TINY` shrinks every tile to TINY (one warp) instead of the shipped sizes.
    """
    import torch
    import triton.language as tl

    from accord.kernels import kv_quant, rmsnorm
    from accord.kernels.attention import decode, extend

    torch_fp8 = {"fp8e4nv": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2}
    tiny = head_dim == TINY
    warps = 1 if tiny else 4
    compute = {"COMPUTE": {"fp16": tl.float16, "bf16": tl.bfloat16}[model], "DOT_PRECISION": None}
    paged = {"q_ptr": f"*{model}", "k_ptr": f"*{cache}", "v_ptr": f"*{cache}", "block_table_ptr": "*i32",
             "seq_lens_ptr": "*i32", "qk_scale": "fp32", "v_scale": "fp32"}
    rounding = kv_quant.fp8_format(torch_fp8[cache]) if cache in torch_fp8 else kv_quant.NO_ROUNDING
    block = TINY if tiny else kv_quant.BLOCK

    if name == "decode_split":
        tiles = {"BLOCK_N": TINY, "num_warps": 1} if tiny else decode.LAUNCH_CONFIG
        types = {**paged, "part_out_ptr": f"*{model}", "part_lse_ptr": "*fp32"}
        constexprs = {"GROUP": 8, "HEAD_DIM": head_dim, "PAGE_SIZE": 16, "NUM_SPLITS": 8, "TILE": 1,
                      "BLOCK_H": 16, "BLOCK_N": tiles["BLOCK_N"], "BLOCK_D": head_dim, **compute}
        return decode._decode_split_kernel, types, constexprs, tiles["num_warps"]
    if name == "decode_merge":
        types = {"part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "out_ptr": f"*{model}"}
        constexprs = {"HEAD_DIM": head_dim, "NUM_SPLITS": 8, "BLOCK_S": 8, "BLOCK_D": head_dim}
        return decode._decode_merge_kernel, types, constexprs, warps
    if name == "extend":
        tiles = {"BLOCK_M": TINY, "BLOCK_N": TINY, "num_warps": 1} if tiny else extend.launch_config(head_dim)
        types = {**paged, "out_ptr": f"*{model}", "extend_lens_ptr": "*i32", "q_starts_ptr": "*i64"}
        constexprs = {"GROUP": 8, "HEAD_DIM": head_dim, "PAGE_SIZE": 16, "BLOCK_M": tiles["BLOCK_M"],
                      "BLOCK_N": tiles["BLOCK_N"], "BLOCK_D": head_dim, **compute}
        return extend._extend_kernel, types, constexprs, tiles["num_warps"]
    if name == "store_kv":
        types = {"k_ptr": f"*{model}", "v_ptr": f"*{model}", "k_cache_ptr": f"*{cache}",
                 "v_cache_ptr": f"*{cache}", "slots_ptr": "*i64", "k_inv_scale": "fp32",
                 "v_inv_scale": "fp32"}
        constexprs = {"HEAD_DIM": head_dim, "PAGE_SIZE": 16, "QUANTIZE": cache in torch_fp8, **rounding,
                      "BLOCK_D": head_dim}
        return kv_quant._store_kv_kernel, types, constexprs, warps
    if name == "quantize":
        types = {"x_ptr": f"*{model}", "y_ptr": f"*{cache}", "n": "i32", "inv_scale": "fp32"}
        return kv_quant._quantize_kernel, types, {**rounding, "BLOCK": block}, warps
    if name == "dequantize":
        types = {"x_ptr": f"*{cache}", "y_ptr": f"*{model}", "n": "i32", "scale": "fp32"}
        return kv_quant._dequantize_kernel, types, {"BLOCK": block}, warps
    if name == "rms_norm":
        types = {arg: f"*{model}" for arg in ("x_ptr", "residual_ptr", "weight_ptr", "out_ptr",
                                               "residual_out_ptr")}
        hidden = 256 if tiny else 4096
        constexprs = {"HIDDEN": hidden, "HAS_RESIDUAL": True, "BLOCK": hidden}
        return rmsnorm._rms_norm_kernel, {**types, "eps": "fp32"}, constexprs, 1 if tiny else 16
    raise ValueError(f"no launch described for kernel {name!r}")


def compile_kernel(name: str, target: str, cache: str = "fp16", model: str = "fp16", head_dim: int = 128):
    """The compiled kernel for a :data:`TARGETS` name; raises whatever Triton raises on refusal."""
    from accord.kernels.testing import compile_offline

    kernel, types, constexprs, num_warps = launch(name, cache, model, head_dim)
    return compile_offline(kernel, gpu_target(target), types, constexprs, num_warps=num_warps)


def builds(name: str, target: str, combo: str = "fp16/fp16") -> bool:
    """Whether a kernel builds (tiny tiles) for a target with a "cache/model" element-type pair.

    Triton refuses with CompilationError, a ptxas error, ValueError, or an LLVM abort depending
    on the release and the stage; every refusal counts as "does not build". A refusal is repeated
    before it counts: on a loaded machine a compile sometimes fails for want of resources.
    """
    cache, model = combo.split("/")
    return any(_compiles_alone(name, target, cache, model) == 0 for _ in range(ATTEMPTS))


ATTEMPTS = 3
"""Tries before a kernel counts as not building for a target."""

TIMEOUT_S = 600
"""Longest one offline compile may take before it counts as a failure."""

_NO_ROCM_LINKER = 3
"""A compile child's exit status when Triton lacks the ROCm linker to link AMD code."""


def _compiles_alone(name: str, target: str, cache: str, model: str) -> int:
    """Exit status of a forked child that compiles one kernel: 0 built, else refused (or crashed).

    One compile per child, from a parent that compiles nothing itself, because a Triton process
    remembers its failures: under Triton 3.5 and 3.6, once e4m3 compiles have failed for a GPU, the
    same process refuses e5m2 ones for it that a fresh process builds (the floors a GPU session
    measured in one process were this artefact). A child also contains LLVM aborts (Triton 3.2:
    "Failed to compute parent layout for slice layout"), and a parent without compiler threads can
    fork safely.
    """
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                compile_kernel(name, target, cache, model, head_dim=TINY)
            code = 0
        except BaseException as exc:  # noqa: BLE001 - every refusal means "does not build"
            code = _NO_ROCM_LINKER if "ld.lld" in str(exc) else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return 1
        time.sleep(0.01)


def _import_the_compiler() -> None:
    """Import (not run) Triton's compiler and the kernels here, once, so that each forked compile
    starts with them loaded: four times faster, and importing starts no compiler threads."""
    import triton.compiler.compiler  # noqa: F401

    from accord.kernels import kv_quant, rmsnorm  # noqa: F401
    from accord.kernels.attention import decode, extend  # noqa: F401
    from accord.kernels.testing import compile_offline  # noqa: F401


def unprobeable(target: str) -> str | None:
    """Why this machine cannot compile for a target at all, or None.

    Triton 3.4 and older link AMD code with a ROCm ld.lld they do not bundle; without ROCm here
    nothing can be learnt about AMD targets, which is not the same as "does not build".
    """
    if _compiles_alone("dequantize", target, "fp8e5", "fp16") == _NO_ROCM_LINKER:
        return "this Triton release needs a ROCm installation (ld.lld) to compile for AMD GPUs"
    return None


def probe(targets=TARGETS, modules=tuple(MODULE_KERNELS)) -> dict:
    """What the running Triton builds: {"unprobed": {target: why}, module: {...}}.

    Each module's entry is {"kv": {combo: [targets]}, "other": [targets]}: a module builds for a
    target with a "cache/model" combo when every one of its KV kernels does; its other kernels
    (no KV cache) are probed once, fp16.
    """
    _import_the_compiler()
    unprobed = {target: why for target in targets if (why := unprobeable(target))}
    targets = [target for target in targets if target not in unprobed]
    found = {"unprobed": unprobed}
    for module in modules:
        kernels = MODULE_KERNELS[module]
        entry = {}
        if kernels["kv"]:
            entry["kv"] = {combo: [t for t in targets if all(builds(k, t, combo) for k in kernels["kv"])]
                           for combo in COMBOS}
        entry["other"] = [t for t in targets if all(builds(k, t) for k in kernels["other"])]
        found[module] = entry
    return found


def floors(table_row: dict, module: str) -> dict:
    """{kv_cache_dtype: lowest CUDA capability that builds} for one Triton release's probe row.

    Among the CUDA targets the release can build for at all (:func:`reachable`: a release whose
    ptxas predates a GPU builds nothing for it) and the module's cache-free kernels build for:
    dtypes that build on every one of them are left out (they need nothing), None means none; the
    floor is checked to be a floor: every such target at or above it builds too.
    """
    entry = table_row[module]
    cuda = [t for t in reachable(table_row) if t.startswith("sm") and t in entry["other"]]  # see probe()
    found = {}
    for kv, combos in KV_COMBOS.items():
        ok = [t for t in cuda if all(t in entry["kv"][c] for c in combos)]
        if not ok:
            found[kv] = None
            continue
        lowest = ok[0]
        above = cuda[cuda.index(lowest):]
        if ok != above:
            raise ValueError(f"{module} with {kv} builds for {ok}, not for every target from {lowest} "
                             "up: no single floor describes it.")
        if lowest != cuda[0]:
            found[kv] = int(lowest[2:])
    return found


def load_table(path: Path = TABLE_PATH) -> dict:
    """The stored probe results: {"targets": [...], "triton": {version: probe()}}."""
    return yaml.safe_load(path.read_text())


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a Triton version string: releases differ in what they build, patches not."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def at_release(steps: dict, triton_version: str):
    """The value of {first Triton release: value} steps under a release: each step holds from its
    release until the next one's. A release older than the first step was never probed."""
    have = release(triton_version)
    applicable = sorted((release(since), value) for since, value in steps.items() if release(since) <= have)
    if not applicable:
        raise ValueError(f"Triton {triton_version} is older than {min(steps, key=release)}, the oldest "
                         "release these kernels are probed with.")
    return applicable[-1][1]


def min_cuda_sm(requirements: dict, kv_cache_dtype: str, triton_version: str) -> int:
    """The lowest CUDA capability a module declares for a KV dtype under a Triton release.

    ``requirements["min_cuda_sm"][kv_cache_dtype]`` holds :func:`at_release` steps; a dtype not
    named needs nothing (0).
    """
    steps = requirements.get("min_cuda_sm", {}).get(kv_cache_dtype)
    return 0 if steps is None else at_release(steps, triton_version)


def max_cuda_sm(requirements: dict, triton_version: str) -> int | None:
    """The newest CUDA capability a module builds for under a Triton release (None: every probed
    one). A release whose bundled ptxas predates a GPU generation cannot target it at all."""
    steps = requirements.get("max_cuda_sm")
    return None if steps is None else at_release(steps, triton_version)


def reachable(table_row: dict) -> list[str]:
    """The targets a release builds anything for (in :data:`TARGETS` order)."""
    built = set()
    for module in MODULE_KERNELS:
        entry = table_row[module]
        if MODULE_KERNELS[module]["other"]:   # a module with none "builds" everywhere, vacuously
            built.update(entry["other"])
        for targets in entry.get("kv", {}).values():
            built.update(targets)
    return [t for t in TARGETS if t in built]
