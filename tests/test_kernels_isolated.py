"""Runs every kernel test module in a process of its own, and fails with that process's report.

Why separate processes: Triton decides interpreter-or-GPU when a kernel module is first imported,
so the interpreter must be switched on before any import of triton; and an out-of-bounds store can
crash the interpreter, which must not take the shared test run down with it. The modules skip
themselves when collected anywhere else (kernels.testing.kernel_test_device).

The selected modules' processes run two at a time (the machines this suite targets have two
cores); each test then reports one module's result.
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PARALLEL = 2

MODULES = {
    # module: how its process runs Triton
    "test_kernels_decode.py": "interpreter",
    "test_kernels_extend.py": "interpreter",
    "test_kernels_kv_quant.py": "interpreter",
    "test_kernels_rmsnorm.py": "interpreter",
    "test_kernels_compile.py": "compiler",   # offline GPU compiles need the real (non-interpreted) JIT
    "test_kernels_rules.py": "compiler",
}


def run_module(module: str, report_dir: Path) -> tuple:
    """(exit status, tests run, tests skipped, output tail) of one module in its own pytest process."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["ACCORD_KERNEL_TESTS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if MODULES[module] == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    report_file = report_dir / f"{module}.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report_file}",
         str(TESTS / module)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    output = proc.stdout[-6000:] + proc.stderr[-3000:]
    if not report_file.exists():
        return proc.returncode, 0, 0, output
    suite = ElementTree.parse(report_file).getroot().find("testsuite")
    return proc.returncode, int(suite.get("tests")), int(suite.get("skipped")), output


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    """Every selected module's result, from processes run PARALLEL at a time."""
    test_name = test_kernel_module_passes_in_its_own_process.__name__
    selected = sorted({item.callspec.params["module"] for item in request.session.items
                       if getattr(item, "originalname", "") == test_name})
    report_dir = tmp_path_factory.mktemp("kernel-reports")
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return dict(zip(selected, pool.map(lambda module: run_module(module, report_dir), selected)))


def test_every_kernel_test_module_is_run():
    found = {p.name for p in TESTS.glob("test_kernels_*.py")} - {Path(__file__).name}
    assert found == set(MODULES), "add new kernel test modules to MODULES (or remove stale entries)"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_kernel_module_passes_in_its_own_process(module, results):
    status, ran, skipped, output = results[module]
    assert status == 0, f"{module} failed in its own process (exit {status}):\n{output}"
    assert ran > 0 and skipped == 0, f"{module} ran {ran} tests and skipped {skipped}:\n{output}"
