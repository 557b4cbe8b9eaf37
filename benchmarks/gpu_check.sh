#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run: every kernel test module compiled for the GPU (no
# Triton interpreter), then benchmarks/bench_kernels.py (Triton vs torch's fused SDPA and the torch
# reference: times, GB/s, TFLOP/s), benchmarks/profile_decode_step.py (where a decode step's time goes)
# and benchmarks/bench_gpu_engine.py (an 8B-shaped model served
# by `accord serve` vs the weight-read roofline and vs transformers + torch.compile).
#   benchmarks/gpu_check.sh            (PYTHON=... to choose the interpreter; default: .venv, else python3)
#   SKIP_ENGINE=1 benchmarks/gpu_check.sh     (kernels only: the engine benchmark takes minutes)
# Exit status: 0 all passed, 1 a test module or benchmark failed, 2 no CUDA device.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ -n "${PYTHON:-}" ]]; then py="$PYTHON"
elif [[ -x .venv/bin/python ]]; then py=.venv/bin/python
else py=python3
fi

if ! "$py" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device is visible to torch ($py); nothing was checked." >&2
    exit 2
fi
nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader 2>/dev/null || true

status=0
for module in tests/test_kernels_{decode,extend,kv_quant,rmsnorm,compile,rules}.py; do
    echo "== $module"
    env -u TRITON_INTERPRET ACCORD_KERNEL_TESTS=1 "$py" -m pytest -q -p no:cacheprovider "$module" || status=1
done

echo "== benchmarks/bench_kernels.py"
PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" "$py" benchmarks/bench_kernels.py || status=1
echo "== benchmarks/profile_decode_step.py (batch 1, then 64)"
PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" "$py" benchmarks/profile_decode_step.py --batch 1 || status=1
PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" "$py" benchmarks/profile_decode_step.py --batch 64 || status=1
if [[ -z "${SKIP_ENGINE:-}" ]]; then
    echo "== benchmarks/bench_gpu_engine.py"
    PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" "$py" benchmarks/bench_gpu_engine.py || status=1
fi
exit $status
