"""`accord launch --emit k8s`: a LeaderWorkerSet of one pod per node and a Service for the leader.

Why these checks: a deployment file is applied to a cluster Accord never sees, so it must be valid
for the API server (the core objects against Kubernetes' own schemas with kubernetes-validate; the
LeaderWorkerSet against its CRD's schema, vendored from LWS v0.10.0 in
tests/data/lws_v0.10.0_leaderworkerset_schema.json), and every pod must run exactly the command
Accord resolved for its node once Kubernetes has expanded `$(LWS_...)` the way it does.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path

import pytest
import yaml

from accord.resolver.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "differential" / "fixtures" / "models"
DS = str(MODELS / "deepseek-ai" / "DeepSeek-V3")
LWS_SCHEMA = ROOT / "tests" / "data" / "lws_v0.10.0_leaderworkerset_schema.json"
DS_2X8 = ["--facts", "h100", "--model-path", DS, "--tp-size", "16", "--nnodes", "2"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli_main(["launch", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@functools.lru_cache(maxsize=None)
def _emitted(argv: tuple[str, ...]) -> str:
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main(["launch", "--emit", "k8s", *argv]) == 0
    return buf.getvalue()


def emitted(*argv: str) -> list[dict]:
    return list(yaml.safe_load_all(_emitted(tuple(argv))))


@functools.lru_cache(maxsize=None)
def lws_validator():
    jsonschema = pytest.importorskip("jsonschema")
    data = json.loads(LWS_SCHEMA.read_text())
    assert data["release"] == "v0.10.0" and data["crd"] == "leaderworkersets.leaderworkerset.x-k8s.io"
    return jsonschema.Draft7Validator(_closed(copy.deepcopy(data["openAPIV3Schema"])))


def _closed(schema):
    """The schema as the API server applies it to a structural CRD: a field no schema names is
    pruned there, so here it is an error (a misspelt key would otherwise pass unnoticed)."""
    if isinstance(schema, dict):
        for value in schema.values():
            _closed(value)
        if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        for value in schema:
            _closed(value)
    return schema


def k8s_valid(obj: dict) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(obj, "1.30.0", strict=True)


def as_pod(template: dict, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **template.get("metadata", {})},
            "spec": template["spec"]}


def test_lws_validates_against_the_vendored_crd_schema():
    lws, _ = emitted(*DS_2X8)
    errors = sorted(lws_validator().iter_errors(lws), key=str)
    assert not errors, [e.message for e in errors[:5]]


def test_the_crd_check_catches_a_misspelt_field():
    lws, _ = emitted(*DS_2X8)
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["sise"] = 2
    assert list(lws_validator().iter_errors(broken))
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["size"] = "two"
    assert list(lws_validator().iter_errors(broken))


def test_service_and_pod_templates_validate_as_kubernetes_objects():
    lws, service = emitted(*DS_2X8)
    assert service["kind"] == "Service" and service["apiVersion"] == "v1"
    k8s_valid(service)
    template = lws["spec"]["leaderWorkerTemplate"]
    k8s_valid(as_pod(template["leaderTemplate"], "leader"))
    k8s_valid(as_pod(template["workerTemplate"], "worker"))


def test_pods_ask_for_the_nodes_gpus_shared_memory_and_health():
    lws, service = emitted(*DS_2X8)
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        pod = template[role]["spec"]
        (container,) = pod["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 30000}
        assert container["image"] == "lmsysorg/sglang:v0.5.23"
    assert service["spec"]["ports"][0]["port"] == 30000
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
                                           "leaderworkerset.sigs.k8s.io/worker-index": "0"}


def _expand(words: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' expansion of container arguments: $(VAR) from the container's variables, $$ -> $."""
    def one(word: str) -> str:
        return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                      lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), word)
    return [one(w) for w in words]


def test_every_pod_runs_the_command_resolved_for_its_node(capsys):
    lws, _ = emitted(*DS_2X8)
    code, out, err = run(capsys, "--dry-run", "--json", *DS_2X8, "--host", "0.0.0.0",
                         "--dist-init-addr", "HOST:20000")
    assert code == 0, err
    nodes = json.loads(out)["nodes"]
    template = lws["spec"]["leaderWorkerTemplate"]
    for node in nodes:
        role = "leaderTemplate" if node["node_rank"] == 0 else "workerTemplate"
        (container,) = template[role]["spec"]["containers"]
        env = {"LWS_LEADER_ADDRESS": "HOST", "LWS_WORKER_INDEX": str(node["node_rank"])}
        command = _expand(container["command"] + container["args"], env)
        assert command == node["command"]
        assert {e["name"]: e["value"] for e in container.get("env", [])} == node["env"]


def test_words_with_a_dollar_paren_are_escaped_from_kubernetes_expansion(capsys):
    lws, _ = emitted(*DS_2X8, "--served-model-name", "ds$(X)")
    args = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"]
    assert "ds$$(X)" in args and _expand(["ds$$(X)"], {"X": "no"}) == ["ds$(X)"]


def test_same_inputs_same_bytes():
    first = _emitted(tuple(DS_2X8))
    _emitted.cache_clear()
    assert _emitted(tuple(DS_2X8)) == first


def test_one_node_deployment_and_a_typed_port_and_name():
    qwen = str(MODELS / "Qwen" / "Qwen3-8B")
    lws, service = emitted("--facts", "h100", "--model-path", qwen, "--tp-size", "2", "--port", "8080",
                           "--name", "qwen-small", "--image", "example.com/sglang:mine")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 1 and lws["metadata"]["name"] == "qwen-small"
    container = template["leaderTemplate"]["spec"]["containers"][0]
    assert container["image"] == "example.com/sglang:mine"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "--node-rank" not in container["args"] and "--dist-init-addr" not in container["args"]
    assert service["spec"]["ports"][0]["port"] == 8080 and service["metadata"]["name"] == "qwen-small-leader"
    assert not list(lws_validator().iter_errors(lws))


@pytest.mark.parametrize("extra, needle", [
    (["--node-rank", "1"], "gives each its own rank"),
    (["--name", "Bad_Name"], "not a usable deployment name"),
    (["--json"], "--emit prints a deployment file"),
    (["--dist-init-addr", "10.0.0.1"], "is not host:port"),
])
def test_bad_deployment_input_is_one_paragraph_and_exit_2(capsys, extra, needle):
    code, out, err = run(capsys, "--emit", "k8s", *DS_2X8, *extra)
    assert code == 2 and needle in err and "Traceback" not in err and not out


def test_a_typed_rendezvous_port_is_kept_and_its_host_is_the_leaders():
    lws, _ = emitted(*DS_2X8, "--dist-init-addr", "10.9.9.9:23456")
    args = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    assert args[args.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):23456"
