"""FP8 KV cache: quantize on write, dequantize on read, in Triton, beside the torch references.

An FP8 KV cache (kv_cache_dtype ``fp8_e4m3`` or ``fp8_e5m2``) stores ``value / scale`` rounded to
the nearest FP8 number (ties to even), saturated at the format's largest finite value (448 for
e4m3, 57344 for e5m2) instead of overflowing to NaN/inf. Reading multiplies back by ``scale``.
Scales are per tensor: one for K and one for V of a layer, read from the quantization_param_path
JSON (:func:`load_kv_scales`) when the resolved config names one, else 1.0 (the resolver warns
about that case).

- :func:`store_kv`: the write path. Scatters new tokens' K and V into their cache slots
  (layout: :mod:`kernels.paged_kv`), quantizing when the cache is FP8 and casting otherwise.
- :func:`quantize` / :func:`dequantize`: the element-wise conversions on their own.
- The attention kernels dequantize on read themselves (:mod:`kernels.attention`).

How kernel and reference compare: both multiply by the same fp32 reciprocal of the scale, saturate,
and round to nearest even, so their FP8 bytes are identical (the kernel rounds in fp32 arithmetic
first, see :func:`_round_to_fp8`); dequantization is exact in fp32, so only the final cast to the
output dtype rounds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import triton
import triton.language as tl

from accord.kernels.launch import check_impl, require_launchable
from accord.kernels.paged_kv import FP8_DTYPES, check_cache, check_index

KV_CACHE_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
"""kv_cache_dtype flag values that store FP8, and the torch dtype each one stores."""

BF16_KV = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
"""kv_cache_dtype flag values that store bf16 whatever the model dtype."""

REQUIREMENTS = {
    "phases": ("prefill", "decode"),
    "platforms": ("cuda", "rocm", "cpu"),
    "kv_cache_dtypes": ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"),
    "min_triton": "3.2",
    "min_cuda_sm": {  # {first Triton release: lowest CUDA capability}, from kernels/capabilities.yaml
        "auto": {"3.2": 80, "3.3": 0},
        "bf16": {"3.2": 80, "3.3": 0},
        "bfloat16": {"3.2": 80, "3.3": 0},
        "fp8_e4m3": {"3.2": 89},
        "fp8_e5m2": {"3.2": 80, "3.3": 0, "3.9": 80},
    },
    "max_cuda_sm": {"3.2": 90, "3.3": None},
}
"""What these kernels need, mirrored by rules/llm/kernels.yaml (keys as in kernels.attention.decode).
Triton 3.2 converts bf16 (a bf16 model's K/V, or bf16 to e5m2) only from sm_80. Quantizing needs
more than reading: from Triton 3.9 on, its fp32 -> e5m2 conversion emits cvt.f16x2.f32, which
ptxas accepts only from sm_80; 3.3 to 3.8 convert in software and build everywhere."""

BLOCK = 1024
"""Elements per program of the element-wise kernels."""


def cache_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The torch dtype a KV pool is allocated with for a resolved kv_cache_dtype value."""
    if kv_cache_dtype == "auto":
        return model_dtype
    if kv_cache_dtype in BF16_KV:
        return BF16_KV[kv_cache_dtype]
    if kv_cache_dtype in KV_CACHE_DTYPES:
        return KV_CACHE_DTYPES[kv_cache_dtype]
    supported = ", ".join(REQUIREMENTS["kv_cache_dtypes"])
    raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} has no kernels here; supported: {supported}.")


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an FP8 dtype: where quantization saturates."""
    return float(torch.finfo(dtype).max)


def fp8_format(dtype: torch.dtype) -> dict:
    """The constexprs :func:`_round_to_fp8` needs for an FP8 dtype."""
    info = torch.finfo(dtype)
    return {"FP8_MAX": float(info.max), "MANTISSA_BITS": round(-math.log2(info.eps)),
            "MIN_EXPONENT": round(math.log2(info.tiny))}


NO_ROUNDING = {"FP8_MAX": 0.0, "MANTISSA_BITS": 0, "MIN_EXPONENT": 0}
"""The FP8 constexprs of a store into a 16-bit cache, where they go unused."""


@triton.jit
def _round_to_fp8(x, FP8_MAX: tl.constexpr, MANTISSA_BITS: tl.constexpr, MIN_EXPONENT: tl.constexpr):
    """Saturate fp32 ``x`` to +-FP8_MAX and round it to the nearest FP8 number, ties to even.

    Done in fp32 arithmetic so that the conversion to FP8 that follows is exact: GPUs would round
    correctly themselves, but the Triton interpreter's software FP8 conversion rounds ties away
    from zero and drops the carry into the exponent (31.1 becomes 16, not 32). One code path then
    gives torch's bytes everywhere.
    """
    magnitude = tl.minimum(tl.abs(x), FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    exponent = ((magnitude.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    # Numbers below the smallest normal FP8 number share its spacing (subnormals).
    exponent = tl.maximum(exponent, MIN_EXPONENT)
    # The FP8 spacing at x is 2^(exponent - MANTISSA_BITS); build it and its inverse bit by bit.
    to_units = ((127 - exponent + MANTISSA_BITS) << 23).to(tl.float32, bitcast=True)
    to_value = ((127 + exponent - MANTISSA_BITS) << 23).to(tl.float32, bitcast=True)
    # Adding and removing 1.5 * 2^23 rounds a number below 2^22 to an integer, ties to even.
    units = (magnitude * to_units + 12582912.0) - 12582912.0
    rounded = units * to_value
    # The sign goes back on last as a bit, so -0.0 and negatives that round to zero stay negative
    # (byte 0x80, as torch writes). Not `-rounded`: Triton 3.7 and older lower float negation to
    # `0.0 - x`, which turns -0.0 into +0.0 in compiled code (the interpreter negates exactly).
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000
    return (rounded.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def _quantize_kernel(x_ptr, y_ptr, n, inv_scale, FP8_MAX: tl.constexpr, MANTISSA_BITS: tl.constexpr,
                     MIN_EXPONENT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32) * inv_scale
    x = _round_to_fp8(x, FP8_MAX, MANTISSA_BITS, MIN_EXPONENT)
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dequantize_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32) * scale
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slots_ptr, k_inv_scale, v_inv_scale,
    stride_k_token, stride_k_head, stride_v_token, stride_v_head,
    stride_kc_page, stride_kc_slot, stride_kc_head,
    stride_vc_page, stride_vc_slot, stride_vc_head,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, QUANTIZE: tl.constexpr,
    FP8_MAX: tl.constexpr, MANTISSA_BITS: tl.constexpr, MIN_EXPONENT: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Write one head of one token's K and V into its cache slot."""
    token = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slots_ptr + token).to(tl.int64)
    if slot >= 0:
        page = slot // PAGE_SIZE
        within = slot % PAGE_SIZE
        offs_d = tl.arange(0, BLOCK_D)
        mask_d = offs_d < HEAD_DIM
        k = tl.load(k_ptr + token * stride_k_token + head * stride_k_head + offs_d, mask=mask_d)
        v = tl.load(v_ptr + token * stride_v_token + head * stride_v_head + offs_d, mask=mask_d)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
        if QUANTIZE:
            k = _round_to_fp8(k * k_inv_scale, FP8_MAX, MANTISSA_BITS, MIN_EXPONENT)
            v = _round_to_fp8(v * v_inv_scale, FP8_MAX, MANTISSA_BITS, MIN_EXPONENT)
        k_row = page * stride_kc_page + within * stride_kc_slot + head * stride_kc_head
        v_row = page * stride_vc_page + within * stride_vc_slot + head * stride_vc_head
        tl.store(k_cache_ptr + k_row + offs_d, k.to(k_cache_ptr.dtype.element_ty), mask=mask_d)
        tl.store(v_cache_ptr + v_row + offs_d, v.to(v_cache_ptr.dtype.element_ty), mask=mask_d)


