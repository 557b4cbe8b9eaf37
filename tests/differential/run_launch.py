"""Build the `accord launch` fixture: generate legal commands, write each one's upstream launch with
`accord launch`'s emitter, let upstream SGLang 0.5.23 (the oracle) parse and resolve that command,
and keep upstream's answers as data for tests/test_launch_upstream.py.

Why a fixture: the oracle needs the sglang wheel and minutes; the test suite needs neither. The test
replays Accord on the same commands, checks the emitter still writes the command stored here, and
compares every field upstream decides with Accord's value.

Compact on purpose: for each case only the upstream fields whose resolved value differs from
upstream's parser default are stored (upstream_parser.yaml has the defaults, so nothing is lost),
one case per line, machine facts by preset name. Each case also keeps a digest of Accord's values
(`values_sha`), so the test tells a case whose values moved since (stale: regenerate) from an
emitter that now writes another command for the same values (a failure).

usage: python -m tests.differential.run_launch [--llm N] [--diffusion N] [--seed S] [FIXTURE]
(default: --llm 450 --diffusion 250 --seed 2727 tests/differential/fixtures/launch_oracle.json;
commands Accord rejects are dropped before the oracle sees them). The hand-picked commands:
`python -m tests.differential.run_launch --hand-only tests/differential/fixtures/launch_oracle_hand.json`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from tests.differential import diffusion_gen, gen_llm, launch_oracle

HERE = Path(__file__).resolve().parent
DEFAULT_FIXTURE = HERE / "fixtures" / "launch_oracle.json"
DIFFUSION_MODELS = HERE / "fixtures" / "diffusion_models"


def accord_launch(case: dict):
    """(Accord's config, its upstream Launch) for a generated case, or (None, reason) when Accord
    rejects the command. Model folders are the fixture copies both sides read."""
    from accord.resolver.api import resolve
    from accord.resolver.commandline.emit import emit
    from accord.resolver.commandline.flagparse import parse_flags
    from accord.resolver.errors import AccordError
    from accord.resolver.facts.machine import load_facts

    system = case["system"]
    argv = gen_llm.accord_argv(case["argv"]) if system == "llm" else diffusion_gen.localize(case["argv"], DIFFUSION_MODELS)
    try:
        _, parsed = parse_flags(argv, system=system)
        facts = load_facts(case["preset"], tuple(case.get("accord_facts", ())),
                           model_path=parsed.user.get("model_path"), system=system)
        config = resolve(system, parsed.user, facts, parsed.sources, warnings=parsed.warnings)
    except AccordError as err:
        return None, str(err).splitlines()[0]
    return config, emit(config)


ROOT = HERE.parents[1]


def values_digest(config) -> str:
    """A digest of Accord's resolved values, paths inside this checkout written relative to it (so
    every checkout agrees): tells a case whose values moved (stale) from one whose values are the
    same but whose emitted command changed (the emitter changed)."""
    import hashlib

    from accord.resolver.frozen import thaw

    def plain(value):
        if isinstance(value, str) and value.startswith(str(ROOT) + "/"):
            return value[len(str(ROOT)) + 1:]
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    values = {k: plain(v) for k, v in thaw(dict(config.values)).items()}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def upstream_args(system: str, args: list[str]) -> list[str]:
    """The emitted words with the fixture's model folders named by hub id again, which the oracle
    maps to its own copies of the same folders."""
    out = []
    for word in args:
        path = Path(word)
        if system == "llm" and path.is_absolute() and gen_llm.ORACLE_MODELS in path.parents:
            word = str(path.relative_to(gen_llm.ORACLE_MODELS))
        elif system == "diffusion" and path.is_absolute() and DIFFUSION_MODELS in path.parents:
            rel = path.relative_to(DIFFUSION_MODELS).parts[0]  # models--ORG--NAME
            word = rel.removeprefix("models--").replace("--", "/", 1)
        out.append(word)
    return out


def generate(llm: int, diffusion: int, seed: int) -> list[dict]:
    """`llm` LLM commands (gen_llm's realistic draws) and `diffusion` diffusion commands, three
    fifths from diffusion_gen's first menu and the rest from its wide one; same seed, same cases."""
    cases = [{**c, "system": "llm"} for c in gen_llm.random_cases(llm, seed)]
    rng = random.Random(seed)
    narrow = diffusion * 3 // 5
    drawn = [diffusion_gen.draw_case(rng, i, diffusion_gen.FLAG_MENU, f"D{seed}-") for i in range(narrow)]
    drawn += diffusion_gen.generate(diffusion - narrow, seed + 1, wide_prefix=f"W{seed}-")
    cases += [{**c, "system": "diffusion"} for c in drawn]
    return cases


# Hand-picked commands for what random draws rarely reach: the environment variable upstream reads
# (a context longer than the model's, allowed by the fact that says the variable will be set) and
# upstream's rewrites under DP attention. (name, preset, Accord's extra facts, argv after --model-path)
L8, Q8, Q30, DS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B",
                   "deepseek-ai/DeepSeek-V3")
