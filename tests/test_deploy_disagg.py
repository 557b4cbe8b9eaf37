"""`accord launch --emit commands --prefill FLAGS --decode FLAGS`: two servers resolved as one
deployment, checked across roles, and the router in front of them.

Why: each server resolves on its own, but a prefill server hands its KV cache to a decode server, so
the model, the page size, the KV dtype and the transfer backend must agree across them, and the RDMA
devices named must exist; upstream checks none of this across servers (resolver/deploy/disagg.py).
"""

from __future__ import annotations

import contextlib
import io
import shlex
from pathlib import Path

import pytest

from accord.resolver.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "differential" / "fixtures" / "models"
QWEN = str(MODELS / "Qwen" / "Qwen3-8B")
COMMON = ("--emit", "commands", "--facts", "h100", "--model-path", QWEN)


def launch(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["launch", *argv])
    return code, out.getvalue(), err.getvalue()


def commands(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in out.splitlines() if line and not line.startswith("#")]


def test_both_roles_and_the_router():
    code, out, err = launch(*COMMON, "--prefill", "--tp-size 2", "--decode", "--tp-size 4")
    assert code == 0, err
    prefill, decode, router = commands(out)
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert decode[decode.index("--disaggregation-mode") + 1] == "decode"
    assert prefill[prefill.index("--tp-size") + 1] == "2" and decode[decode.index("--tp-size") + 1] == "4"
    assert router[:4] == ["python3", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    at = router.index("--prefill")
    assert router[at + 1] == "http://PREFILL_HOST:30000" and router[at + 2] == "8998"
    assert router[router.index("--decode") + 1] == "http://DECODE_HOST:30000"
    assert "# fill in: PREFILL_HOST, DECODE_HOST" in out


def test_same_inputs_same_bytes():
    argv = (*COMMON, "--prefill", "", "--decode", "")
    assert launch(*argv)[1] == launch(*argv)[1]


@pytest.mark.parametrize("prefill, needle", [
    ("--kv-cache-dtype fp8_e4m3", "--kv-cache-dtype resolves to 'fp8_e4m3' for prefill but 'auto' for decode"),
    ("--page-size 64", "--page-size resolves to 64 for prefill"),
    ("--disaggregation-transfer-backend nixl", "--disaggregation-transfer-backend resolves to 'nixl' for prefill"),
    ("--disaggregation-ib-device mlx5_0,mlx5_9", "RDMA device(s) ['mlx5_9']"),
])
def test_roles_that_do_not_fit_together_exit_3(prefill, needle):
    code, out, err = launch(*COMMON, "--prefill", prefill, "--decode", "")
    assert code == 3 and needle in err and not out


def test_devices_the_machine_has_pass():
    code, out, err = launch(*COMMON, "--prefill", "--disaggregation-ib-device mlx5_0,mlx5_1", "--decode", "")
    assert code == 0, err


@pytest.mark.parametrize("argv, needle", [
    ((*COMMON, "--prefill", ""), "needs every role"),
    ((*COMMON, "--prefill", "--disaggregation-mode decode", "--decode", ""), "drop that flag"),
    ((*COMMON, "--prefill", "'unclosed", "--decode", ""), "not a command line"),
    (("--facts", "h100", "--model-path", QWEN, "--prefill", "", "--decode", ""), "add --emit commands"),
    (("--emit", "k8s", "--facts", "h100", "--model-path", QWEN, "--prefill", "", "--decode", ""), "not written yet"),
])
def test_bad_input_exit_2(argv, needle):
    code, out, err = launch(*argv)
    assert code == 2 and needle in err and "Traceback" not in err
