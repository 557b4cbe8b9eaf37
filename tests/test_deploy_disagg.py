"""`accord launch --emit commands --prefill FLAGS --decode FLAGS`: two servers resolved as one
deployment, checked across roles, and the router in front of them.

Why: each server resolves on its own, but a prefill server hands its KV cache to a decode server, so
the model, the page size, the KV dtype and the transfer backend must agree across them, and the RDMA
devices named must exist; upstream checks none of this across servers (resolver/deploy/disagg.py).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shlex
import shutil
import subprocess
import textwrap
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
    (("--emit", "k8s", "--facts", "h100", "--model-path", QWEN, "--prefill", "", "--decode", "",
      "--name", "a-name-of-thirty-three-characters"), "too long for a disaggregated deployment"),
    (("--emit", "slurm", "--facts", "h100", "--model-path", QWEN, "--prefill", "", "--decode", "",
      "--image", "x"), "--image"),
])
def test_bad_input_exit_2(argv, needle):
    code, out, err = launch(*argv)
    assert code == 2 and needle in err and "Traceback" not in err


# ---------------------------------------------------------------- --emit k8s and --emit slurm
#
# The same deployment written for a scheduler: each role's nodes run exactly the command Accord
# resolved for that role's node (checked the way tests/test_deploy_k8s.py and test_deploy_slurm.py
# check one launch), and the router is told each role's node 0 and the prefill bootstrap port.

DS = str(MODELS / "deepseek-ai" / "DeepSeek-V3")
DS_PD = ("--facts", "h100", "--model-path", DS, "--tp-size", "16", "--nnodes", "2")
QWEN_PD = ("--facts", "h100", "--model-path", QWEN)
ROLE_FLAGS = {"prefill": "--tp-size 2", "decode": "--tp-size 4"}


@functools.lru_cache(maxsize=None)
def emitted(kind: str, argv: tuple[str, ...], prefill: str = "", decode: str = "") -> str:
    code, out, err = launch("--emit", kind, *argv, "--prefill", prefill, "--decode", decode)
    assert code == 0, err
    return out


def role_nodes(argv: tuple[str, ...], role: str, flags: str, host: str) -> list[dict]:
    """Every node's command for one role, as `accord launch --dry-run --json` resolves it with the
    role's flags, the mode naming the role and the addresses a scheduler fills in."""
    code, out, err = launch("--dry-run", "--json", *argv, *shlex.split(flags), "--disaggregation-mode", role,
                            "--host", "0.0.0.0", *(["--dist-init-addr", f"{host}:20000"] if "--nnodes" in argv else []))
    assert code == 0, err
    data = json.loads(out)
    return data.get("nodes") or [{"node_rank": 0, "command": data["command"], "env": data["env"]}]


def k8s_objects(argv, prefill="", decode=""):
    import yaml
    return list(yaml.safe_load_all(emitted("k8s", argv, prefill, decode)))


def test_k8s_objects_validate():
    from tests.test_deploy_k8s import as_pod, k8s_valid, lws_validator

    objs = k8s_objects(DS_PD)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert kinds == [("LeaderWorkerSet", "sglang-deepseek-v3-prefill"), ("Service", "sglang-deepseek-v3-prefill-leader"),
                     ("LeaderWorkerSet", "sglang-deepseek-v3-decode"), ("Service", "sglang-deepseek-v3-decode-leader"),
                     ("Deployment", "sglang-deepseek-v3-router"), ("Service", "sglang-deepseek-v3-router")]
    for obj in objs:
        if obj["kind"] == "LeaderWorkerSet":
            errors = sorted(lws_validator().iter_errors(obj), key=str)
            assert not errors, [e.message for e in errors[:5]]
            template = obj["spec"]["leaderWorkerTemplate"]
            k8s_valid(as_pod(template["leaderTemplate"], "leader"))
            k8s_valid(as_pod(template["workerTemplate"], "worker"))
        else:
            k8s_valid(obj)


