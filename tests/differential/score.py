"""Score Accord against upstream SGLang's answers on the same LLM launch commands.

Why: agreement with upstream is measured, not assumed. For each case this resolves the command with
Accord's API and compares it with the oracle's answer: accept/reject first, then, when both accept,
every field upstream resolved that Accord also has (after mapping upstream's names and encodings
onto Accord's). A case agrees when both reject, or both accept and every compared field matches.

usage: python -m tests.differential.score FIXTURE.json [FIXTURE.json ...] [--show N] [--ids] [--table T]
prints the agreement %, then disagreements by field and by case.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.commandline.release_target import refuse_unparsed
from accord.resolver.errors import AccordError
from accord.resolver.facts.machine import load_facts
from tests.differential.gen_llm import accord_argv

# Upstream fields compared one to one with Accord's field of the same name.
SAME = [
    "device", "page_size", "chunked_prefill_size", "max_prefill_tokens", "kv_cache_dtype",
    "tp_size", "pp_size", "ep_size", "moe_a2a_backend", "moe_runner_backend", "speculative_algorithm",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_draft_attention_backend", "grammar_backend", "sampling_backend", "disable_radix_cache",
    "enable_deterministic_inference", "disaggregation_mode", "disable_overlap_schedule",
    "load_balance_method", "max_running_requests", "disable_custom_all_reduce",
    "enable_torch_symm_mem", "enable_mixed_chunk", "disable_shared_experts_fusion", "deepep_mode",
    "prefill_kv_cache_dequant_dtype", "flashinfer_allreduce_fusion_backend",
    "schedule_conservativeness", "disaggregation_decode_extra_slots", "torch_compile_max_bs",
    "dsa_prefill_backend", "dsa_decode_backend", "nnodes", "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill", "cuda_graph_backend_decode", "cuda_graph_backend_prefill",
]
FALSY_NONE = {"enable_lora"}  # upstream None (unset) and Accord False both mean "off"


def accord_answer(case: dict, relax: bool = False, strict: bool = False) -> dict:
    """Accord's answer for a case: status ok with values, or error with the rules that refused.
    With `relax`, a conflict also carries "relaxed": the answer `--relax` gives; `strict` resolves
    as `accord resolve --strict` (known-bad combinations refused)."""
    try:
        _, parsed = parse_flags(accord_argv(case["argv"]))
        facts = load_facts(case["preset"], tuple(case.get("fact_overrides", ())),
                           model_path=parsed.user.get("model_path"), system=parsed.system)
        refuse_unparsed(accord_argv(case["argv"]), {}, parsed.system, facts)  # as `accord resolve` does
        config = resolve(parsed.system, parsed.user, facts, parsed.sources,
                         warnings=parsed.warnings, strict=strict)
    except ConflictError as err:
        rules = sorted({r for c in err.conflicts for r in c.rules})
        answer = {"status": "error", "kind": "conflict", "rules": rules, "error": err.text()}
        if relax:
            try:
                relaxed = resolve(parsed.system, parsed.user, facts, parsed.sources, relax=True,
                                  warnings=parsed.warnings, strict=strict)
                answer["relaxed"] = {"status": "ok", "values": dict(relaxed.values), "facts": dict(facts)}
            except AccordError:
                answer["relaxed"] = {"status": "error"}
        return answer
    except AccordError as err:
        return {"status": "error", "kind": "usage", "rules": [], "error": str(err)}
    return {"status": "ok", "values": dict(config.values), "facts": dict(facts)}


def _model_name(path: Any) -> Any:
    """Model paths differ only in where the folder sits: compare org/name."""
    return "/".join(Path(path).parts[-2:]) if isinstance(path, str) else path


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return abs(float(a) - float(b)) < 1e-3
        except (TypeError, ValueError):
            return False
    return a == b


def compared_fields(resolved: dict, values: dict, facts: dict) -> dict[str, tuple[Any, Any]]:
    """{field: (upstream, accord)} for every upstream field Accord also decides, mapped."""
    out: dict[str, tuple[Any, Any]] = {}
    for name in SAME:
        if name in resolved and name in values and not str(resolved[name]).startswith("<n/a"):
            out[name] = (resolved[name], values[name])
    for name in FALSY_NONE:
        if name in resolved and name in values:
            out[name] = (bool(resolved[name]), bool(values[name]))
    # Upstream folds equal per-phase backends into attention_backend and leaves a phase None when it
    # follows attention_backend: compare what each phase actually runs.
    up_attn = resolved.get("attention_backend")
    out["attention_backend(prefill)"] = (resolved.get("prefill_attention_backend") or up_attn,
                                         values.get("prefill_attention_backend") or values.get("attention_backend"))
    out["attention_backend(decode)"] = (resolved.get("decode_attention_backend") or up_attn,
                                        values.get("decode_attention_backend") or values.get("attention_backend"))
    # The DP layout: upstream 0.5.23 spells attention DP `--attn-dp-size N` (dp_size then counts
    # replicas); Accord keeps the seed's `--dp-size N --enable-dp-attention`.
    attn_dp = values.get("dp_size", 1) if values.get("enable_dp_attention") else 1
    out["attn_dp_size"] = (resolved.get("attn_dp_size", 1), attn_dp)
    out["dp_size(replicas)"] = (resolved.get("dp_size", 1), 1 if values.get("enable_dp_attention") else values.get("dp_size", 1))
    # Upstream fills `quantization` from the checkpoint only at model load (ModelConfig); Accord
    # reports the effective method at resolution. Unset upstream = the checkpoint's method.
    up_q = resolved.get("quantization")
    if up_q is None:
        up_q = facts.get("model.quant_method")
    out["quantization"] = (up_q, values.get("quantization"))
    out["speculative_draft_model_path"] = (_model_name(resolved.get("speculative_draft_model_path")),
                                           _model_name(values.get("speculative_draft_model_path")))
    out["mem_fraction_static"] = (resolved.get("mem_fraction_static"), values.get("mem_fraction_static"))
    return out


def compare(oracle: dict, accord: dict) -> list[tuple[str, Any, Any]]:
    """The disagreements of one case: [(field, upstream, accord)]; `status` for accept/reject."""
    up_ok, ac_ok = oracle["status"] == "ok", accord["status"] == "ok"
    if up_ok != ac_ok:
        up = "ok" if up_ok else f"error {oracle.get('error_type')}: {str(oracle.get('error'))[:160]}"
        ac = "ok" if ac_ok else f"error {','.join(accord.get('rules') or [accord.get('kind')])}"
        return [("status", up, ac)]
    if not up_ok:
        return []
    pairs = compared_fields(oracle["resolved"], accord["values"], accord["facts"])
    return [(f, u, a) for f, (u, a) in sorted(pairs.items()) if not _close(u, a)]


def two_measures(fixture: dict, table: dict, strict: bool = False) -> dict[str, Any]:
    """The two agreement figures issue 30 asks for, over every scorable case of a fixture.

    accept/reject: Accord accepts exactly when upstream's resolution and launch code accept; a case
    listed as launch-time truth (upstream's resolution passes what its launch code then kills)
    counts as a rejection by upstream. every field (relaxed changes included): both accept and
    every compared field is equal; or both reject; or Accord refuses what upstream silently
    rewrites and `--relax` gives exactly upstream's resolved values (the refusal is Accord's
    design, the relaxed answer is what a user gets, judged field by field). `by_relax` lists those
    refusals, which a third figure counts as accepted. `strict` resolves as
    `accord resolve --strict`, which refuses the known-bad combinations (among them the launch
    0.5.23 crashes on while resolving)."""
    accept_reject, by_relax, every_field, cases = [], [], [], {}
    for case in fixture["cases"]:
        oracle = fixture["oracle"].get(case["id"])
        if oracle is None or oracle["status"] not in ("ok", "error"):
            continue
        cid = case["id"]
        accord = accord_answer(case, relax=True, strict=strict)
        launch_truth = (table.get(cid) or {}).get("reason") == "launch-time truth"
        up_ok = oracle["status"] == "ok" and not launch_truth
        ac_ok = accord["status"] == "ok"
        if up_ok == ac_ok:
            accept_reject.append(cid)
        if up_ok and ac_ok:
            diffs = compare(oracle, accord)
        elif up_ok and accord.get("relaxed", {}).get("status") == "ok":
            diffs = compare(oracle, accord["relaxed"])
            if not diffs:
                by_relax.append(cid)
        else:
            diffs = [] if up_ok == ac_ok else [("status", oracle["status"], accord["status"])]
        if not diffs:
            every_field.append(cid)
        cases[cid] = diffs
    return {"total": len(cases), "accept_reject": accept_reject, "by_relax": by_relax,
            "every_field": every_field, "cases": cases}


def score(fixture: dict) -> dict[str, list[tuple[str, Any, Any]]]:
    """{case id: disagreements} over every scorable case of a fixture (harness crashes skipped)."""
    results = {}
    for case in fixture["cases"]:
        oracle = fixture["oracle"].get(case["id"])
        if oracle is None or oracle["status"] not in ("ok", "error"):
            continue
        results[case["id"]] = compare(oracle, accord_answer(case))
    return results


def load_fixture(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def load_fixtures(paths) -> dict:
    """Several fixtures as one (their case ids are distinct: the seed is in every random id)."""
    merged: dict = {"cases": [], "oracle": {}}
    for path in paths:
        fixture = load_fixture(path)
        clash = set(fixture["oracle"]) & set(merged["oracle"])
        if clash:
            raise ValueError(f"{path} repeats case ids {sorted(clash)[:5]}")
        merged["cases"] += fixture["cases"]
        merged["oracle"].update(fixture["oracle"])
    return merged


def write_table(path: Path, results: dict) -> None:
    """The known-disagreement table: case -> fields, reason, why (reasons kept from the old file)."""
    import yaml
    old = yaml.safe_load(path.read_text())["cases"] if path.is_file() else {}
    cases = {}
    for cid, diffs in sorted(results.items()):
        if diffs:
            known = old.get(cid) or {}
            cases[cid] = {"fields": sorted({d[0] for d in diffs}),
                          "reason": known.get("reason", "TODO"), "why": known.get("why", "")}
    header = ("# LLM cases where Accord deliberately differs from upstream SGLang 0.5.23 (see\n"
              "# tests/test_differential_llm.py). reason: seed wins | upstream bug | launch-time truth | open.\n"
              "# Regenerate the list with `python -m tests.differential.score FIXTURE... --table THIS`\n"
              "# (all the LLM fixtures at once, or the other fixtures' cases are dropped).\n")
    path.write_text(header + yaml.safe_dump({"cases": cases}, sort_keys=True, width=100))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture", nargs="+", help="one or more fixtures, scored together")
    parser.add_argument("--show", type=int, default=3, help="example cases per field (default 3)")
    parser.add_argument("--ids", action="store_true", help="list every disagreeing case")
    parser.add_argument("--table", help="rewrite this disagreement table (keeps known reasons; new "
                                        "cases get reason TODO to be classified by hand)")
    parser.add_argument("--measures", action="store_true",
                        help="print only accept/reject and every-field (relaxed included) agreement")
    parser.add_argument("--strict", action="store_true",
                        help="with --measures: resolve as `accord resolve --strict`")
    opts = parser.parse_args(argv)
    fixture = load_fixtures(opts.fixture)
    if opts.measures:
        import yaml
        table_path = Path(opts.table) if opts.table else Path(__file__).parent / "llm_disagreements.yaml"
        m = two_measures(fixture, yaml.safe_load(table_path.read_text())["cases"], strict=opts.strict)
        n = max(1, m["total"])
        print(f"LLM accept/reject agreement: {len(m['accept_reject'])}/{m['total']} = "
              f"{100 * len(m['accept_reject']) / n:.1f}%; every field, relaxed changes included: "
              f"{len(m['every_field'])}/{m['total']} = {100 * len(m['every_field']) / n:.1f}%; "
              f"accept/reject counting a refusal whose --relax gives upstream's exact configuration as "
              f"accepted: {len(m['accept_reject']) + len(m['by_relax'])}/{m['total']} = "
              f"{100 * (len(m['accept_reject']) + len(m['by_relax'])) / n:.1f}%")
        for cid, diffs in sorted(m["cases"].items()):
            if diffs:
                print(f"  {cid}: " + "; ".join(f"{f} upstream={u!r} accord={a!r}"[:160] for f, u, a in diffs))
        return 0
    results = score(fixture)
    by_field: dict[str, list[str]] = collections.defaultdict(list)
    for cid, diffs in results.items():
        for field, *_ in diffs:
            by_field[field].append(cid)
    agree = sum(1 for d in results.values() if not d)
    hand = [c for c in results if c.startswith("h-")]
    hand_agree = sum(1 for c in hand if not results[c])
    rnd = len(results) - len(hand)
    print(f"LLM agreement: {agree}/{len(results)} = {100 * agree / max(1, len(results)):.1f}% "
          f"(hand-picked {hand_agree}/{len(hand)}, random {agree - hand_agree}/{rnd})")
    table_path = Path(opts.table) if opts.table else Path(__file__).parent / "llm_disagreements.yaml"
    if table_path.is_file():
        import yaml
        table = yaml.safe_load(table_path.read_text())["cases"]
        ok = sum(1 for cid, d in results.items() if not d or (table.get(cid) or {}).get("reason")
                 in ("seed wins", "upstream bug", "launch-time truth"))
        reasons = collections.Counter((table.get(cid) or {}).get("reason", "unlisted")
                                      for cid, d in results.items() if d)
        print(f"within the rules (agree, or a listed seed-wins / upstream-bug / launch-time-truth "
              f"case): {ok}/{len(results)} = {100 * ok / max(1, len(results)):.1f}%; "
              f"disagreements by reason: {dict(sorted(reasons.items()))}")
    cases = {c["id"]: c for c in fixture["cases"]}
    for field, ids in sorted(by_field.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{field}: {len(ids)} case(s)")
        for cid in ids[:opts.show]:
            diff = next(d for d in results[cid] if d[0] == field)
            print(f"  {cid} [{cases[cid]['preset']}] {' '.join(cases[cid]['argv'][1:])}")
            print(f"      upstream={diff[1]!r} accord={diff[2]!r}")
    if opts.table:
        write_table(Path(opts.table), results)
    if opts.ids:
        print("\ndisagreeing cases:")
        for cid, diffs in sorted(results.items()):
            if diffs:
                print(f"  {cid}: {', '.join(d[0] for d in diffs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
