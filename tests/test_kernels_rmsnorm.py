"""Fused residual-add + RMSNorm: the Triton kernel against its torch reference (kernels.rmsnorm).

Runs in its own process (tests/test_kernels_isolated.py). Tolerances per output dtype:
kernels.testing.TOLERANCES.
"""

import pytest
import torch

from accord.kernels.testing import TOLERANCES, kernel_test_device, random_tensor

DEVICE = kernel_test_device()

from accord.kernels.rmsnorm import rms_norm  # noqa: E402  (after the process check)


@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "fused-residual"])
@pytest.mark.parametrize("hidden", [64, 100, 2048])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_matches_reference(dtype, hidden, with_residual):
    x = random_tensor((2, 3, hidden), dtype, DEVICE, seed=1, scale=3.0)
    weight = random_tensor((hidden,), dtype, DEVICE, seed=2)
    residual = random_tensor((2, 3, hidden), dtype, DEVICE, seed=3) if with_residual else None
    out = rms_norm(x, weight, 1e-5, residual)
    ref = rms_norm(x, weight, 1e-5, residual, impl="torch")
    if with_residual:
        (out, new_residual), (ref, ref_residual) = out, ref
        torch.testing.assert_close(new_residual, ref_residual, **TOLERANCES[dtype])
    assert out.shape == x.shape and out.dtype == dtype
    torch.testing.assert_close(out, ref, **TOLERANCES[dtype])


def test_reads_rows_with_a_gap_between_them():
    wide = random_tensor((4, 96), torch.float16, DEVICE, seed=4)
    x = wide[:, :64]                                   # rows 96 apart, 64 wide
    weight = random_tensor((64,), torch.float16, DEVICE, seed=5)
    torch.testing.assert_close(rms_norm(x, weight), rms_norm(x.contiguous(), weight, impl="torch"),
                               **TOLERANCES[torch.float16])


def test_the_residual_output_is_the_plain_sum():
    x = random_tensor((5, 128), torch.float32, DEVICE, seed=6)
    residual = random_tensor((5, 128), torch.float32, DEVICE, seed=7)
    _, new_residual = rms_norm(x, torch.ones(128, device=DEVICE), residual=residual)
    assert torch.equal(new_residual, x + residual)


def test_rejects_a_weight_of_the_wrong_width():
    x = random_tensor((2, 64), torch.float16, DEVICE, seed=1)
    with pytest.raises(ValueError, match=r"weight must be \[64\]"):
        rms_norm(x, torch.ones(32, dtype=torch.float16, device=DEVICE))
