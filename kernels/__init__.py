"""Triton kernels the resolved configuration can select, each beside the torch reference it must match.

The LLM engine calls these functions with ``impl="triton"`` for a phase whose resolved backend
(prefill_attention_backend, decode_attention_backend) is ``triton`` and with ``impl="torch"`` for
``torch_native``, passing the resolved triton_attention_* flags (num_kv_splits, tile_size,
reduce_in_fp32) to decode attention.

Modules (each kernel module keeps its Triton kernel, its plain-torch reference and a note on how the
two differ side by side, Triton-tutorial style):

- :mod:`kernels.paged_kv`         the paged KV-cache layout the engine allocates and the kernels read
- :mod:`kernels.attention`        ``decode_attention`` and ``extend_attention`` (public entry points)
- :mod:`kernels.attention.decode` split-KV flash decoding over the paged cache
- :mod:`kernels.attention.extend` causal prefill/extend attention over a cached prefix
- :mod:`kernels.kv_quant`         FP8 KV-cache quantize-on-write and dequantize-on-read
- :mod:`kernels.rmsnorm`          fused residual-add + RMSNorm
- :mod:`kernels.launch`           where a Triton launch can run (GPU, or the CPU interpreter)
- :mod:`kernels.testing`          shared builders and tolerances for the tests and benchmarks

Each kernel module exposes ``REQUIREMENTS``: the platforms, KV-cache dtypes, GPU capability and
flag ranges it needs. ``rules/llm/kernels.yaml`` states the same needs as resolver rules, and
``tests/test_kernels_rules.py`` checks that the two agree.

Importing this package imports nothing; the submodules import torch and triton. On a machine
without a GPU, Triton kernels run only under the Triton interpreter, which must be switched on
(``TRITON_INTERPRET=1``) before triton is first imported.
"""
