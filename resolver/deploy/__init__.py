"""Deployments: one resolved launch written for several machines.

`accord launch` starts one process on one machine. A model that does not fit one machine runs as the
same upstream command on every node, differing only in the node's rank; an operator starts those
commands with Kubernetes (LeaderWorkerSet) or Slurm. This package writes them from one resolution,
so every node runs exactly what Accord resolved:

- `spec`: which settings and environment variables a deployment reads (rules/deploy/<system>.yaml);
- `nodes`: the rank of the node a launch runs on, and the per-node launches;
- `k8s`: a LeaderWorkerSet and the Service of its leader, as YAML;
- `slurm`: an sbatch script, one srun task per node;
- `disagg`: prefill and decode servers resolved as one deployment, behind the router (written as
  commands, or by `k8s` and `slurm` like one launch).

Nothing here knows SGLang's flag names: they are read from rules/deploy/.
"""
