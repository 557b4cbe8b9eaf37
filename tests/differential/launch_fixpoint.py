"""The launch fixpoint, live: does upstream SGLang 0.5.23, given the command `accord launch` writes,
arrive at Accord's value for every field it decides, on every node of a multi-node launch?

Why a live tool beside launch_score.py: launch_score replays a stored fixture (the emitted commands
and upstream's stored answers); this one asks the oracle now, so it measures the commands the
current rules and emitter write, including every node's command of a multi-node launch (resolved
per node by resolver/deploy/nodes.py) and the issue-38 checks (DeepSeek-V3 on 2x8 H100 at tp 16,
Llama-3.1-70B on 2x8 A100 at tp 8 pp 2, Qwen3-235B on 2x8 H100 at tp 16 ep 16, DeepSeek-R1 on 4x8
H100 at tp 32). Fields are compared as launch_score compares them (its exceptions file applies).

For a command upstream refuses, the command as typed is asked too: "typed ok" marks a command that
upstream accepts as typed but not as Accord wrote it (the emitter's fault, not the user's).

A command that differs only where one of LISTED below says it must (each entry: when it applies,
an expression over Accord's resolved values; the fields or refusal it explains; why, with upstream's
lines) is counted apart as "listed", never as agreeing: the first figure printed is the strict one.

usage: python -m tests.differential.launch_fixpoint [--random N] [--seed S] [--only multi|hand] [--ids]
(default: the hand-picked commands of run_launch and gen_llm, the multi-node checks, no random ones).
Needs the oracle venv (../shared/oracle/setup); minutes, never a test (2-core machine: about 4 minutes
for `--random 300`, 7 for `--random 600 --only multi`, more when the machine is busy). Last measured
(2026-12-06, issue 38): `--random 300 --seed 3838` 317/318 strict (99.7%); `--random 600 --seed 4242
--only multi` 437/438 (99.8%); `--random 300 --seed 777 --only multi` 221/221; `--random 200 --seed
9191` 245/246 (99.6%); each with the listed exceptions 100%; every multi-node command agrees.
"""

from __future__ import annotations

import argparse
import collections
import sys
from typing import Any

from tests.differential import gen_llm, launch_oracle, run_launch
from tests.differential.launch_score import _holds, _model, _plain, exceptions, expected, same

DS, R1 = "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1-0528"
L70, Q235 = "meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen3-235B-A22B"
ADDR = ["--dist-init-addr", "10.0.0.1:20000"]

# (id, preset, argv after --model-path): one entry per launch, every node of it checked.
MULTI = [
    ("m-ds-v3-2x8-h100-tp16", "h100", [DS, "--tp-size", "16", "--nnodes", "2", *ADDR]),
    ("m-llama70b-2x8-a100-tp8-pp2", "a100", [L70, "--tp-size", "8", "--pp-size", "2", "--nnodes", "2", *ADDR]),
    ("m-qwen235b-2x8-h100-tp16-ep16", "h100", [Q235, "--tp-size", "16", "--ep-size", "16", "--nnodes", "2", *ADDR]),
    ("m-ds-r1-4x8-h100-tp32", "h100", [R1, "--tp-size", "32", "--nnodes", "4", *ADDR]),
    ("m-ds-v3-2x8-h100-dpattn", "h100", [DS, "--tp-size", "16", "--nnodes", "2", "--enable-dp-attention",
                                         "--dp-size", "16", *ADDR]),
    ("m-ds-v3-2x8-h200-tp16", "h200", [DS, "--tp-size", "16", "--nnodes", "2", *ADDR]),
    ("m-qwen235b-2x8-h100-pp2", "h100", [Q235, "--tp-size", "8", "--pp-size", "2", "--nnodes", "2", *ADDR]),
]

