"""Shared pieces of the kernel tests and benchmarks: where they run, inputs, tolerances, offline compiles.

Where kernel tests run: each ``tests/test_kernels_*.py`` module runs in a process of its own,
started by ``tests/test_kernels_isolated.py`` (CPU: Triton interpreter) or by
``benchmarks/gpu_check.sh`` (a CUDA GPU). In any other process the module skips itself, because
Triton fixes interpreter-or-GPU when a kernel module is first imported, and because an
out-of-bounds store can crash the interpreter, which must not take a shared test run down with it.

Inputs: :func:`paged_batch` builds a paged KV cache whose pages are shuffled (so indexing through
the block table is really exercised) and whose every slot that no sequence owns holds NaN, as
never-written memory may (so a kernel that reads past a sequence's end returns NaN, which no
comparison accepts).

Tolerances (:data:`TOLERANCES`), kernel output vs the fp32 torch reference, per output dtype:

- float32: 2e-5 absolute and relative (only summation order and exp2 differ);
- float16: 3e-3 (softmax weights rounded to fp16 before P @ V: ~5e-4 each, plus output rounding);
- bfloat16: 2e-2 (the same with an 8-bit mantissa; the interpreter also truncates fp32 -> bf16
  instead of rounding it, one more bf16 step at most).

FP8 KV caches are compared at the tolerance of the query dtype: kernel and reference read the same
FP8 bytes, and FP8 converts exactly to 16- and 32-bit floats.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

TOLERANCES = {
    torch.float32: {"atol": 2e-5, "rtol": 2e-5},
    torch.float16: {"atol": 3e-3, "rtol": 3e-3},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
}

KERNEL_PROCESS_ENV = "ACCORD_KERNEL_TESTS"
"""Set to 1 in the processes where kernel test modules run (see the module docstring)."""

POISON = float("nan")
"""Value of every cache slot no sequence owns."""


def kernel_test_device() -> str:
    """The device this process runs kernel tests on; skips the calling test module elsewhere.

    "cpu" under the Triton interpreter, "cuda" with a GPU and no interpreter.
    """
    if os.environ.get(KERNEL_PROCESS_ENV) != "1":
        import pytest

        pytest.skip("kernel tests run in a process of their own: tests/test_kernels_isolated.py starts "
                    "it (benchmarks/gpu_check.sh on a GPU)", allow_module_level=True)
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


@dataclass
class PagedBatch:
    """A paged KV cache holding a batch of sequences (layout: kernels.paged_kv)."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    k_scale: float
    v_scale: float


def paged_batch(seq_lens: list[int], *, page_size: int, num_kv_heads: int, head_dim: int,
                cache_dtype: torch.dtype, device: str, seed: int = 0, k_scale: float = 1.0,
                v_scale: float = 1.0, spare_pages: int = 2,
                index_dtype: torch.dtype = torch.int32) -> PagedBatch:
    """Random K/V for sequences of ``seq_lens`` tokens in shuffled pages; unowned slots poisoned.

    FP8 caches hold ``value / scale`` of standard-normal values, so dequantized K/V are
    standard-normal whatever the scales.
    """
    from accord.kernels.kv_quant import quantize_reference
    from accord.kernels.paged_kv import FP8_DTYPES

    gen = torch.Generator(device=device).manual_seed(seed)
    pages_per_seq = [-(-n // page_size) for n in seq_lens]
    num_pages = sum(pages_per_seq) + spare_pages
    order = torch.randperm(num_pages, generator=gen, device=device)
    max_pages = max(pages_per_seq + [1])
    # Row entries past a sequence's pages point at random pages: valid ids the kernels never read.
    block_table = torch.randint(0, num_pages, (len(seq_lens), max_pages), generator=gen, device=device)
    owned = torch.zeros(num_pages, page_size, dtype=torch.bool, device=device)
    first = 0
    for b, (n, pages) in enumerate(zip(seq_lens, pages_per_seq)):
        block_table[b, :pages] = order[first:first + pages]
        first += pages
        positions = torch.arange(n, device=device)
        owned[block_table[b, positions // page_size], positions % page_size] = True

    caches = []
    for scale in (k_scale, v_scale):
        values = torch.randn(num_pages, page_size, num_kv_heads, head_dim, generator=gen, device=device)
        if cache_dtype in FP8_DTYPES:
            stored = quantize_reference(values, scale, dtype=cache_dtype)
            poison = quantize_reference(torch.tensor(POISON, device=device), scale, dtype=cache_dtype)
            # Through a byte view: torch has no masked fill for FP8 tensors.
            stored.view(torch.uint8)[~owned] = poison.view(torch.uint8)
        else:
            stored = values.to(cache_dtype)
            stored[~owned] = POISON
        caches.append(stored)
    return PagedBatch(caches[0], caches[1], block_table.to(index_dtype),
                      torch.tensor(seq_lens, dtype=index_dtype, device=device), k_scale, v_scale)


def random_tensor(shape, dtype: torch.dtype, device: str, seed: int, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal values (times ``scale``) in ``dtype``, reproducible from ``seed``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)


def compile_offline(kernel, target, arg_types: dict[str, str], constexprs: dict, num_warps: int = 4,
                    num_stages: int = 2):
    """Compile a Triton kernel for a GPU ``target`` without that GPU (to PTX/cubin or AMDGCN).

    ``arg_types`` names the Triton type of every runtime argument ("*fp16", "fp32", ...), except
    that arguments named ``stride_*`` default to "i32". Pointers and strides get the 16-divisibility
    hint Triton gives them at run time when they are multiples of 16, as real launches have, so
    the compiled code is the code a GPU would run.
    """
    import inspect

    import triton
    from triton.compiler import ASTSource

    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in arg_types:
            signature[name] = arg_types[name]
        elif name.startswith("stride_"):
            signature[name] = "i32"
        else:
            raise ValueError(f"{kernel.__name__}: give the type of argument {name!r}.")
    unknown = sorted((set(arg_types) | set(constexprs)) - set(kernel.arg_names))
    if unknown:
        raise ValueError(f"{kernel.__name__} has no arguments {unknown}.")
    aligned = [i for i, name in enumerate(kernel.arg_names)
               if signature[name].startswith("*") or name.startswith("stride_")]
    if "constants" in inspect.signature(ASTSource).parameters:
        # Triton 3.2 and older: constexprs by name outside the signature, hints as a descriptor.
        from triton.backends.compiler import AttrsDescriptor

        source = ASTSource(kernel, {name: kind for name, kind in signature.items() if kind != "constexpr"},
                           constants=dict(constexprs),
                           attrs=AttrsDescriptor.from_hints({i: 16 for i in aligned}))
    else:
        hints = {(i,): [["tt.divisibility", 16]] for i in aligned}
        source = ASTSource(kernel, signature, constexprs=constexprs, attrs=hints)
    # FP fusion on, as Triton 3.9 launches default to (saying so explicitly silences its warning).
    options = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": True}
    return triton.compile(source, target=target, options=options)