def test_k8s_every_pod_runs_its_roles_command():
    from tests.test_deploy_k8s import _expand

    objs = {o["metadata"]["name"]: o for o in k8s_objects(QWEN_PD, ROLE_FLAGS["prefill"], ROLE_FLAGS["decode"])}
    objs_multi = {o["metadata"]["name"]: o for o in k8s_objects(DS_PD)}
    for argv, found, flags in ((QWEN_PD, objs, ROLE_FLAGS), (DS_PD, objs_multi, {"prefill": "", "decode": ""})):
        model = "qwen3-8b" if argv is QWEN_PD else "deepseek-v3"
        for role in ("prefill", "decode"):
            lws = found[f"sglang-{model}-{role}"]
            template = lws["spec"]["leaderWorkerTemplate"]
            for node in role_nodes(argv, role, flags[role], "HOST"):
                which = "leaderTemplate" if node["node_rank"] == 0 else "workerTemplate"
                (container,) = template[which]["spec"]["containers"]
                env = {"LWS_LEADER_ADDRESS": "HOST", "LWS_WORKER_INDEX": str(node["node_rank"])}
                assert _expand(container["command"] + container["args"], env) == node["command"]
                assert {e["name"]: e["value"] for e in container.get("env", [])} == node["env"]


def test_k8s_router_reaches_each_roles_leader_service():
    objs = {(o["kind"], o["metadata"]["name"]): o for o in k8s_objects(QWEN_PD, ROLE_FLAGS["prefill"], ROLE_FLAGS["decode"])}
    router = objs[("Deployment", "sglang-qwen3-8b-router")]["spec"]["template"]["spec"]["containers"][0]
    words = router["command"] + router["args"]
    assert words[:4] == ["python3", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    at = words.index("--prefill")
    assert words[at + 1: at + 3] == ["http://sglang-qwen3-8b-prefill-leader:30000", "8998"]
    assert words[words.index("--decode") + 1] == "http://sglang-qwen3-8b-decode-leader:30000"
    assert router["readinessProbe"]["httpGet"] == {"path": "/readiness", "port": 8000}
    # the decode servers reach the prefill leader's bootstrap server through its Service
    ports = {p["name"]: p["port"] for p in objs[("Service", "sglang-qwen3-8b-prefill-leader")]["spec"]["ports"]}
    assert ports == {"http": 30000, "bootstrap": 8998}
    ports = {p["name"]: p["port"] for p in objs[("Service", "sglang-qwen3-8b-decode-leader")]["spec"]["ports"]}
    assert ports == {"http": 30000}
    # each role asks for its own GPUs
    for role, gpus in (("prefill", "2"), ("decode", "4")):
        pod = objs[("LeaderWorkerSet", f"sglang-qwen3-8b-{role}")]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == gpus


def test_k8s_typed_name_and_image():
    import yaml
    code, out, err = launch("--emit", "k8s", *QWEN_PD, "--prefill", "", "--decode", "", "--name", "pd",
                            "--image", "example.com/sglang:mine")
    assert code == 0, err
    objs = list(yaml.safe_load_all(out))
    assert [o["metadata"]["name"] for o in objs] == ["pd-prefill", "pd-prefill-leader", "pd-decode",
                                                     "pd-decode-leader", "pd-router", "pd-router"]
    router = objs[4]["spec"]["template"]["spec"]["containers"][0]
    assert router["image"] == "example.com/sglang:mine"


def test_router_words_parse_with_sglang_routers_own_parser():
    router_args = pytest.importorskip("sglang_router.router_args")
    import argparse
    import yaml
    objs = list(yaml.safe_load_all(emitted("k8s", QWEN_PD)))
    container = objs[4]["spec"]["template"]["spec"]["containers"][0]
    parser = argparse.ArgumentParser()
    router_args.RouterArgs.add_cli_args(parser, use_router_prefix=False)
    args = router_args.RouterArgs.from_cli_args(parser.parse_args(container["args"]), use_router_prefix=False)
    assert args.pd_disaggregation and args.prefill_urls == [("http://sglang-qwen3-8b-prefill-leader:30000", 8998)]
    assert args.decode_urls == ["http://sglang-qwen3-8b-decode-leader:30000"] and args.port == 8000


@pytest.mark.parametrize("argv, flags", [(QWEN_PD, ROLE_FLAGS), (DS_PD, {"prefill": "", "decode": ""})])
def test_slurm_script_parses(tmp_path, argv, flags):
    path = tmp_path / "job.sbatch"
    path.write_text(emitted("slurm", argv, flags["prefill"], flags["decode"]))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


def test_slurm_asks_for_every_roles_nodes():
    lines = emitted("slurm", DS_PD).splitlines()
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8"):
        assert line in lines
    lines = emitted("slurm", QWEN_PD, ROLE_FLAGS["prefill"], ROLE_FLAGS["decode"]).splitlines()
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --gpus-per-node=4" in lines


def _stand_ins(tmp_path: Path, hosts: list[str]) -> dict[str, str]:
    """scontrol (the job's hosts), srun (one task per node, in turn, with the step's task index and
    the nodes it was given recorded) and python3 (records its words and environment per role)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\n[ \"$1 $2\" = 'show hostnames' ] || exit 9\n"
                                      + "".join(f"echo {h}\n" for h in hosts))
    (bin_dir / "srun").write_text(textwrap.dedent("""\
        #!/bin/bash
        n=1; nodes=
        while [ "${1#-}" != "$1" ]; do
          case "$1" in --ntasks=*) n="${1#--ntasks=}";; --nodelist=*) nodes="${1#--nodelist=}";; esac
          shift
        done
        for ((i = 0; i < n; i++)); do SLURM_PROCID=$i SLURM_STEP_NODELIST=$nodes "$@" || exit $?; done
    """))
    (bin_dir / "python3").write_text(textwrap.dedent("""\
        #!/bin/bash
        key=router
        prev=
        for word in "$@"; do
          [ "$prev" = --disaggregation-mode ] && key="$word.$SLURM_PROCID"
          prev=$word
        done
        printf '%s\\0' "$@" > "$RECORD.$key.argv"
        env > "$RECORD.$key.env"
        [ "$key" = router ] || echo "$SLURM_STEP_NODELIST" > "$RECORD.$key.nodes"
    """))
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-a[01-04]",
            "RECORD": str(tmp_path / "rec")}


@pytest.mark.parametrize("argv, flags", [(QWEN_PD, ROLE_FLAGS), (DS_PD, {"prefill": "", "decode": ""})])
def test_slurm_each_task_runs_its_roles_command_and_the_router_finds_them(tmp_path, argv, flags):
    hosts = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"]
    per_role = 2 if "--nnodes" in argv else 1
    path = tmp_path / "job.sbatch"
    path.write_text(emitted("slurm", argv, flags["prefill"], flags["decode"]))
    env = {**os.environ, **_stand_ins(tmp_path, hosts)}
    for name in ("SLURM_NODEID", "SLURM_PROCID"):
        env.pop(name, None)
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    for index, role in enumerate(("prefill", "decode")):
        own = hosts[index * per_role:(index + 1) * per_role]
        for node in role_nodes(argv, role, flags[role], own[0]):
            key = f"{role}.{node['node_rank']}"
            seen = (tmp_path / f"rec.{key}.argv").read_text().split("\0")[:-1]
            assert ["python3", *seen] == node["command"]
            assert (tmp_path / f"rec.{key}.nodes").read_text().strip() == ",".join(own)
            seen_env = dict(line.split("=", 1) for line in (tmp_path / f"rec.{key}.env").read_text().splitlines()
                            if "=" in line)
            for name, value in node["env"].items():
                assert seen_env.get(name) == value
    router = (tmp_path / "rec.router.argv").read_text().split("\0")[:-1]
    assert router[:3] == ["-m", "sglang_router.launch_router", "--pd-disaggregation"]
    at = router.index("--prefill")
    assert router[at + 1: at + 3] == [f"http://{hosts[0]}:30000", "8998"]
    assert router[router.index("--decode") + 1] == f"http://{hosts[per_role]}:30000"


def test_k8s_and_slurm_same_inputs_same_bytes():
    for kind in ("k8s", "slurm"):
        first = emitted(kind, DS_PD)
        emitted.cache_clear()
        assert emitted(kind, DS_PD) == first
