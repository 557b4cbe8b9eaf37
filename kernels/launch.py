"""Where a Triton launch from this package can run, and the few launch choices that depend on it.

Triton compiles kernels for CUDA and ROCm GPUs. Without a GPU, a kernel runs only under the Triton
interpreter, which executes it on CPU tensors with numpy. Triton decides between the two when a
kernel is *decorated* (at import time of the module that defines it), so the interpreter must be
switched on with ``TRITON_INTERPRET=1`` before triton is first imported; :data:`INTERPRETER`
records the choice Triton made for this process.

The interpreter computes bf16 dot products wrongly (numpy has no bf16 type), so under the
interpreter bf16 operands are upcast to fp32 before ``tl.dot``; on a GPU they stay bf16.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def _interpreting() -> bool:
    """Whether Triton decorates kernels for its interpreter in this process.

    Triton 3.4 and newer say so in ``triton.knobs``; older releases read TRITON_INTERPRET directly
    when a kernel is decorated, so the environment is the answer there.
    """
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


INTERPRETER: bool = _interpreting()
"""True when this process's Triton kernels run under the CPU interpreter."""

IMPLS = ("triton", "torch")
"""impl="triton" runs the Triton kernels (attention_backend triton); "torch" their torch references
(attention_backend torch_native)."""

_DOT_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


def check_impl(impl: str) -> None:
    """Reject an ``impl`` argument that names neither implementation."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be 'triton' or 'torch' (attention_backend triton or "
                         f"torch_native), got {impl!r}.")


def require_launchable(*tensors: torch.Tensor) -> None:
    """Fail with a clear message when the tensors cannot be handed to a Triton kernel here."""
    devices = sorted({str(t.device) for t in tensors})
    if len(devices) > 1:
        raise ValueError(f"Triton kernel inputs are on different devices ({', '.join(devices)}); "
                         "move them to one device first.")
    device = tensors[0].device
    if device.type == "cpu" and not INTERPRETER:
        raise RuntimeError(
            "Triton kernels cannot run on CPU tensors in this process: Triton compiles for CUDA or "
            "ROCm GPUs, and its CPU interpreter is only used when TRITON_INTERPRET=1 is set before "
            "triton is first imported. Set it at process start, or use impl='torch' "
            "(attention_backend torch_native).")
    if device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"Triton kernels here run on CUDA/ROCm GPUs (or the CPU interpreter), "
                           f"not on {device.type!r} tensors; use impl='torch'.")


def dot_dtype(dtype: torch.dtype) -> tl.dtype:
    """The Triton dtype that ``tl.dot`` operands of a ``dtype`` model are converted to."""
    if dtype not in _DOT_DTYPES:
        raise ValueError(f"attention inputs must be float16, bfloat16 or float32, got {dtype}.")
    if dtype == torch.bfloat16 and INTERPRETER:
        return tl.float32
    return _DOT_DTYPES[dtype]


def dot_precision(compute: tl.dtype) -> str | None:
    """Exact fp32 dot products for fp32 operands (not TF32); the backend default for 16-bit ones."""
    return "ieee" if compute == tl.float32 else None