# This live check's listed exceptions: (name, when, fields, why). `when` is an expression over Accord's
# resolved values (the rule language); `fields` the compared fields it explains ("status": upstream's
# resolution refuses the emitted command). Each is a gap Accord's rules own, named for its owner.
LISTED = [
    ("cutlass-mla-not-an-upstream-choice",
     "attention_backend == 'cutlass_mla' or prefill_attention_backend == 'cutlass_mla' "
     "or decode_attention_backend == 'cutlass_mla'",
     ["attention_backend", "decode_attention_backend", "prefill_attention_backend", "page_size"],
     "cutlass_mla (a seed 000 choice) is not among upstream 0.5.23's --attention-backend choices, so the "
     "command cannot carry it (a launch warning says so) and upstream picks trtllm_mla on SM100 with its "
     "64-token pages; the same case as r2727-0189 in launch_exceptions.yaml, a resolution question for "
     "the lead (accept cutlass_mla for a 0.5.23 launch or not)."),
]


def listed(config, diffs: list[tuple[str, Any, Any]]) -> str | None:
    """The name of the LISTED entry that explains every difference of a command, or None."""
    fields = {field for field, _, _ in diffs}
    for name, when, explains, _ in LISTED:
        if fields <= set(explains) and _holds(when, config):
            return name
    return None


# The two misses issue 38 names, as typed.
MISSES = [
    ("x-dp-attn-dp1", "h100", ["Qwen/Qwen3-30B-A3B", "--tp-size", "2", "--enable-dp-attention"]),
    ("x-gptoss-flashinfer-cutlass", "b200", ["openai/gpt-oss-120b", "--tp-size", "2",
                                             "--moe-runner-backend", "flashinfer_cutlass"]),
]


def cases(which: str | None, random_n: int, seed: int) -> list[dict]:
    out: list[dict] = []
    if which in (None, "multi"):
        out += [{"id": cid, "preset": preset, "accord_facts": [], "argv": ["--model-path", *argv]}
                for cid, preset, argv in MULTI + MISSES]
    if which in (None, "hand"):
        out += [{**c, "id": "l" + c["id"]} for c in run_launch.hand_cases() if c["system"] == "llm"]
        out += [{**c, "id": "g" + c["id"], "accord_facts": []} for c in gen_llm.hand_cases()]
    if random_n:
        out += [{**c, "accord_facts": []} for c in gen_llm.random_cases(random_n, seed)]
    return out


def accord_nodes(case: dict):
    """[(rank, config, launch)] for every node of the case's launch, or (None, reason)."""
    from accord.resolver.api import resolve
    from accord.resolver.commandline.emit import emit
    from accord.resolver.commandline.flagparse import parse_flags
    from accord.resolver.deploy.nodes import node_launches
    from accord.resolver.deploy.spec import load_deploy_spec
    from accord.resolver.errors import AccordError
    from accord.resolver.facts.machine import load_facts

    try:
        _, parsed = parse_flags(gen_llm.accord_argv(case["argv"]), system="llm")
        facts = load_facts(case["preset"], tuple(case.get("accord_facts", ())),
                           model_path=parsed.user.get("model_path"), system="llm")
        config = resolve("llm", parsed.user, facts, parsed.sources, warnings=parsed.warnings)
        spec = load_deploy_spec("llm")
        if int(config.values.get(spec.name("nodes")) or 1) <= 1:
            return [(0, config, emit(config))]
        return [(n.rank, n.config, n.launch)
                for n in node_launches(spec, "llm", parsed.user, facts, parsed.sources, parsed.warnings)]
    except AccordError as err:
        return None, str(err).splitlines()[0]


