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

A prefill/decode deployment (`render_pd`) is each role's LeaderWorkerSet and leader Service as
above (named <name>-<role>; the prefill leader's Service also serves the bootstrap port, which the
decode servers reach), then the router as a Deployment and Service (<name>-router), its URLs the
roles' leader Services.
"""

from __future__ import annotations

from typing import Any

from accord.resolver.deploy.nodes import command_words
from accord.resolver.deploy.plan import Deployment, image

SHM_VOLUME = "dshm"


def _escape(word: str) -> str:
    return word.replace("$(", "$$(")


def _pod_spec(deployment: Deployment, rank_text: str, image_name: str,
              extra_ports: tuple[tuple[str, int], ...] = ()) -> dict[str, Any]:
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
        "ports": [{"name": "http", "containerPort": deployment.port, "protocol": "TCP"},
                  *({"name": name, "containerPort": port, "protocol": "TCP"} for name, port in extra_ports)],
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


def objects(deployment: Deployment, image_name: str | None = None,
            extra_ports: tuple[tuple[str, int], ...] = ()) -> list[dict[str, Any]]:
    """[LeaderWorkerSet, Service] as plain mappings in the order they are written; `extra_ports`
    ((name, port), ...) are served by the leader alone besides HTTP (a prefill server's bootstrap
    port: node 0 runs the bootstrap server)."""
    spec = deployment.spec
    k8s = spec.deployment["k8s"]
    name = deployment.name
    chosen = image(deployment, image_name)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "accord"}
    template: dict[str, Any] = {
        "size": deployment.nnodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"metadata": {"labels": dict(labels)},
                           "spec": _pod_spec(deployment, "0", chosen, extra_ports)},
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
        "metadata": {"name": leader_service(deployment), "labels": dict(labels)},
        "spec": {
            "selector": {k8s["name_label"]: name, k8s["index_label"]: "0"},
            "ports": [{"name": "http", "port": deployment.port, "targetPort": deployment.port, "protocol": "TCP"},
                      *({"name": name, "port": port, "targetPort": port, "protocol": "TCP"}
                        for name, port in extra_ports)],
        },
    }
    return [lws, service]


def leader_service(deployment: Deployment) -> str:
    """The DNS name of the Service in front of a deployment's leader pod (objects' second object)."""
    return f"{deployment.name}-leader"


def _dump(objs: list[dict[str, Any]]) -> list[str]:
    """Each object as a YAML document, in a fixed key order."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):  # the worker template may be the leader's: write it out twice
            return True

    return [yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100) for obj in objs]


def render(deployment: Deployment, image_name: str | None = None) -> str:
    """The objects as one YAML stream, headed by comments saying what was resolved for it."""
    leader = deployment.leader
    head = [f"# Written by `accord launch --emit k8s` for {deployment.upstream} {deployment.release}: "
            f"{deployment.nnodes} node(s) x {deployment.gpus_per_node} GPU(s), one pod per node.",
            "# Every pod runs the command Accord resolved for its node; only --node-rank differs "
            f"(LWS_WORKER_INDEX). Resolved config hash (node 0): {leader.config.hash[:16]}.",
            f"# Needs LeaderWorkerSet {deployment.spec.deployment['k8s']['lws_release']} or later installed in the cluster."]
    head += [f"# note: {line}" for line in deployment.notes]
    head += [f"# warning: {line}" for line in deployment.warnings()]
    docs = _dump(objects(deployment, image_name))
    return "\n".join(head) + "\n---\n" + "---\n".join(docs)


def router_objects(pd, image_name: str) -> list[dict[str, Any]]:
    """[Deployment, Service] of the router in front of a disaggregated deployment: one pod that
    runs the router with each role's leader Service as that role's URL."""
    from accord.resolver.deploy.disagg import ROUTER, router_command, router_launcher_length

    spec = pd.spec
    router = spec.disaggregation["router"]
    name = f"{pd.name}-{ROUTER}"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "accord"}
    words = [_escape(word) for word in
             router_command(spec, pd.roles, {role: leader_service(dep) for role, dep in pd.roles})]
    launcher = router_launcher_length(spec)
    port = int(router["port"])
    container = {
        "name": router["container"],
        "image": image_name,
        "command": words[:launcher],
        "args": words[launcher:],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": router["health_path"], "port": port},
                           "periodSeconds": 10, "failureThreshold": 3},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"replicas": 1,
                 "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                 "template": {"metadata": {"labels": dict(labels)}, "spec": {"containers": [container]}}},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"selector": {"app.kubernetes.io/name": name},
                 "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]},
    }
    return [deployment, service]


def pd_objects(pd, image_name: str | None = None) -> list[dict[str, Any]]:
    """Every role's [LeaderWorkerSet, Service] (the prefill leader's Service also serves the
    bootstrap port the decode servers reach), then the router's [Deployment, Service]."""
    from accord.resolver.deploy.disagg import bootstrap_port

    first = pd.spec.disaggregation["roles"][0]
    out: list[dict[str, Any]] = []
    for role, dep in pd.roles:
        extra = (("bootstrap", bootstrap_port(pd)),) if role == first else ()
        out += objects(dep, image_name, extra)
    out += router_objects(pd, image(pd.roles[0][1], image_name))
    return out


def render_pd(pd, image_name: str | None = None) -> str:
    """A disaggregated deployment as one YAML stream: each role as `render` writes one launch (its
    own LeaderWorkerSet and leader Service, named <name>-<role>), then the router."""
    from accord.resolver.deploy.disagg import ROUTER

    spec = pd.spec
    first = pd.roles[0][1]
    router = spec.disaggregation["router"]
    head = [f"# Written by `accord launch --emit k8s --prefill ... --decode ...` for {first.upstream} "
            f"{first.release}: a prefill/decode disaggregated deployment, one LeaderWorkerSet per server and "
            f"the router in front of them.",
            f"# Clients send requests to the router: Service {pd.name}-{ROUTER}, port {router['port']}.",
            f"# Needs LeaderWorkerSet {spec.deployment['k8s']['lws_release']} or later installed in the cluster; "
            f"the KV transfer between the servers needs the pods' RDMA devices, which this file does not request.",
            "# Both servers were resolved together: model, page size, KV dtype and transfer backend agree."]
    for role, dep in pd.roles:
        head.append(f"# {role}: {dep.name}, {dep.nnodes} node(s) x {dep.gpus_per_node} GPU(s), resolved config "
                    f"hash (node 0) {dep.leader.config.hash[:16]}")
        head += [f"# {role} note: {line}" for line in dep.notes]
        head += [f"# {role} warning: {line}" for line in dep.warnings()]
    docs = _dump(pd_objects(pd, image_name))
    return "\n".join(head) + "\n---\n" + "---\n".join(docs)
