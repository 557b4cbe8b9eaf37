"""A deployment as Kubernetes objects: a LeaderWorkerSet of N pods (one per node) and a Service for
the leader's HTTP port.

Why LeaderWorkerSet: it starts the N pods of one multi-node server as a group, restarts them as a
group, and tells each pod its index (LWS_WORKER_INDEX) and the leader's DNS name
(LWS_LEADER_ADDRESS); SGLang's own docs deploy multi-node servers with it. Every pod runs the
command Accord resolved for its node: the leader's rank is written as 0, the workers' as the
variable, and the rendezvous host as the leader's address. Kubernetes expands `$(VAR)` in
container arguments, so the words Accord wrote itself have `$(` escaped as `$$(`.

Each pod asks for the node's GPUs, mounts memory-backed shared memory at the path the deploy spec
names (NCCL and upstream's shared-memory transport need more than the container default of 64 MiB) and is ready when
upstream's /health answers (workers serve it too). The YAML is written with a fixed key order and no
timestamps: same inputs, same bytes.
"""

from __future__ import annotations

from typing import Any

from accord.resolver.deploy.nodes import command_words
from accord.resolver.deploy.plan import Deployment, image

SHM_VOLUME = "dshm"


def _escape(word: str) -> str:
    return word.replace("$(", "$$(")


def _pod_spec(deployment: Deployment, rank_text: str, image_name: str) -> dict[str, Any]:
    spec, leader = deployment.spec, deployment.leader
    k8s = spec.deployment["k8s"]
    replace = {}
    if deployment.nnodes > 1:
        replace[spec.name("rank")] = rank_text
    if deployment.init_port is not None:
        replace[spec.name("init_addr")] = f"$({k8s['leader_env']}):{deployment.init_port}"
    words = command_words(leader.launch, replace, _escape)
    launcher = len(leader.launch.launcher)
    container: dict[str, Any] = {
        "name": spec.deployment["container"],
        "image": image_name,
        "command": words[:launcher],
        "args": words[launcher:],
    }
    if leader.launch.env:
        container["env"] = [{"name": k, "value": str(v)} for k, v in sorted(leader.launch.env.items())]
    container.update({
        "ports": [{"name": "http", "containerPort": deployment.port, "protocol": "TCP"}],
        "resources": {"limits": {k8s["gpu_resource"]: str(deployment.gpus_per_node)}},
        "readinessProbe": {
            "httpGet": {"path": spec.deployment["health_path"], "port": deployment.port},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": spec.deployment["shm_path"]}],
    })
    return {"containers": [container],
            "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]}


def objects(deployment: Deployment, image_name: str | None = None) -> list[dict[str, Any]]:
    """[LeaderWorkerSet, Service] as plain mappings in the order they are written."""
    spec = deployment.spec
    k8s = spec.deployment["k8s"]
    name = deployment.name
    chosen = image(deployment, image_name)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "accord"}
    template: dict[str, Any] = {
        "size": deployment.nnodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"metadata": {"labels": dict(labels)},
                           "spec": _pod_spec(deployment, "0", chosen)},
    }
    if deployment.nnodes > 1:
        template["workerTemplate"] = {"metadata": {"labels": dict(labels)},
                                      "spec": _pod_spec(deployment, f"$({k8s['rank_env']})", chosen)}
    else:  # the worker template is required; a group of one pod never starts a worker
        template["workerTemplate"] = template["leaderTemplate"]
    lws = {
        "apiVersion": k8s["lws_api"],
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"replicas": 1, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": template},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{name}-leader", "labels": dict(labels)},
        "spec": {
            "selector": {k8s["name_label"]: name, k8s["index_label"]: "0"},
            "ports": [{"name": "http", "port": deployment.port, "targetPort": deployment.port, "protocol": "TCP"}],
        },
    }
    return [lws, service]


def render(deployment: Deployment, image_name: str | None = None) -> str:
    """The objects as one YAML stream, headed by comments saying what was resolved for it."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):  # the worker template may be the leader's: write it out twice
            return True

    leader = deployment.leader
    head = [f"# Written by `accord launch --emit k8s` for {deployment.upstream} {deployment.release}: "
            f"{deployment.nnodes} node(s) x {deployment.gpus_per_node} GPU(s), one pod per node.",
            "# Every pod runs the command Accord resolved for its node; only --node-rank differs "
            f"(LWS_WORKER_INDEX). Resolved config hash (node 0): {leader.config.hash[:16]}.",
            f"# Needs LeaderWorkerSet {deployment.spec.deployment['k8s']['lws_release']} or later installed in the cluster."]
    head += [f"# note: {line}" for line in deployment.notes]
    head += [f"# warning: {line}" for line in deployment.warnings()]
    docs = [yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
            for obj in objects(deployment, image_name)]
    return "\n".join(head) + "\n---\n" + "---\n".join(docs)
