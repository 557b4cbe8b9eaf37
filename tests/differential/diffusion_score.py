"""Score Accord against upstream SGLang on diffusion launches: accept/reject and the fields seed 004 defines.

Why: a differential test needs one definition of "agree" that the fixture-backed test and the
development loop share. This module resolves a case with Accord's public API, compares it with the
oracle's answer (upstream 0.5.23's own resolution for a simulated GPU, kept in a fixture), and names
every field on which the two differ.

Compared: whether the launch is accepted, and when both accept, each field of FIELDS. Four upstream
conventions are read as what they mean rather than compared literally: an unset attention backend
(upstream picks one for the platform when the pipeline loads; Accord names that pick); unset BCG
text buckets (upstream falls back to its default buckets); an unset CFG-parallel switch (left so by
`--cfg-parallel-size 0`; upstream tests its truth everywhere, so it is off); and a layerwise
selection that lists `all` (upstream prepends `dit` to it under --dit-layerwise-offload, seed
L1174-1181; `all` already selects the DiT, so both lists select the same components). The
component-residency fields (RESIDENCY_FIELDS) are compared only when the command sets them: unset,
0.5.23 decides them with its automatic memory policy (`server_args/auto_tune.py`), which seed 004
does not define.

usage:
  python -m tests.differential.diffusion_score oracle CASES.json FIXTURE.json   # ask the oracle, keep answers
  python -m tests.differential.diffusion_score score FIXTURE.json [DISAGREEMENTS.yaml]  # agreement + table
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.errors import AccordError
from accord.resolver.facts.machine import load_facts
from tests.differential.diffusion_gen import localize, materialize

ORACLE_RUN = Path(os.environ.get("ACCORD_ORACLE", "/work/shared/oracle")) / "run"

FIELDS = (
    "num_gpus", "tp_size", "sp_degree", "ulysses_degree", "ring_degree", "enable_cfg_parallel",
    "cfg_parallel_degree", "dp_size", "hsdp_replicate_dim", "hsdp_shard_dim", "attention_backend", "backend",
    "performance_mode", "enable_torch_compile", "enable_breakable_cuda_graph", "bcg_text_buckets",
    "warmup_mode", "warmup_resolutions", "warmup_steps", "disable_autocast", "port", "scheduler_port",
    "master_port", "strict_ports", "host", "quantization", "batching_max_size",
)
RESIDENCY_FIELDS = (
    "dit_cpu_offload", "text_encoder_cpu_offload", "image_encoder_cpu_offload", "vae_cpu_offload",
    "dit_layerwise_offload", "layerwise_offload_components", "use_fsdp_inference", "dit_offload_prefetch_size",
    "pin_cpu_memory",
)
# Accord rules that name the backend the platform picks at load time (upstream leaves it None).
PLATFORM_PICK_RULES = ("attn.default.cuda_fa", "attn.default.sdpa")
DEFAULT_BCG_TEXT_BUCKETS = [64, 128, 256, 512, 1024]   # seed L126-129
EXPLAINED = ("seed wins", "upstream bug", "launch-time truth")


def accord_answer(case: dict, model_root: Path, relax: bool = False) -> dict:
    """Accord's resolution of a case: {"status": "ok", "values", "user", "origin"} or {"status": "error", ...}.

    A conflict also carries "relaxed": the answer `--relax` gives (each conflict's first fix applied),
    which is how Accord reports a value upstream would silently rewrite."""
    try:
        _, parsed = parse_flags(localize(case["argv"], model_root), system="diffusion")
        facts = load_facts(case["preset"], model_path=parsed.user.get("model_path"), system="diffusion")
        config = resolve("diffusion", parsed.user, facts, parsed.sources, relax=relax, warnings=parsed.warnings)
    except AccordError as err:
        rules = sorted({r for c in getattr(err, "conflicts", ()) for r in c.rules})
        answer = {"status": "error", "error_type": type(err).__name__, "rules": rules,
                  "error": str(err).splitlines()[0][:300]}
        if isinstance(err, ConflictError) and not relax:
            answer["relaxed"] = accord_answer(case, model_root, relax=True)
        return answer
    origin = {name: (p.get("rule") or p.get("source")) for name, p in config.provenance.items()}
    return {"status": "ok", "values": dict(config.values), "user": sorted(parsed.user), "origin": origin}


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _selection(components: Any) -> Any:
    """A layerwise selection by what it selects: any list naming `all` selects every component."""
    return ["all"] if isinstance(components, list) and "all" in components else components


def compare(oracle: dict, accord: dict) -> list[str]:
    """The names on which the two answers differ: "status", or the fields both resolved differently.

    A conflict agrees with an upstream that accepted the launch when `--relax` gives exactly
    upstream's answer: Accord reports the value upstream silently rewrites, and the fix is upstream's."""
    if oracle["status"] == "ok" and accord["status"] != "ok" and accord.get("relaxed", {}).get("status") == "ok":
        return ["status"] if compare(oracle, accord["relaxed"]) else []
    if (oracle["status"] == "ok") != (accord["status"] == "ok"):
        return ["status"]
    if oracle["status"] != "ok":
        return []
    up, ours = oracle["resolved"], accord["values"]
    user = set(accord["user"])
    differ = []
    for name in FIELDS + RESIDENCY_FIELDS:
        if name in RESIDENCY_FIELDS and name not in user:
            continue
        mine, theirs = _norm(ours.get(name)), _norm(up.get(name))
        if name == "attention_backend" and theirs is None and accord["origin"].get(name) in PLATFORM_PICK_RULES:
            continue
        if name == "bcg_text_buckets" and theirs is None:
            theirs = DEFAULT_BCG_TEXT_BUCKETS
        if name == "layerwise_offload_components":
            mine, theirs = _selection(mine), _selection(theirs)
        if name == "enable_cfg_parallel" and theirs is None:
            theirs = False   # left unset by --cfg-parallel-size 0; every upstream reader tests its truth
        if mine != theirs:
            differ.append(name)
    return differ


def score(fixture: list[dict]) -> tuple[dict[str, list[str]], list[str]]:
    """({case id: differing names} for the cases that disagree, ids that agree through --relax)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        materialize(root)
        out, relaxed = {}, []
        for case in fixture:
            answer = accord_answer(case, root)
            differ = compare(case["oracle"], answer)
            if differ:
                out[case["id"]] = differ
            elif answer["status"] != "ok" and case["oracle"]["status"] == "ok":
                relaxed.append(case["id"])
    return out, relaxed


def ask_oracle(cases: list[dict]) -> list[dict]:
    """The oracle's answers to the cases, in the fixture's form (harness crashes are dropped)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "cases.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(cases))
        subprocess.run([str(ORACLE_RUN), "diffusion", str(src), str(dst)], check=True)
        answers = json.loads(dst.read_text())
    kept = []
    for case in cases:
        got = answers.get(case["id"], {"status": "harness-crash"})
        if got["status"] == "harness-crash":
            continue
        oracle = {"status": got["status"]}
        if got["status"] == "ok":
            oracle["resolved"] = got["resolved"]
        else:
            oracle["error_type"] = got.get("error_type")
            oracle["error"] = (got.get("error") or "")[:400]
            oracle["raised_at"] = got.get("raised_at") or []
        kept.append({"id": case["id"], "preset": case["preset"], "argv": case["argv"], "oracle": oracle})
    return kept


def load_table(path: Path) -> dict[str, dict]:
    data = yaml.safe_load(path.read_text()) or {}
    return {row["id"]: row for row in data.get("disagreements", [])}


def report(fixture: list[dict], differ: dict[str, list[str]], relaxed: list[str],
           table: dict[str, dict] | None) -> str:
    total = len(fixture)
    agree = total - len(differ)
    lines = [f"diffusion: {agree} of {total} agree ({100.0 * agree / total:.1f}%); "
             f"{len(relaxed)} of them as a reported conflict whose --relax fix is upstream's answer"]
    by_id = {c["id"]: c for c in fixture}
    for case_id, names in sorted(differ.items()):
        row = (table or {}).get(case_id)
        why = f"  [{row['reason']}]" if row else "  [NOT IN TABLE]"
        case = by_id[case_id]
        lines.append(f"  {case_id}: {', '.join(names)}{why}  :: {' '.join(case['argv'])}")
    if table is not None:
        explained = [i for i in differ if (table.get(i) or {}).get("reason") in EXPLAINED]
        lines[0] += (f"; {agree + len(explained)} of {total} ({100.0 * (agree + len(explained)) / total:.1f}%) "
                     f"agree or differ for a listed reason (seed wins, upstream bug, launch-time truth)")
        stale = sorted(set(table) & set(by_id) - set(differ))   # rows of this fixture only
        lines += [f"  {case_id}: in the table but agrees now" for case_id in stale]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["oracle"] and len(argv) == 3:
        cases = json.loads(Path(argv[1]).read_text())
        kept = ask_oracle(cases)
        Path(argv[2]).write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
        print(f"{len(kept)} oracle answers -> {argv[2]}")
        return 0
    if argv[:1] == ["score"] and len(argv) in (2, 3):
        fixture = json.loads(Path(argv[1]).read_text())
        table = load_table(Path(argv[2])) if len(argv) == 3 else None
        print(report(fixture, *score(fixture), table))
        return 0
    print(__doc__.split("usage:")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
