"""Fused residual-add + RMSNorm in Triton, beside its torch reference.

A transformer layer ends with ``h = x + residual`` and the next one starts with ``rms_norm(h)``;
unfused that is three passes over the hidden states (add, reduce, scale). The kernel does both in
one pass per row: it reads ``x`` and ``residual`` once, writes the new residual ``h`` and the
normalised output, and keeps ``h`` in fp32 registers in between::

    h   = x + residual                                   (fp32)
    out = h / sqrt(mean(h ** 2) + eps) * weight          (fp32, rounded once to x.dtype)

Without a residual it is plain RMSNorm of ``x``. The new residual is stored in ``x.dtype``; the
norm is computed from the unrounded fp32 ``h``.

How kernel and reference compare: the same fp32 formula; only the order of the squared sum
differs, so results agree to within one rounding of the output dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from accord.kernels.launch import check_impl, require_launchable

REQUIREMENTS = {
    "phases": ("prefill", "decode"),
    "platforms": ("cuda", "rocm", "cpu"),
    "min_triton": "3.2",
    "max_cuda_sm": {"3.2": 90, "3.3": None},
}
"""What this kernel needs, mirrored by rules/llm/kernels.yaml (keys as in kernels.attention.decode)."""

MAX_HIDDEN = 65536
"""Widest row one program normalises (the whole row is held in registers)."""


@triton.jit
def _rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, eps,
                     stride_x, stride_residual, stride_out, stride_residual_out,
                     HIDDEN: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < HIDDEN
    h = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        h += tl.load(residual_ptr + row * stride_residual + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(residual_out_ptr + row * stride_residual_out + offs,
                 h.to(residual_out_ptr.dtype.element_ty), mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, 0) / HIDDEN + eps)
    weight = tl.load(weight_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, (h * rstd * weight).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             residual: torch.Tensor | None = None, *, impl: str = "triton"):
    """RMSNorm over the last dimension, optionally fused with the residual add.

    x: [..., hidden]; weight: [hidden]; residual: like x or None. Returns ``out`` without a
    residual and ``(out, x + residual)`` with one; outputs are new tensors in x's dtype.
    """
    check_impl(impl)
    hidden = x.shape[-1]
    if weight.shape != (hidden,):
        raise ValueError(f"weight must be [{hidden}] to match x's last dimension, got {tuple(weight.shape)}.")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual must match x ({tuple(x.shape)} {x.dtype}), got "
                         f"{tuple(residual.shape)} {residual.dtype}.")
    if impl == "torch":
        return rms_norm_reference(x, weight, eps, residual)
    if hidden > MAX_HIDDEN:
        raise ValueError(f"hidden size {hidden} exceeds {MAX_HIDDEN}, the widest row the Triton "
                         "RMSNorm holds in registers; use impl='torch'.")
    tensors = (x, weight) if residual is None else (x, weight, residual)
    require_launchable(*tensors)
    rows_x = _rows(x)
    out = torch.empty_like(rows_x)
    rows_residual = rows_x if residual is None else _rows(residual)
    residual_out = out if residual is None else torch.empty_like(rows_x)
    if rows_x.shape[0]:
        _rms_norm_kernel[(rows_x.shape[0],)](
            rows_x, rows_residual, weight, out, residual_out, eps,
            rows_x.stride(0), rows_residual.stride(0), out.stride(0), residual_out.stride(0),
            HIDDEN=hidden, HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(hidden),
            num_warps=min(16, max(1, triton.next_power_of_2(hidden) // 256)),
        )
    if residual is None:
        return out.view(x.shape)
    return out.view(x.shape), residual_out.view(x.shape)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                       residual: torch.Tensor | None = None):
    """Torch reference of :func:`rms_norm`."""
    h = x.float() if residual is None else x.float() + residual.float()
    out = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    if residual is None:
        return out
    return out, h.to(x.dtype)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as [rows, hidden] with unit stride along hidden (a copy only when needed)."""
    rows = t.reshape(-1, t.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()
