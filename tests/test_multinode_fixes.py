"""Answers that need more nodes (issue 38, part 4): where one node cannot hold the weights, the
conflict's first fix is the `--nnodes` one (with the address to fill in), and the one-node way out
that does resolve (`--cpu-offload-gb`) follows it, marked slower.

The SGLang half runs the real rules on the h100 preset (8 x 80 GB H100) with DeepSeek-V3's
built-in model card; expected values are properties (this command resolves, that one does not),
never the memory formulas again. The generic half checks the mechanism on the toy rules: a rule's
`fix:` list of alternatives, each with an optional `when` and `note`, keeps its declared order in
the ranking and in the combined fix, and its values are computed in the order written.
"""

import contextlib
import io
import json

import pytest
import yaml

from accord.resolver.cli import main
from accord.resolver.errors import UsageError
from accord.resolver.explaining.diagnose import combined_fix, find_conflicts
from accord.resolver.language.catalog import load_catalog
from accord.resolver.language.ruledata import ruleset_from_data, ruleset_to_data
from accord.resolver.language.ruleset import load_rules
from accord.resolver.solving.solve import Plan
from tests.toy import CATALOG, H100, RULES, write_toy

DEEPSEEK = ("--facts", "h100", "--model-path", "deepseek-ai/DeepSeek-V3")
ADDRESS = "10.0.0.1:25000"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def resolves(capsys, *argv) -> bool:
    code = run(capsys, "resolve", *argv)[0]
    assert code in (0, 3), code
    return code == 0


