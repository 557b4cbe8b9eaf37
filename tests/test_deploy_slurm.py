"""`accord launch --emit slurm`: an sbatch script, one srun task per node.

Why these checks: the script runs on a cluster Accord never sees, so it must parse (`bash -n`, and
shellcheck where installed), ask Slurm for the nodes and GPUs the launch needs, and start on each node
exactly the command Accord resolved for that node. The last is checked by running the script with
stand-ins for `srun` (one task per node, SLURM_NODEID set), `scontrol` (the job's hosts) and the
launcher (records its arguments and environment).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from accord.resolver.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "differential" / "fixtures" / "models"
DS = str(MODELS / "deepseek-ai" / "DeepSeek-V3")
L70 = str(MODELS / "meta-llama" / "Llama-3.1-70B-Instruct")
DS_2X8 = ("--facts", "h100", "--model-path", DS, "--tp-size", "16", "--nnodes", "2",
          "--context-length", "200000", "--fact", "env.allow_longer_context=true")
L70_2X8 = ("--facts", "a100", "--model-path", L70, "--tp-size", "8", "--pp-size", "2", "--nnodes", "2")


def launch(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["launch", *argv])
    return code, out.getvalue(), err.getvalue()


@functools.lru_cache(maxsize=None)
def script(argv: tuple[str, ...]) -> str:
    code, out, err = launch("--emit", "slurm", *argv)
    assert code == 0, err
    return out


def nodes(argv: tuple[str, ...], host: str) -> list[dict]:
    code, out, err = launch("--dry-run", "--json", *argv, "--host", "0.0.0.0", "--dist-init-addr", f"{host}:20000")
    assert code == 0, err
    return json.loads(out)["nodes"]


@pytest.mark.parametrize("argv", [DS_2X8, L70_2X8])
def test_script_parses(tmp_path, argv):
    path = tmp_path / "job.sbatch"
    path.write_text(script(argv))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


def test_asks_for_the_nodes_and_gpus():
    text = script(DS_2X8)
    assert text.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8"):
        assert line in text.splitlines()
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in text


def _stand_ins(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\n[ \"$1 $2\" = 'show hostnames' ] || exit 9\necho gpu-a01\necho gpu-a02\n")
    (bin_dir / "srun").write_text(textwrap.dedent("""\
        #!/bin/bash
        n=1
        while [ "${1#-}" != "$1" ]; do
          case "$1" in --ntasks=*) n="${1#--ntasks=}";; esac
          shift
        done
        for ((i = 0; i < n; i++)); do SLURM_NODEID=$i "$@" || exit $?; done
    """))
    (bin_dir / "python3").write_text(textwrap.dedent("""\
        #!/bin/bash
        printf '%s\\0' "$@" > "$RECORD.$SLURM_NODEID.argv"
        env > "$RECORD.$SLURM_NODEID.env"
    """))
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-a[01-02]",
            "RECORD": str(tmp_path / "rec")}


@pytest.mark.parametrize("argv", [DS_2X8, L70_2X8])
def test_each_task_runs_the_command_resolved_for_its_node(tmp_path, argv):
    path = tmp_path / "job.sbatch"
    path.write_text(script(argv))
    env = {**os.environ, **_stand_ins(tmp_path)}
    env.pop("SLURM_NODEID", None)
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    for node in nodes(argv, "gpu-a01"):
        rank = node["node_rank"]
        seen = (tmp_path / f"rec.{rank}.argv").read_text().split("\0")[:-1]
        assert ["python3", *seen] == node["command"]
        seen_env = dict(line.split("=", 1) for line in (tmp_path / f"rec.{rank}.env").read_text().splitlines()
                        if "=" in line)
        for name, value in node["env"].items():
            assert seen_env.get(name) == value


def test_the_long_context_variable_is_exported():
    assert "export SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in script(DS_2X8).splitlines()


def test_same_inputs_same_bytes():
    first = script(L70_2X8)
    script.cache_clear()
    assert script(L70_2X8) == first


def test_image_is_refused_outside_kubernetes():
    code, out, err = launch("--emit", "slurm", *L70_2X8, "--image", "x")
    assert code == 2 and "--image" in err and not out