def quantize(x: torch.Tensor, scale: float = 1.0, *, dtype: torch.dtype,
             impl: str = "triton") -> torch.Tensor:
    """``x / scale`` as FP8 ``dtype`` (saturating, nearest-even); a new contiguous tensor."""
    check_impl(impl)
    _check_fp8(dtype)
    _check_scale(scale)
    if impl == "torch":
        return quantize_reference(x, scale, dtype=dtype)
    require_launchable(x)
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=dtype, device=x.device)
    if x.numel():
        _quantize_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), _inverse(scale),
                                                           **fp8_format(dtype), BLOCK=BLOCK)
    return y


def dequantize(x: torch.Tensor, scale: float = 1.0, *, dtype: torch.dtype = torch.float32,
               impl: str = "triton") -> torch.Tensor:
    """``x * scale`` of an FP8 tensor as ``dtype``; a new contiguous tensor."""
    check_impl(impl)
    _check_fp8(x.dtype)
    _check_scale(scale)
    if impl == "torch":
        return dequantize_reference(x, scale, dtype=dtype)
    require_launchable(x)
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=dtype, device=x.device)
    if x.numel():
        _dequantize_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), float(scale), BLOCK=BLOCK)
    return y


def store_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slots: torch.Tensor, *, k_scale: float = 1.0, v_scale: float = 1.0,
             impl: str = "triton") -> None:
    """Write new tokens' K and V ([num_tokens, num_kv_heads, head_dim]) into cache rows ``slots``.

    ``slots`` holds flat cache rows (:func:`kernels.paged_kv.flat_slots`); a negative slot skips
    its token (padding in a fixed-size batch). FP8 caches are quantized with the scales; other
    caches take the values cast to their dtype and must use scale 1.0.
    """
    check_impl(impl)
    shape = check_cache(k_cache, v_cache)
    check_index("slots", slots, 1)
    for name, values in (("k", k), ("v", v)):
        if values.dim() != 3 or values.shape[1:] != (shape.num_kv_heads, shape.head_dim):
            raise ValueError(f"{name} must be [num_tokens, {shape.num_kv_heads}, {shape.head_dim}] to fit "
                             f"the cache, got {tuple(values.shape)}.")
        if values.shape[0] != slots.shape[0]:
            raise ValueError(f"{name} has {values.shape[0]} tokens but slots has {slots.shape[0]}.")
        if values.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in head_dim (stride(-1) == 1).")
    _check_scale(k_scale)
    _check_scale(v_scale)
    quantized = k_cache.dtype in FP8_DTYPES
    if not quantized and (k_scale != 1.0 or v_scale != 1.0):
        raise ValueError(f"k_scale/v_scale apply to FP8 caches only; this cache is {k_cache.dtype}.")
    if impl == "torch":
        store_kv_reference(k_cache, v_cache, k, v, slots, k_scale=k_scale, v_scale=v_scale)
        return
    require_launchable(k_cache, v_cache, k, v, slots)
    if slots.shape[0] == 0:
        return
    _store_kv_kernel[(slots.shape[0], shape.num_kv_heads)](
        k, v, k_cache, v_cache, slots, _inverse(k_scale), _inverse(v_scale),
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        HEAD_DIM=shape.head_dim, PAGE_SIZE=shape.page_size, QUANTIZE=quantized,
        **(fp8_format(k_cache.dtype) if quantized else NO_ROUNDING),
        BLOCK_D=triton.next_power_of_2(shape.head_dim),
    )