def compare(config, answer: dict, defaults: dict) -> list[tuple[str, Any, Any]]:
    if answer["status"] != "ok":
        return [("status", f"{answer.get('error_type', '')}: {str(answer.get('error') or answer.get('stderr'))[:300]}", "ok")]
    fields = exceptions()["fields"].get("llm") or {}
    upstream = {**defaults, **answer["resolved"]}
    diffs = []
    for name, value in sorted(expected(config, "llm").items()):
        rule = fields.get(name) or {}
        up, ac = upstream.get(name, "<n/a>"), value
        if isinstance(up, str) and up.startswith("<n/a"):
            continue
        if rule.get("compare") == "skip":
            continue
        if "left_to_upstream" in rule and _plain(ac) in rule["left_to_upstream"]:
            continue
        if "upstream_forces_when" in rule and _holds(rule["upstream_forces_when"], config):
            continue
        if rule.get("compare") == "model":
            up, ac = _model(up), _model(ac)
        if not same(up, ac):
            diffs.append((name, up, _plain(ac)))
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=0)
    parser.add_argument("--seed", type=int, default=3838)
    parser.add_argument("--only", choices=["multi", "hand"])
    parser.add_argument("--ids", action="store_true", help="list every command checked")
    opts = parser.parse_args(argv)
    defaults = run_launch.upstream_defaults("llm")
    asked, configs, typed, rejected = [], {}, {}, {}
    for case in cases(opts.only, opts.random, opts.seed):
        nodes = accord_nodes(case)
        if isinstance(nodes, tuple):
            rejected[case["id"]] = nodes[1]
            continue
        facts = gen_llm.oracle_facts(case["preset"])
        for rank, config, launch in nodes:
            cid = case["id"] if len(nodes) == 1 else f"{case['id']}#node{rank}"
            env = {"env": dict(launch.env)} if launch.env else {}
            asked.append({"id": cid, "argv": run_launch.upstream_args("llm", launch.args), "facts": {**facts, **env}})
            configs[cid] = config
            typed[cid] = {"id": cid, "argv": case["argv"], "facts": facts}
    answers = launch_oracle.run("llm", asked, sorted(defaults))
    results = {cid: compare(configs[cid], answers[cid], defaults) for cid in configs}
    refused = [cid for cid, diffs in results.items() if diffs and diffs[0][0] == "status"]
    typed_ok = {}
    if refused:
        typed_answers = launch_oracle.run("llm", [typed[c] for c in refused], sorted(defaults))
        typed_ok = {cid: typed_answers[cid]["status"] == "ok" for cid in refused}
    agree = sum(1 for diffs in results.values() if not diffs)
    known = {cid: listed(configs[cid], diffs) for cid, diffs in results.items() if diffs}
    known = {cid: name for cid, name in known.items() if name}
    multi = [cid for cid in results if "#node" in cid]
    print(f"launch fixpoint: upstream accepts the emitted command and holds every compared field in "
          f"{agree}/{len(results)} = {100 * agree / max(1, len(results)):.1f}% of the commands "
          f"({len(rejected)} typed commands Accord rejects, not asked)")
    print(f"with the listed exceptions: {agree + len(known)}/{len(results)} = "
          f"{100 * (agree + len(known)) / max(1, len(results)):.1f}% ("
          + (", ".join(f"{n} {name}" for name, n in sorted(collections.Counter(known.values()).items())) or "none")
          + ")")
    if multi:
        magree = sum(1 for cid in multi if not results[cid])
        print(f"multi-node: {magree}/{len(multi)} node commands agree "
              f"({len({cid.split('#')[0] for cid in multi})} launches)")
    for cid, diffs in sorted(results.items()):
        if opts.ids or diffs:
            mark = "ok" if not diffs else f"listed ({known[cid]})" if cid in known else "DIFF"
            extra = f" (typed ok: {typed_ok[cid]})" if cid in typed_ok else ""
            print(f"  {mark} {cid}{extra}")
            for field, up, ac in diffs[:6]:
                print(f"      {field}: upstream={up!r} accord={ac!r}")
    if opts.ids:
        for cid, why in sorted(rejected.items()):
            print(f"  rejected {cid}: {why}")
    return 0 if agree + len(known) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
