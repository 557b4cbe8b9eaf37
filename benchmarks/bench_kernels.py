"""Triton attention kernels vs their torch references on a CUDA GPU: times and speed-up ratios.

    python benchmarks/bench_kernels.py [--dtype float16|bfloat16] [--page-size 16]

Cases (issue 7 targets, printed beside each measured ratio, never asserted):
- decode: batch 64, context 4096, head_dim 128, 32 query heads over 4 KV heads (GQA 8:1), with
  the default triton_attention_num_kv_splits (8); target >= 3x the torch reference. The same with
  an FP8 e4m3 cache where the GPU has it (sm >= 89).
- extend: batch 8, 1024 cached prefix tokens + 512 new tokens each, 32 query heads over 8 KV
  heads, head_dim 128; target >= 2x.

Each time is the median of triton.testing.do_bench (warm-up, then repeated runs with the L2 cache
flushed). The decode line also reports the KV-cache bytes the kernel must read per call divided by
its time, for comparison with the GPU's memory bandwidth. Needs a CUDA device: there is nothing
meaningful to time on CPU, where Triton runs interpreted.
"""

from __future__ import annotations

import argparse
import sys

import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def median_ms(fn) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def report(name: str, triton_ms: float, torch_ms: float, target: float, extra: str = "") -> None:
    ratio = torch_ms / triton_ms
    verdict = "meets" if ratio >= target else "BELOW"
    print(f"{name:<44} triton {triton_ms:8.3f} ms   torch {torch_ms:8.3f} ms   "
          f"speed-up {ratio:5.2f}x  ({verdict} target {target:.0f}x){extra}")


def bench_decode(dtype: torch.dtype, page_size: int, cache_dtype: torch.dtype, label: str) -> None:
    from accord.kernels.attention import decode_attention
    from accord.kernels.testing import paged_batch, random_tensor

    batch_size, context, head_dim, q_heads, kv_heads = 64, 4096, 128, 32, 4
    batch = paged_batch([context] * batch_size, page_size=page_size, num_kv_heads=kv_heads, head_dim=head_dim,
                        cache_dtype=cache_dtype, device="cuda", seed=0, k_scale=0.5, v_scale=0.5)
    q = random_tensor((batch_size, q_heads, head_dim), dtype, "cuda", seed=1)
    args = (q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens)
    options = {"scale": head_dim ** -0.5, "k_scale": batch.k_scale, "v_scale": batch.v_scale}
    triton_ms = median_ms(lambda: decode_attention(*args, num_kv_splits=8, **options))
    torch_ms = median_ms(lambda: decode_attention(*args, impl="torch", **options))
    kv_bytes = 2 * batch_size * context * kv_heads * head_dim * batch.k_cache.element_size()
    report(f"decode B{batch_size} ctx{context} d{head_dim} GQA8:1 {label}", triton_ms, torch_ms, 3.0,
           f"   KV read {kv_bytes / triton_ms / 1e6:7.0f} GB/s")


def bench_extend(dtype: torch.dtype, page_size: int) -> None:
    from accord.kernels.attention import extend_attention
    from accord.kernels.testing import paged_batch, random_tensor

    batch_size, prefix, new, head_dim, q_heads, kv_heads = 8, 1024, 512, 128, 32, 8
    batch = paged_batch([prefix + new] * batch_size, page_size=page_size, num_kv_heads=kv_heads,
                        head_dim=head_dim, cache_dtype=dtype, device="cuda", seed=2)
    extend_lens = torch.full((batch_size,), new, dtype=torch.int32, device="cuda")
    q = random_tensor((batch_size * new, q_heads, head_dim), dtype, "cuda", seed=3)
    args = (q, batch.k_cache, batch.v_cache, batch.block_table, batch.seq_lens, extend_lens)
    triton_ms = median_ms(lambda: extend_attention(*args, scale=head_dim ** -0.5, max_extend_len=new))
    torch_ms = median_ms(lambda: extend_attention(*args, scale=head_dim ** -0.5, impl="torch"))
    report(f"extend B{batch_size} prefix{prefix}+{new} d{head_dim} GQA4:1", triton_ms, torch_ms, 2.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float16")
    parser.add_argument("--page-size", type=int, default=16)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_kernels: no CUDA device is visible to torch. The Triton kernels are timed only on "
              "a GPU (run benchmarks/gpu_check.sh there); nothing was measured.", file=sys.stderr)
        return 2
    dtype = DTYPES[args.dtype]
    major, minor = torch.cuda.get_device_capability()
    print(f"GPU {torch.cuda.get_device_name()} (sm {major}{minor}), torch {torch.__version__}, "
          f"{args.dtype}, page size {args.page_size}")
    bench_decode(dtype, args.page_size, dtype, f"{args.dtype} KV")
    if major * 10 + minor >= 89:
        bench_decode(dtype, args.page_size, torch.float8_e4m3fn, "fp8_e4m3 KV")
    bench_extend(dtype, args.page_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
