"""Runs every kernel test module in a process of its own, and fails with that process's report.

Why separate processes: Triton decides interpreter-or-GPU when a kernel module is first imported,
so the interpreter must be switched on before any import of triton; and an out-of-bounds store can
crash the interpreter, which must not take the shared test run down with it. The modules skip
themselves when collected anywhere else (kernels.testing.kernel_test_device).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

MODULES = {
    # module: how its process runs Triton
    "test_kernels_decode.py": "interpreter",
    "test_kernels_extend.py": "interpreter",
    "test_kernels_kv_quant.py": "interpreter",
    "test_kernels_rmsnorm.py": "interpreter",
    "test_kernels_compile.py": "compiler",   # offline GPU compiles need the real (non-interpreted) JIT
    "test_kernels_rules.py": "compiler",
}


def test_every_kernel_test_module_is_run():
    found = {p.name for p in TESTS.glob("test_kernels_*.py")} - {Path(__file__).name}
    assert found == set(MODULES), "add new kernel test modules to MODULES (or remove stale entries)"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_kernel_module_passes_in_its_own_process(module):
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["ACCORD_KERNEL_TESTS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if MODULES[module] == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS / module)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    report = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, f"{module} failed in its own process (exit {proc.returncode}):\n{report}"
    summary = proc.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary, f"{module} ran no tests or skipped some:\n{report}"