@pytest.fixture(scope="module")
def deepseek():
    """The --json conflict report of DeepSeek-V3 on one 8 x H100 node (computed once)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["resolve", "--json", *DEEPSEEK])
    assert code == 3
    data = json.loads(out.getvalue())
    (conflict,) = data["conflicts"]
    return data, conflict


def _changes(fix: dict) -> dict:
    return {c["flag"]: c["to"] for c in fix["changes"]}


def _filled(command: list[str]) -> list[str]:
    return [ADDRESS if word == "HOST:PORT" else word for word in command]


# -- DeepSeek-V3 on one 8 x H100 node -----------------------------------------------------------------

def test_one_node_cannot_hold_deepseek_v3(capsys):
    # The premise: every GPU of the node in tensor parallelism is still too few.
    assert not resolves(capsys, *DEEPSEEK)
    assert not resolves(capsys, *DEEPSEEK, "--tp-size", "8")


def test_the_first_fix_is_two_nodes_at_tp_16_with_an_address_to_fill_in(deepseek, capsys):
    _, conflict = deepseek
    first = conflict["fix_details"][0]
    assert "--nnodes 2" in first["text"] and "--tp-size 16" in first["text"]
    assert conflict["fixes"][0] == first["text"]
    changes = _changes(first)
    assert changes["nnodes"] == 2 and changes["tp_size"] == 16
    assert [item["flag"] for item in first["fill_in"]] == ["dist_init_addr"]
    assert first["fill_in"][0]["value"] in first["command"]
    assert not first["note"]
    # Applied, with the address filled in, it resolves; one node fewer at the same tp does not.
    assert resolves(capsys, *_filled(first["command"]), "--facts", "h100")
    fewer = _filled(first["command"])
    fewer[fewer.index("--nnodes") + 1] = "1"
    assert not resolves(capsys, *fewer, "--facts", "h100")


def test_the_one_node_cpu_offload_follows_marked_slower(deepseek, capsys):
    _, conflict = deepseek
    texts = conflict["fixes"]
    offload = next(i for i, f in enumerate(conflict["fix_details"]) if "cpu_offload_gb" in _changes(f))
    assert offload > 0 and "--nnodes" in texts[0]
    fix = conflict["fix_details"][offload]
    assert fix["note"].startswith("slower") and "CPU memory" in fix["note"]
    assert "nnodes" not in _changes(fix) and not fix["fill_in"]  # one node, nothing to fill in
    assert resolves(capsys, *fix["command"], "--facts", "h100")
    # The offload offered is the smallest whole GiB that resolves: one GiB less does not.
    less = list(fix["command"])
    at = less.index("--cpu-offload-gb") + 1
    less[at] = str(int(less[at]) - 1)
    assert not resolves(capsys, *less, "--facts", "h100")


def test_json_keeps_the_fixes_in_that_order_and_the_combined_fix_is_the_nodes_one(deepseek):
    data, conflict = deepseek
    first, second = conflict["fix_details"][:2]
    assert _changes(first)["nnodes"] == 2 and _changes(first)["tp_size"] == 16
    assert "cpu_offload_gb" in _changes(second) and second["note"].startswith("slower")
    assert [f["text"] for f in conflict["fix_details"]] == conflict["fixes"]
    assert _changes(data["fix_all"])["nnodes"] == 2
    assert [item["flag"] for item in data["fix_all"]["fill_in"]] == ["dist_init_addr"]


def test_the_text_report_prints_the_nodes_fix_then_the_slower_one(capsys):
    code, out, err = run(capsys, "resolve", *DEEPSEEK)
    assert code == 3
    text = out + err
    fixes = [line for line in text.splitlines() if line.startswith("  fix ")]
    assert "--nnodes 2" in fixes[0] and "--tp-size 16" in fixes[0]
    assert "--cpu-offload-gb" in fixes[1]
    assert "slower: weights stream from CPU memory" in " ".join(text[text.index(fixes[1]):].split())
    assert "  fill in   replace HOST:PORT in --dist-init-addr" in text


def test_typed_tp_8_still_gets_the_nodes_fix_first(capsys):
    code, out, _ = run(capsys, "resolve", "--json", *DEEPSEEK, "--tp-size", "8")
    assert code == 3
    (conflict,) = json.loads(out)["conflicts"]
    first = conflict["fix_details"][0]
    assert _changes(first)["nnodes"] == 2 and _changes(first)["tp_size"] == 16
    assert all(f["note"].startswith("slower") for f in conflict["fix_details"]
               if "cpu_offload_gb" in _changes(f))


def test_relax_takes_the_one_node_way_out_that_needs_nothing_filled_in(capsys):
    code, out, _ = run(capsys, "resolve", "--json", "--relax", *DEEPSEEK)
    assert code == 0
    data = json.loads(out)
    assert data["values"]["nnodes"] == 1 and data["values"]["cpu_offload_gb"] > 0


def test_a_model_that_fits_one_node_gets_no_nodes_or_offload_fix(capsys):
    # Llama-3.1-70B (bf16) does not fit one H100 at tp 1, but fits the node at a bigger tp.
    code, out, _ = run(capsys, "resolve", "--json", "--facts", "h100",
                       "--model-path", "meta-llama/Llama-3.1-70B-Instruct")
    assert code == 3
    fixes = [f for c in json.loads(out)["conflicts"] for f in c["fix_details"]]
    assert fixes
    for fix in fixes:
        assert not {"nnodes", "cpu_offload_gb", "dist_init_addr"} & set(_changes(fix))
        assert not fix["note"]


# -- the mechanism, on the toy rules ------------------------------------------------------------------

def _toy_with_fix(tmp_path, fix) -> Plan:
    write_toy(tmp_path)
    catalog = {**CATALOG, "flags": CATALOG["flags"] + [
        {"name": "dist_init_addr", "flags": ["--dist-init-addr"], "type": "str", "nullable": True, "default": None}]}
    rules = yaml.safe_load(yaml.safe_dump(RULES))
    world = next(r for r in rules["rules"] if r["id"] == "par.world_size.fits")
    world["fix"] = fix
    (tmp_path / "llm" / "flags.yaml").write_text(yaml.safe_dump(catalog))
    (tmp_path / "llm" / "toy.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    return Plan(load_catalog("llm", tmp_path), load_rules("llm", tmp_path))


NODES = {"nnodes": "(tp_size + gpu.count - 1) // gpu.count",
         "dist_init_addr": {"value": "'HOST:PORT'", "fill_in": "the address of node 0"}}
ONE_NODE = {"note": "slower: fewer ranks", "tp_size": "gpu.count"}


def test_declared_alternatives_keep_their_order_over_fewest_changes(tmp_path):
    plan = _toy_with_fix(tmp_path, [NODES, ONE_NODE, {"when": "gpu.count > 100", "dp_size": "2"}])
    user = {"tp_size": 16}
    (conflict,) = find_conflicts(plan, user, H100)
    fixes = conflict.fixes
    nodes = next(i for i, f in enumerate(fixes) if dict(f.changes).get("nnodes") == 2)
    one = next(i for i, f in enumerate(fixes) if f.changes == (("tp_size", 8),))
    assert nodes == 0 and nodes < one  # two changes before one: the declared order
    assert fixes[nodes].fill_in == (("dist_init_addr", "the address of node 0"),) and not fixes[nodes].note
    assert fixes[one].note == "slower: fewer ranks"
    assert not any(dict(f.changes).get("dp_size") == 2 for f in fixes)  # its `when` does not hold
    for fix in fixes:
        assert plan.satisfiable(fix.apply(user), H100)
    parts = combined_fix(plan, user, H100, [conflict])
    assert dict(parts[0][0].changes).get("nnodes") == 2
    # With --relax (nothing to fill in) the combined fix passes over the placeholder.
    relaxed = combined_fix(plan, user, H100, [conflict], avoid_fill_in=True)
    assert not relaxed[0][0].fill_in


def test_a_plain_fix_map_still_ranks_fewest_changes_first(tmp_path):
    plan = _toy_with_fix(tmp_path, NODES)
    (conflict,) = find_conflicts(plan, {"tp_size": 16}, H100)
    sizes = [fix.size() for fix in conflict.fixes]
    assert sizes == sorted(sizes) and sizes[0] == 1
    assert all(fix.alternative is None and not fix.note for fix in conflict.fixes)


def test_an_alternative_computes_its_values_in_the_order_written(tmp_path):
    # chunked_prefill_size is computed with the new tp_size (8), not the typed 16.
    plan = _toy_with_fix(tmp_path, [{"tp_size": "gpu.count", "chunked_prefill_size": "tp_size * 1024"}])
    (conflict,) = find_conflicts(plan, {"tp_size": 16}, H100)
    hinted = next(f for f in conflict.fixes if f.rule == "par.world_size.fits")
    assert dict(hinted.changes) == {"tp_size": 8, "chunked_prefill_size": 8192}


def test_alternatives_survive_the_plan_cache_form(tmp_path):
    plan = _toy_with_fix(tmp_path, [NODES, ONE_NODE])
    again = ruleset_from_data("llm", ruleset_to_data(plan.ruleset))
    before = next(r for r in plan.ruleset if r.id == "par.world_size.fits")
    after = next(r for r in again if r.id == "par.world_size.fits")
    assert [(len(p), n, f) for p, _, n, f in after.fix_hints()] == [(len(p), n, f) for p, _, n, f in before.fix_hints()]
    assert [name for name, _ in after.fix] == ["nnodes", "dist_init_addr", "tp_size"]


@pytest.mark.parametrize("fix", [[{"note": "only a note"}], [{"tp_size": "1", "note": 3}], ["tp_size"]])
def test_a_malformed_alternative_is_refused_at_load(tmp_path, fix):
    with pytest.raises(UsageError, match="fix alternative 1"):
        _toy_with_fix(tmp_path, fix)