LONGER = ("env.allow_longer_context=true",)
HAND = [
    ("longer-context-llama", "h100", LONGER, [L8, "--context-length", "200000"]),
    ("longer-context-qwen", "h100", LONGER, [Q8, "--context-length", "65536"]),
    ("longer-context-tp2", "h200", LONGER, [Q30, "--tp-size", "2", "--context-length", "81920"]),
    ("longer-context-dp-attn", "h100", LONGER, [Q30, "--tp-size", "2", "--enable-dp-attention", "--dp-size", "2",
                                                "--context-length", "65536"]),
    ("shorter-context", "h100", (), [L8, "--context-length", "8192"]),
    ("dp-attn-ds-h200", "h200", (), [DS, "--tp-size", "8", "--enable-dp-attention", "--dp-size", "8"]),
    ("dp-attn-chunk-off", "h100", (), [Q30, "--tp-size", "4", "--enable-dp-attention", "--dp-size", "4",
                                       "--chunked-prefill-size", "-1"]),
    ("dp-attn-b200", "b200", (), [Q30, "--tp-size", "4", "--enable-dp-attention", "--dp-size", "2"]),
    ("dp-replicas", "h100", (), [L8, "--dp-size", "4"]),
    ("no-cuda-graph", "h100", (), [L8, "--disable-cuda-graph"]),
]


# Diffusion: the retired warmup switches, breakable CUDA graphs, CFG parallelism and residency the
# user sets. (name, preset, argv after --model-path)
FLUX, QIMG, WAN = "black-forest-labs/FLUX.1-dev", "Qwen/Qwen-Image", "Wan-AI/Wan2.1-T2V-14B-Diffusers"
HAND_DIFFUSION = [
    ("server-warmup", "h100", [FLUX, "--server-warmup"]),
    ("warmup", "h100", [FLUX, "--warmup"]),
    ("bcg-resolutions", "h100", [QIMG, "--enable-breakable-cuda-graph", "--warmup-resolutions", "1328x1328"]),
    ("cfg-parallel-2", "h100", [QIMG, "--num-gpus", "2", "--enable-cfg-parallel"]),
    ("ulysses-4", "b200", [WAN, "--num-gpus", "4", "--ulysses-degree", "4"]),
    ("residency-typed", "l40s", [FLUX, "--dit-cpu-offload", "true", "--text-encoder-cpu-offload", "false"]),
    ("layerwise", "h100", [WAN, "--dit-layerwise-offload", "true"]),
    ("fsdp-8", "h100", [WAN, "--num-gpus", "8", "--use-fsdp-inference", "true"]),
]


def hand_cases() -> list[dict]:
    cases = [{"id": f"h-{name}", "system": "llm", "preset": preset, "facts": gen_llm.oracle_facts(preset),
              "accord_facts": list(facts), "argv": ["--model-path", *argv]}
             for name, preset, facts, argv in HAND]
    cases += [{"id": f"hd-{name}", "system": "diffusion", "preset": preset,
               "facts": diffusion_gen.oracle_facts(preset), "argv": ["--model-path", *argv]}
              for name, preset, argv in HAND_DIFFUSION]
    return cases


# Upstream fields the test never compares (tests/differential/launch_exceptions.yaml says why): not kept.
NOT_KEPT = frozenset({"cuda_graph_config"})


