"""Triton attention kernels vs torch's fused SDPA (flash, cuDNN) and vs their torch references.

    python benchmarks/bench_kernels.py [--dtype float16|bfloat16] [--page-size 16]
    python benchmarks/bench_kernels.py --dry-run      # CPU: tiny shapes, interpreter, one timing each

Cases (issue 28 targets, printed beside each figure, never asserted):
- decode: batch 64, context 4096, head_dim 128, 32 query heads over 4 KV heads (GQA 8:1), the
  default triton_attention_num_kv_splits (8), a paged cache; target: at least as fast as cuDNN SDPA
  on a contiguous cache. The same with an FP8 e4m3 cache where the GPU has it (sm >= 89); target:
  1.6x faster than the 16-bit cache (it reads half the bytes).
- extend: batch 8, 1024 cached prefix tokens + 512 new tokens each, 32 query heads over 8 KV
  heads, head_dim 128, causal from the bottom right (new token i sees the prefix and new tokens
  0..i); target: at least as fast as flash SDPA.

Every line prints the time, the bytes a call must read divided by its time (GB/s: the figure to
hold against the GPU's HBM bandwidth, which decode is bound by) and the attention FLOPs divided by
its time (TFLOP/s: what bounds extend). SDPA runs on the same values gathered into a contiguous
[batch, heads, tokens, head_dim] cache (it has no paged layout) with enable_gqa, one line per
backend; a backend that refuses the shape says so. Each SDPA line also prints the largest absolute
difference from the Triton output, so that the comparison is known to compute the same thing.

Each time is the median of triton.testing.do_bench (warm-up, then repeated runs with the L2 cache
flushed). --dry-run runs everything on CPU with tiny shapes under the Triton interpreter and times
each call once: it checks the script's code paths, and its figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DTYPES = ("float16", "bfloat16")

FULL = {"decode": {"batch": 64, "context": 4096, "head_dim": 128, "q_heads": 32, "kv_heads": 4},
        "extend": {"batch": 8, "prefix": 1024, "new": 512, "head_dim": 128, "q_heads": 32, "kv_heads": 8}}
TINY = {"decode": {"batch": 2, "context": 40, "head_dim": 32, "q_heads": 4, "kv_heads": 2},
        "extend": {"batch": 2, "prefix": 24, "new": 8, "head_dim": 32, "q_heads": 4, "kv_heads": 2}}


class Timer:
    """Median milliseconds of a call: do_bench on a GPU; on CPU (dry run) one timed call."""

    def __init__(self, device: str):
        self.device = device

    def __call__(self, fn) -> float:
        if self.device == "cuda":
            import triton.testing

            return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3


def line(name: str, ms: float, nbytes: float, flops: float, extra: str = "") -> None:
    print(f"  {name:<34} {ms:9.3f} ms  {nbytes / ms / 1e6:8.0f} GB/s  {flops / ms / 1e9:7.1f} TFLOP/s{extra}")


def sdpa_lines(timer: Timer, q, k, v, reference, nbytes: float, flops: float, causal_from: int | None):
    """One line per SDPA backend on contiguous q [B, Hq, M, D], k/v [B, Hkv, N, D].

    ``causal_from``: None for decode (no mask); else the new tokens' causal mask is aligned to the
    bottom right (torch's causal_lower_right), as a cached prefix needs. Returns {backend: ms}.
    """
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mask = None
    if causal_from is not None:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(q.shape[2], k.shape[2])
    times = {}
    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                           ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        def call():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        try:
            with sdpa_kernel([backend]):
                out = call()
                ms = timer(lambda: call())
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0][:90] if str(exc).strip() else type(exc).__name__
            print(f"  {'sdpa ' + label:<34} refused here: {reason}")
            continue
        diff = (out.transpose(1, 2).reshape(reference.shape).float() - reference.float()).abs().max().item()
        times[label] = ms
        line(f"sdpa {label} (contiguous KV)", ms, nbytes, flops, f"   max|diff| {diff:.2e}")
    return times


def contiguous(cache, block_table, tokens: int):
    """[B, H, tokens, D] of the first ``tokens`` tokens of each sequence of a paged cache."""
    from accord.kernels.paged_kv import gather_tokens

    return gather_tokens(cache, block_table)[:, :tokens].transpose(1, 2).contiguous()


def bench_decode(timer: Timer, dtype, page_size: int, cache_dtype, label: str, shape: dict) -> float:
    from accord.kernels.attention import decode_attention
    from accord.kernels.testing import paged_batch, random_tensor

    b, ctx, d, hq, hkv = (shape[k] for k in ("batch", "context", "head_dim", "q_heads", "kv_heads"))
    device = timer.device
    scale = 0.5 if cache_dtype != dtype else 1.0     # FP8 caches hold value / scale
    batch = paged_batch([ctx] * b, page_size=page_size, num_kv_heads=hkv, head_dim=d,
                        cache_dtype=cache_dtype, device=device, seed=0, k_scale=scale, v_scale=scale)
    q = random_tensor((b, hq, d), dtype, device, seed=1)
    args = (q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens)
    options = {"scale": d ** -0.5, "k_scale": batch.k_scale, "v_scale": batch.v_scale}
    nbytes = 2 * b * ctx * hkv * d * batch.k_cache.element_size()
    flops = 4 * b * hq * ctx * d
    print(f"decode B{b} ctx{ctx} d{d} GQA{hq // hkv}:1, {label} (bytes: the KV cache read once)")
    out = decode_attention(*args, num_kv_splits=8, **options)
    triton_ms = timer(lambda: decode_attention(*args, num_kv_splits=8, **options))
    line("triton paged", triton_ms, nbytes, flops)
    line("torch reference", timer(lambda: decode_attention(*args, impl="torch", **options)), nbytes, flops)
    if batch.k_cache.dtype == dtype:   # SDPA takes 16-bit caches only
        k = contiguous(batch.k_cache, batch.block_table, ctx)
        v = contiguous(batch.v_cache, batch.block_table, ctx)
        times = sdpa_lines(timer, q[:, :, None], k, v, out, nbytes, flops, None)
        if "cudnn" in times:
            print(f"  -> triton / cuDNN SDPA time: {triton_ms / times['cudnn']:.2f} (target <= 1.00)")
    return triton_ms


def bench_extend(timer: Timer, dtype, page_size: int, shape: dict) -> None:
    import torch

    from accord.kernels.attention import extend_attention
    from accord.kernels.testing import paged_batch, random_tensor

    b, prefix, new, d, hq, hkv = (shape[k] for k in ("batch", "prefix", "new", "head_dim", "q_heads", "kv_heads"))
    device = timer.device
    total = prefix + new
    batch = paged_batch([total] * b, page_size=page_size, num_kv_heads=hkv, head_dim=d,
                        cache_dtype=dtype, device=device, seed=2)
    extend_lens = torch.full((b,), new, dtype=torch.int32, device=device)
    q = random_tensor((b * new, hq, d), dtype, device, seed=3)
    args = (q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens, extend_lens)
    # Useful FLOPs: new token i attends to prefix + i + 1 keys (QK^T and PV: 2 x 2 x d each).
    flops = 4 * b * hq * d * (new * prefix + new * (new + 1) // 2)
    nbytes = 2 * b * total * hkv * d * batch.k_cache.element_size() + 2 * q.numel() * q.element_size()
    print(f"extend B{b} prefix{prefix}+{new} d{d} GQA{hq // hkv}:1, {str(dtype)[6:]} KV (causal from the bottom right)")
    out = extend_attention(*args, scale=d ** -0.5, max_extend_len=new)
    triton_ms = timer(lambda: extend_attention(*args, scale=d ** -0.5, max_extend_len=new))
    line("triton paged", triton_ms, nbytes, flops)
    line("torch reference", timer(lambda: extend_attention(*args, scale=d ** -0.5, impl="torch")), nbytes, flops)
    k = contiguous(batch.k_cache, batch.block_table, total)
    v = contiguous(batch.v_cache, batch.block_table, total)
    q_sdpa = q.view(b, new, hq, d).transpose(1, 2)
    times = sdpa_lines(timer, q_sdpa, k, v, out.view(b, new, hq, d).reshape(b * new, hq, d), nbytes, flops, prefix)
    if "flash" in times:
        print(f"  -> triton / flash SDPA time: {triton_ms / times['flash']:.2f} (target <= 1.00)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, tiny shapes, Triton interpreter: check the code paths, time nothing real")
    args = parser.parse_args(argv)
    if args.dry_run:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("--dry-run needs TRITON_INTERPRET=1 before triton is imported; run it as a script")
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    dtype = getattr(torch, args.dtype)
    if args.dry_run:
        device, shapes = "cpu", TINY
        print(f"DRY RUN on CPU (Triton interpreter, tiny shapes): figures are meaningless; torch {torch.__version__}")
        sm = 0
    else:
        if not torch.cuda.is_available():
            print("bench_kernels: no CUDA device is visible to torch. The Triton kernels are timed only on "
                  "a GPU (run benchmarks/gpu_check.sh there; --dry-run checks the script on CPU); nothing "
                  "was measured.", file=sys.stderr)
            return 2
        device, shapes = "cuda", FULL
        major, minor = torch.cuda.get_device_capability()
        sm = major * 10 + minor
        print(f"GPU {torch.cuda.get_device_name()} (sm {sm}), torch {torch.__version__}, "
              f"{args.dtype}, page size {args.page_size}")
    timer = Timer(device)
    sixteen = bench_decode(timer, dtype, args.page_size, dtype, f"{args.dtype} KV", shapes["decode"])
    if sm >= 89 or args.dry_run:
        fp8 = bench_decode(timer, dtype, args.page_size, torch.float8_e4m3fn, "fp8_e4m3 KV", shapes["decode"])
        print(f"  -> fp8 / {args.dtype} KV speed-up: {sixteen / fp8:.2f}x (target >= 1.60x)")
    bench_extend(timer, dtype, args.page_size, shapes["extend"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
