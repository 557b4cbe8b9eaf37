"""`resolve`, `matrix` and `rules` must answer fast and work without torch: keep heavy imports out."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "triton", "numpy", "zmq")


@pytest.mark.parametrize("module", ["accord.resolver.cli", "accord.resolver.api", "accord.resolver.commands.resolve",
                                    "accord.resolver.commands.rules", "accord.resolver.commands.why",
                                    "accord.resolver.commands.launch", "accord.resolver.commandline.emit",
                                    "accord.resolver.commands.tune", "accord.resolver.exploring.tune",
                                    "accord.resolver.exploring.costmodel", "accord.resolver.exploring.measure"])
def test_resolver_modules_do_not_import_engine_dependencies(module):
    code = (f"import sys, {module}; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_full_resolve_does_not_import_engine_dependencies():
    code = ("import sys; from accord.resolver.cli import main; "
            "rc = main(['resolve', '--facts', 'h100', '--json', '--tp', '8']); "
            f"sys.stderr.write(','.join(m for m in {HEAVY!r} if m in sys.modules)); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == ""


def test_a_launch_dry_run_does_not_import_engine_dependencies():
    code = ("import sys; from accord.resolver.cli import main; "
            "rc = main(['launch', '--facts', 'h100', '--dry-run', '--json', '--tp', '8']); "
            f"sys.stderr.write(','.join(m for m in {HEAVY!r} if m in sys.modules)); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == ""