def quantize_reference(x: torch.Tensor, scale: float = 1.0, *, dtype: torch.dtype) -> torch.Tensor:
    """Torch reference of :func:`quantize`."""
    limit = fp8_max(dtype)
    scaled = x.float() * torch.tensor(_inverse(scale), dtype=torch.float32, device=x.device)
    return scaled.clamp(-limit, limit).to(dtype).contiguous()


def dequantize_reference(x: torch.Tensor, scale: float = 1.0, *,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Torch reference of :func:`dequantize`."""
    scaled = x.float() * torch.tensor(float(scale), dtype=torch.float32, device=x.device)
    return scaled.to(dtype).contiguous()


def store_kv_reference(k_cache, v_cache, k, v, slots, *, k_scale=1.0, v_scale=1.0) -> None:
    """Torch reference of :func:`store_kv`."""
    keep = slots >= 0
    rows = slots[keep].long()
    for cache, values, scale in ((k_cache, k, k_scale), (v_cache, v, v_scale)):
        flat = cache.view(-1, cache.shape[2], cache.shape[3])
        if cache.dtype in FP8_DTYPES:
            flat[rows] = quantize_reference(values[keep], scale, dtype=cache.dtype)
        else:
            flat[rows] = values[keep].to(cache.dtype)


def load_kv_scales(path: str | Path, *, tp_rank: int, num_layers: int) -> list[float]:
    """Per-layer KV scales from a quantization_param_path JSON file (one scale for K and V).

    The file is the one SGLang and vLLM read::

        {"kv_cache": {"dtype": "float8_e4m3fn",
                      "scaling_factor": {"<tp_rank>": {"<layer>": <scale>, ...}, ...}}}

    Returns ``num_layers`` positive finite scales for ``tp_rank``; raises ValueError naming the
    file and what is missing or malformed.
    """
    where = f"quantization_param_path {str(path)!r}"
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{where} cannot be read ({exc.strerror}); point it at the KV scales JSON "
                         "file, or leave it unset to use scale 1.0.") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON (line {exc.lineno}: {exc.msg}).") from None
    factors = data.get("kv_cache", {}).get("scaling_factor") if isinstance(data, dict) else None
    if not isinstance(factors, dict):
        raise ValueError(f"{where} has no kv_cache.scaling_factor table; expected "
                         '{"kv_cache": {"scaling_factor": {"<tp_rank>": {"<layer>": scale}}}}.')
    rank = factors.get(str(tp_rank))
    if not isinstance(rank, dict):
        raise ValueError(f"{where} has no scales for TP rank {tp_rank} (ranks present: "
                         f"{', '.join(sorted(factors)) or 'none'}); it must match tp_size.")
    missing = [layer for layer in range(num_layers) if str(layer) not in rank]
    if missing:
        raise ValueError(f"{where} lacks scales for layers {missing[:8]} of TP rank {tp_rank}; the "
                         f"model has {num_layers} layers.")
    scales = []
    for layer in range(num_layers):
        value = rank[str(layer)]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value > 0):
            raise ValueError(f"{where}: scale of layer {layer} (TP rank {tp_rank}) is {value!r}; scales "
                             "must be positive finite numbers.")
        scales.append(float(value))
    return scales


def _inverse(scale: float) -> float:
    """The fp32 reciprocal both kernel and reference multiply by (so their bytes agree)."""
    return float(torch.tensor(1.0 / float(scale), dtype=torch.float32))


def _check_fp8(dtype: torch.dtype) -> None:
    if dtype not in FP8_DTYPES:
        raise ValueError(f"FP8 KV dtypes are {', '.join(str(d) for d in FP8_DTYPES)}; got {dtype}.")


def _check_scale(scale: float) -> None:
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"KV scales must be positive finite numbers, got {scale!r}.")
