"""Every kernel compiled offline for real GPU targets, without a GPU (Triton's bundled ptxas / LLVM).

What this protects, on a machine with no GPU:
- each kernel builds for Hopper (sm_90) and MI300 (gfx942), including the bf16 tensor-core path the
  interpreter cannot run, and the shipped attention tiles compile without register spills;
- the lowest CUDA capability each KV-cache dtype needs is exactly what the kernel modules declare
  in REQUIREMENTS["min_cuda_sm"] (which tests/test_kernels_rules.py ties to rules/llm/kernels.yaml).

Runs in its own process without the interpreter (tests/test_kernels_isolated.py). Compiled
kernels land in Triton's cache (~/.triton/cache), so only a first run pays the compile time.
"""

import contextlib
import functools
import io
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from accord.kernels.testing import kernel_test_device

DEVICE = kernel_test_device()

import triton  # noqa: E402  (after the process check)
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from accord.kernels import kv_quant, rmsnorm  # noqa: E402
from accord.kernels.attention import decode, decode_attention, extend  # noqa: E402
from accord.kernels.launch import INTERPRETER  # noqa: E402
from accord.kernels.testing import compile_offline  # noqa: E402

if INTERPRETER:
    pytest.skip("offline compiles need Triton's compiler, not its interpreter: run without "
                "TRITON_INTERPRET", allow_module_level=True)

CUDA_CAPABILITIES = (70, 75, 80, 86, 89, 90)
"""Capabilities searched for each KV dtype's floor: Volta through Hopper."""

SM90 = GPUTarget("cuda", 90, 32)
GFX942 = GPUTarget("hip", "gfx942", 64)

TRITON_TYPE = {"auto": "fp16", "bf16": "bf16", "bfloat16": "bf16", "fp8_e4m3": "fp8e4nv", "fp8_e5m2": "fp8e5"}
"""The element type a KV cache of each kv_cache_dtype value has (auto: an fp16 model)."""

TORCH_FP8 = {"fp8e4nv": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2}

TINY = 16
"""head_dim and tile size of the compiles that only ask "does this dtype build here": dtype support
does not depend on tile sizes, and small tiles compile several times faster."""


def launch(name: str, cache: str = "fp16", model: str = "fp16", head_dim: int = 128) -> tuple:
    """(kernel, argument types, constexprs, num_warps) as the wrapper in kernels/ launches it.

    ``cache`` and ``model`` are Triton element types of the KV cache and of the activations;
    head_dim == TINY shrinks every tile to TINY (one warp) instead of the shipped tile sizes.
    """
    tiny = head_dim == TINY
    warps = 1 if tiny else 4
    compute = {"COMPUTE": {"fp16": tl.float16, "bf16": tl.bfloat16}[model], "DOT_PRECISION": None}
    paged = {"q_ptr": f"*{model}", "k_ptr": f"*{cache}", "v_ptr": f"*{cache}", "block_table_ptr": "*i32",
             "seq_lens_ptr": "*i32", "qk_scale": "fp32", "v_scale": "fp32"}
    rounding = kv_quant.fp8_format(TORCH_FP8[cache]) if cache in TORCH_FP8 else kv_quant.NO_ROUNDING
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
        constexprs = {"HEAD_DIM": head_dim, "PAGE_SIZE": 16, "QUANTIZE": cache in TORCH_FP8, **rounding,
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
        constexprs = {"HIDDEN": 4096, "HAS_RESIDUAL": True, "BLOCK": 4096}
        return rmsnorm._rms_norm_kernel, {**types, "eps": "fp32"}, constexprs, 16
    raise AssertionError(f"no launch described for {name}")


KV_KERNELS = {
    # kernel module: its kernels that read or write the KV cache (the ones a KV dtype can rule out)
    decode: ["decode_split"],
    extend: ["extend"],
    kv_quant: ["store_kv", "quantize", "dequantize"],
}


@functools.lru_cache(maxsize=None)
def compiled(name: str, target: GPUTarget, cache: str = "fp16", model: str = "fp16", head_dim: int = 128):
    kernel, types, constexprs, num_warps = launch(name, cache, model, head_dim)
    return compile_offline(kernel, target, types, constexprs, num_warps=num_warps)


def compiles(name: str, target: GPUTarget, cache: str) -> bool:
    """Whether the kernel builds (small tiles) for the target; refusals Triton prints are muted."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            compiled(name, target, cache, head_dim=TINY)
        return True
    except Exception:  # noqa: BLE001 - a refusal comes as CompilationError, PTXASError or ValueError
        return False


@pytest.mark.parametrize("name, cache, model, head_dim, target", [
    ("decode_split", "fp16", "fp16", 128, SM90),
    ("decode_split", "bf16", "bf16", 128, SM90),
    ("decode_split", "fp8e4nv", "bf16", 128, SM90),
    ("decode_merge", "fp16", "fp16", 128, SM90),
    ("extend", "fp16", "fp16", 128, SM90),
    ("extend", "bf16", "bf16", 256, SM90),
    ("store_kv", "fp8e4nv", "bf16", 128, SM90),
    ("quantize", "fp8e5", "fp16", 128, SM90),
    ("dequantize", "fp8e4nv", "fp16", 128, SM90),
    ("rms_norm", "fp16", "bf16", 128, SM90),
    ("decode_split", "fp16", "fp16", 128, GFX942),
    ("extend", "fp8e4nv", "fp16", 128, GFX942),
], ids=lambda value: value.arch if isinstance(value, GPUTarget) else str(value))
def test_kernel_compiles_for_gpu_targets(name, cache, model, head_dim, target):
    binary = compiled(name, target, cache, model, head_dim)
    assert binary.asm.get("cubin" if target.backend == "cuda" else "hsaco")


def stack_bytes(binary) -> int:
    """Per-thread stack (register spills) of a compiled CUDA kernel, from cuobjdump."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(binary.asm["cubin"])
        usage = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage", str(path)],
                               capture_output=True, text=True, check=True).stdout
    return int(usage.split("STACK:")[1].split()[0])


@pytest.mark.parametrize("name, head_dim", [("decode_split", 128), ("extend", 128), ("extend", 256)])
def test_shipped_attention_tiles_compile_without_register_spills(name, head_dim):
    assert stack_bytes(compiled(name, SM90, "fp16", "fp16", head_dim)) == 0


@pytest.mark.parametrize("module", list(KV_KERNELS), ids=lambda m: m.__name__)
def test_each_kv_dtype_needs_exactly_the_cuda_capability_the_module_declares(module):
    declared = module.REQUIREMENTS["min_cuda_sm"]
    found = {}
    for kv_cache_dtype in module.REQUIREMENTS["kv_cache_dtypes"]:
        cache = TRITON_TYPE[kv_cache_dtype]
        # The lowest capability where every KV kernel of the module builds (searched upwards).
        floor = next((cap for cap in CUDA_CAPABILITIES if all(
            compiles(name, GPUTarget("cuda", cap, 32), cache) for name in KV_KERNELS[module])), None)
        assert floor is not None, f"{module.__name__} does not compile for {kv_cache_dtype} on any capability"
        if floor > CUDA_CAPABILITIES[0]:
            found[kv_cache_dtype] = floor
    assert found == declared


def test_cpu_tensors_are_refused_outside_the_interpreter():
    q = torch.zeros(1, 2, 64, dtype=torch.float16)
    cache = torch.zeros(1, 16, 1, 64, dtype=torch.float16)
    index = torch.zeros(1, 1, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        decode_attention(q, cache, cache, index, index[0], scale=0.125)