def compact(resolved: dict, defaults: dict[str, Any]) -> dict:
    """Upstream's resolved fields that differ from its parser defaults (the rest are the defaults)."""
    return {k: v for k, v in sorted(resolved.items())
            if k in defaults and k not in NOT_KEPT and json.dumps(v) != json.dumps(defaults[k])}


def write_fixture(path: Path, fixture: dict) -> None:
    """One case or answer per line (readable diffs, a third of indented JSON); the machine facts of a
    case are its preset's (gen_llm.oracle_facts), so they are not stored twice."""
    cases = [{k: v for k, v in case.items() if k != "facts"} for case in fixture["cases"]]
    lines = ['{"generator": ' + json.dumps(fixture["generator"], sort_keys=True) + ',', ' "cases": [']
    lines += ["  " + json.dumps(c, sort_keys=True, separators=(",", ":")) + ("," if i < len(cases) - 1 else "")
              for i, c in enumerate(cases)]
    lines += [' ],', ' "oracle": {']
    items = sorted(fixture["oracle"].items())
    lines += [f"  {json.dumps(cid)}: " + json.dumps({k: v for k, v in a.items()}, sort_keys=True, separators=(",", ":"))
              + ("," if i < len(items) - 1 else "") for i, (cid, a) in enumerate(items)]
    lines += [" }", "}"]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def upstream_defaults(system: str) -> dict[str, Any]:
    """Upstream's parser default of every field the fixture can hold (catalog default unless the
    generated parser table says otherwise); the written_as options' defaults under their dest."""
    from accord.resolver.commandline.emit import load_spec
    from accord.resolver.frozen import thaw
    from accord.resolver.language.catalog import load_catalog

    spec = load_spec(system)
    catalog = load_catalog(system)
    out = {name: thaw(entry.get("default", catalog[name].default)) for name, entry in spec.flags.items()}
    out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}
    for entry in spec.written_as:
        out[entry["flag"][2:].replace("-", "_")] = entry.get("default")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", type=int, default=450)
    parser.add_argument("--diffusion", type=int, default=250)
    parser.add_argument("--seed", type=int, default=2727)
    parser.add_argument("--hand-only", action="store_true",
                        help="only the hand-picked commands (kept in fixtures/launch_oracle_hand.json)")
    parser.add_argument("fixture", nargs="?", default=str(DEFAULT_FIXTURE))
    opts = parser.parse_args(argv)
    diffusion_gen.materialize(DIFFUSION_MODELS)
    kept: list[dict] = []
    rejected = 0
    for case in (hand_cases() if opts.hand_only else generate(opts.llm, opts.diffusion, opts.seed)):
        config, launch = accord_launch(case)
        if config is None:
            rejected += 1
            continue
        kept.append({**case, "emitted": upstream_args(case["system"], launch.args), "env": dict(launch.env),
                     "values_sha": values_digest(config)})
    fixture: dict = {"generator": {"seed": opts.seed, "llm": opts.llm, "diffusion": opts.diffusion,
                                   "hand_only": opts.hand_only, "sglang": "0.5.23"},
                     "cases": kept, "oracle": {}}
    for system in ("llm", "diffusion"):
        cases = [c for c in kept if c["system"] == system]
        defaults = upstream_defaults(system)
        asked = [{"id": c["id"], "argv": c["emitted"], "facts": {**c["facts"], **({"env": c["env"]} if c["env"] else {})}}
                 for c in cases]
        answers = launch_oracle.run(system, asked, sorted(defaults))
        for cid, answer in sorted(answers.items()):
            kept_answer = {"status": answer["status"]}
            if answer["status"] == "ok":
                kept_answer["resolved"] = compact(answer["resolved"], defaults)
            else:
                kept_answer["error"] = str(answer.get("error") or answer.get("stderr"))[:400]
            fixture["oracle"][cid] = kept_answer
    write_fixture(Path(opts.fixture), fixture)
    counts = {s: sum(1 for c in kept if c["system"] == s) for s in ("llm", "diffusion")}
    print(f"{counts} legal commands ({rejected} rejected by Accord) -> {opts.fixture}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
