"""How a resolved configuration selects and parameterises the kernels.

The engine builds one :class:`KernelSettings` from ``ResolvedConfig.values`` and passes its fields
to every kernel call, so the flags the resolver fixed are the ones the kernels run with:

=================================== ==========================================================
resolved flag                       kernel argument
=================================== ==========================================================
attention_backend                   ``impl``: ``triton`` -> "triton", ``torch_native`` -> "torch"
triton_attention_num_kv_splits      ``num_kv_splits`` of decode attention
triton_attention_split_tile_size    ``tile_size`` of decode attention (None: split by count)
triton_attention_reduce_in_fp32     ``reduce_in_fp32`` of decode attention
kv_cache_dtype                      the KV pool dtype (kernels.kv_quant.cache_dtype)
=================================== ==========================================================

Importing this module imports no torch, so configuration code can use it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

BACKEND_IMPLS = {"triton": "triton", "torch_native": "torch"}
"""attention_backend values these kernels serve, and the ``impl`` each one selects."""


@dataclass(frozen=True)
class KernelSettings:
    """The kernel arguments a resolved configuration fixes."""

    impl: str
    num_kv_splits: int
    tile_size: int | None
    reduce_in_fp32: bool
    kv_cache_dtype: str

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "KernelSettings":
        """Read the settings from resolved flag values (``ResolvedConfig.values``)."""
        backend = values.get("attention_backend")
        if backend not in BACKEND_IMPLS:
            raise ValueError(f"attention_backend {backend!r} has no kernels in this engine; resolve with "
                             f"--attention-backend {' or '.join(sorted(BACKEND_IMPLS))}.")
        return cls(
            impl=BACKEND_IMPLS[backend],
            num_kv_splits=values["triton_attention_num_kv_splits"],
            tile_size=values["triton_attention_split_tile_size"],
            reduce_in_fp32=bool(values["triton_attention_reduce_in_fp32"]),
            kv_cache_dtype=values["kv_cache_dtype"],
        )

    def decode_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`kernels.attention.decode_attention` these settings fix."""
        return {"impl": self.impl, "num_kv_splits": self.num_kv_splits, "tile_size": self.tile_size,
                "reduce_in_fp32": self.reduce_in_fp32}
