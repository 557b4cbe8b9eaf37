"""rules/llm/kernels.yaml says what the kernels' own REQUIREMENTS say (kernels/*: REQUIREMENTS).

The rule file is read with plain yaml and its expressions evaluated by the small evaluator below
(the subset of the rule language these rules use), so this test depends on no resolver code. On
a grid of machines, models and flag values it checks that the kernels' declared needs and the
rules' require/conflict verdicts agree on every point, the machine's Triton release
(`packages.triton`) included. tests/test_kernels_compile.py checks the declared GPU capabilities
against what each Triton release really compiles (kernels/capabilities.yaml), closing the loop; and
the table must cover every Triton release a facts preset names.

Runs in its own process (tests/test_kernels_isolated.py) because importing the kernel modules
imports triton.
"""

import ast
import functools
import importlib
import itertools
import pkgutil
from pathlib import Path

import pytest
import yaml

from accord.kernels.testing import kernel_test_device

DEVICE = kernel_test_device()

import accord.kernels  # noqa: E402  (after the process check)
from accord.kernels import capabilities, kv_quant, rmsnorm  # noqa: E402
from accord.kernels.attention import decode, extend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RULES = yaml.safe_load((ROOT / "rules/llm/kernels.yaml").read_text())["rules"]
_DERIVED_FILE = yaml.safe_load((ROOT / "rules/llm/derived.yaml").read_text())
NAMED_SETS = {s["id"]: list(s["values"]) for s in _DERIVED_FILE.get("sets") or ()}
DERIVED = {d["id"]: d["values"] for d in _DERIVED_FILE.get("derived") or ()}
"""Names the rules read (rules/README.md, "Derived values"): a set is its values, a derived value
the first of its ordered value/when pairs whose `when` holds."""
CATALOG = {flag["name"]: flag for path in sorted((ROOT / "rules/llm/flags").glob("*.yaml"))
           for flag in yaml.safe_load(path.read_text())["flags"]}


def choice_property(flag: str, prop: str, value):
    """`meta(flag).prop` as rules/README.md ("Choice metadata") defines it: the property the catalog
    gives the flag's current value, else the property's declared default (`same_as` shares a table)."""
    meta = CATALOG[flag]["choice_meta"]
    if "same_as" in meta:
        meta = CATALOG[meta["same_as"]]["choice_meta"]
    return (meta["choices"].get(value) or {}).get(prop, meta["properties"][prop]["default"])


KERNEL_MODULES = [decode, extend, kv_quant, rmsnorm]
BACKENDS_WITH_KERNELS = ("triton", "torch_native")
"""Phase backends that run these kernels (triton) or their torch references (torch_native)."""
FACTS_USED = {"platform", "gpu.sm", "model.head_dim", "packages.triton"}
TABLE = capabilities.load_table()
TRITON_RELEASES = sorted(TABLE["triton"], key=capabilities.release)
NEWEST = TRITON_RELEASES[-1]
"""A machine whose Triton is unknown is taken to have the newest probed release (the one the
project's environment installs)."""
PRESETS = {path.stem: yaml.safe_load(path.read_text()) for path in sorted((ROOT / "rules/facts").glob("*.yaml"))}


class Unknown(Exception):
    """An expression read a fact the point does not know."""


def evaluate(text: str, flags: dict, facts: dict, user_set: frozenset = frozenset()):
    """Value of a rule expression (the subset of the rule language kernels.yaml uses)."""

    def value(node):
        if isinstance(node, ast.BoolOp):
            results = (value(v) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not value(node.operand)
        if isinstance(node, ast.Compare):
            left = value(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = value(right_node)
                if not COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [value(element) for element in node.elts]
        if isinstance(node, ast.Call) and node.func.id == "is_set":
            return node.args[0].id in user_set
        if isinstance(node, ast.Call) and node.func.id == "known":
            return facts.get(dotted(node.args[0])) is not None
        if isinstance(node, ast.Call) and node.func.id == "version":
            return tuple(int(part) for part in str(value(node.args[0])).split(".")[:3])
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call) and node.value.func.id == "meta":
            flag = node.value.args[0].id
            return choice_property(flag, node.attr, flags.get(flag, CATALOG[flag].get("default")))
        name = dotted(node)
        if name in flags:
            return flags[name]
        if name in NAMED_SETS:
            return NAMED_SETS[name]
        if name in DERIVED:
            for case in DERIVED[name]:
                if "when" not in case or evaluate(str(case["when"]), flags, facts, user_set):
                    return evaluate(str(case["value"]), flags, facts, user_set)
            return None
        if name not in facts:
            raise Unknown(name)
        return facts[name]

    return value(parse(text))


@functools.lru_cache(maxsize=None)
def parse(text: str) -> ast.AST:
    return ast.parse(text, mode="eval").body


COMPARE = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
}


def dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    raise AssertionError(f"kernels.yaml uses {ast.dump(node)}, which this test's evaluator lacks")


def names_in(text: str) -> set:
    tree = ast.parse(text, mode="eval")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call):  # meta(flag).prop
            assert node.value.func.id == "meta" and node.attr in CATALOG[node.value.args[0].id][
                "choice_meta"]["properties"], ast.dump(node)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found.add(dotted(node))
        elif isinstance(node, ast.Name) and not any(
                isinstance(parent, ast.Attribute) and parent.value is node for parent in ast.walk(tree)):
            found.add(node.id)
    return found - {"is_set", "meta", "known", "version"}


def rules_allow(flags: dict, facts: dict, rules: list = RULES) -> bool:
    """No conflict fires and no require fails (a rule whose facts are unknown does neither)."""
    for rule in rules:
        if rule["kind"] not in ("require", "conflict"):
            continue
        try:
            if not evaluate(rule.get("when", "True"), flags, facts):
                continue
            if rule["kind"] == "conflict" or not evaluate(rule["require"], flags, facts):
                return False
        except Unknown:
            continue
    return True


def kernels_allow(flags: dict, facts: dict) -> bool:
    """The same verdict, from the kernel modules' REQUIREMENTS alone."""
    kv = flags["kv_cache_dtype"]
    for need in (module.REQUIREMENTS for module in KERNEL_MODULES):
        backends = {flags[f"{phase}_attention_backend"] for phase in need["phases"]}
        # The KV dtypes the kernels store are the engine's own rule (engine.kv_cache.dtype, checked
        # against these modules by test_engine_kv_dtypes_are_ones_every_kernel_stores): a command
        # prepared for upstream SGLang runs upstream's kernels, which read FP4 and MXFP8 caches too.
        if "triton" not in backends:
            continue
        if facts["platform"] not in need["platforms"]:
            return False
        triton = facts.get("packages.triton") or NEWEST
        if facts["platform"] == "cuda":
            if capabilities.release(triton) < capabilities.release(need["min_triton"]):
                return False    # older than every release the kernels are probed with
            # A KV dtype the kernels do not store (upstream's kernels read it) still needs what the
            # kernels need for a cache in the model's dtype: the attention code builds at all.
            stored = kv if kv in need.get("kv_cache_dtypes", (kv,)) else "auto"
            if facts["gpu.sm"] < capabilities.min_cuda_sm(need, stored, triton):
                return False
            newest = capabilities.max_cuda_sm(need, triton)
            if newest is not None and facts["gpu.sm"] > newest:
                return False
        head_dim = facts.get("model.head_dim")
        if head_dim is not None and head_dim > need.get("max_head_dim", head_dim):
            return False
        if any(flags[flag] is not None and flags[flag] < lowest
               for flag, lowest in need.get("flag_minimums", {}).items()):
            return False
    return True


@functools.cache
def grid() -> tuple:
    """Every combination of the values the rules and requirements distinguish between."""
    machines = [{"platform": "cuda", "gpu.sm": sm} for sm in (70, 75, 80, 86, 89, 90, 100, 120)]
    machines += [{"platform": p, "gpu.sm": None} for p in ("rocm", "cpu", "xpu", "npu", "mps")]
    models = [{}, {"model.head_dim": 128}, {"model.head_dim": 256}, {"model.head_dim": 512}]
    backends = ["triton", "torch_native", "flashinfer"]
    points = []
    for machine, model, prefill, decode_backend, kv, splits, tile in itertools.product(
            machines, models, backends, backends, CATALOG["kv_cache_dtype"]["choices"], [0, 8], [None, 0]):
        flags = {"prefill_attention_backend": prefill, "decode_attention_backend": decode_backend,
                 "kv_cache_dtype": kv, "triton_attention_num_kv_splits": splits,
                 "triton_attention_split_tile_size": tile}
        points.append((flags, {**machine, **model}))
    # The Triton release matters on CUDA only, beside the backends and the KV dtype: each probed
    # release, one older than all, a later patch and a later release.
    releases = ["3.1.0", *TRITON_RELEASES, f"{NEWEST.rsplit('.', 1)[0]}.9", "9.0.0"]
    for sm, release, prefill, decode_backend, kv in itertools.product(
            (70, 75, 80, 86, 89, 90, 100, 120), releases, backends[:2], backends[:2],
            CATALOG["kv_cache_dtype"]["choices"]):
        flags = {"prefill_attention_backend": prefill, "decode_attention_backend": decode_backend,
                 "kv_cache_dtype": kv, "triton_attention_num_kv_splits": 8,
                 "triton_attention_split_tile_size": None}
        points.append((flags, {"platform": "cuda", "gpu.sm": sm, "packages.triton": release}))
    return tuple(points)


def test_rules_and_kernel_requirements_agree_on_every_point_of_the_grid():
    disagreements = [(flags, facts) for flags, facts in grid()
                     if rules_allow(flags, facts) != kernels_allow(flags, facts)]
    assert not disagreements, f"{len(disagreements)} disagreements, first: {disagreements[0]}"


def test_the_grid_reaches_both_verdicts_for_every_hard_rule():
    """Each require/conflict rule decides some point alone, so none is dead or redundant."""
    refused = [(flags, facts) for flags, facts in grid() if not rules_allow(flags, facts)]
    for rule in (r for r in RULES if r["kind"] in ("require", "conflict")):
        others = [r for r in RULES if r is not rule]
        assert any(rules_allow(flags, facts, others) for flags, facts in refused), \
            f"{rule['id']} never decides a point on its own"


def test_cpu_interpreter_warning_fires_exactly_when_a_phase_runs_triton_on_cpu():
    assert all("cpu" in module.REQUIREMENTS["platforms"] for module in KERNEL_MODULES)  # "cpu": interpreted
    rule = next(r for r in RULES if r["id"] == "kern.triton.cpu_interpreter")
    for platform, prefill, decode_backend in itertools.product(("cuda", "rocm", "cpu"), ("triton", "fa3"),
                                                              ("triton", "torch_native")):
        flags = {"prefill_attention_backend": prefill, "decode_attention_backend": decode_backend}
        fires = evaluate(rule["when"], flags, {"platform": platform})
        assert fires == ("triton" in (prefill, decode_backend) and platform == "cpu")


@pytest.mark.parametrize("decode_backend, user_set, tile_size, fires", [
    ("triton", {"triton_attention_num_kv_splits"}, 64, False),
    ("torch_native", set(), None, False),
    ("torch_native", set(), 64, True),
    ("flashinfer", {"triton_attention_num_kv_splits"}, None, True),
])
def test_split_flags_warn_when_decode_ignores_them(decode_backend, user_set, tile_size, fires):
    rule = next(r for r in RULES if r["id"] == "kern.decode.split_flags_need_triton")
    flags = {"decode_attention_backend": decode_backend, "triton_attention_split_tile_size": tile_size,
             "triton_attention_num_kv_splits": 8}
    assert evaluate(rule["when"], flags, {}, frozenset(user_set)) == fires


def test_every_rule_is_well_formed_and_names_only_known_flags_and_facts():
    ids = [rule["id"] for rule in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert rule["id"].startswith("kern.") and rule["reason"] and rule["ref"], rule["id"]
        needed = {"require": {"when", "require"}, "conflict": {"when"}, "warn": {"when", "message"}}
        assert needed[rule["kind"]] <= set(rule), rule["id"]
        for key in ("when", "require"):
            for name in names_in(rule.get(key, "True")):
                known = name in CATALOG or name in FACTS_USED or name in NAMED_SETS or name in DERIVED
                assert known, f"{rule['id']}: unknown name {name}"


def test_every_module_with_triton_kernels_declares_requirements():
    with_kernels = set()
    for info in pkgutil.walk_packages(accord.kernels.__path__, "accord.kernels."):
        module = importlib.import_module(info.name)
        if any(type(obj).__name__ in ("JITFunction", "InterpretedFunction") and obj.__module__ == info.name
               for obj in vars(module).values()):
            with_kernels.add(module)
            assert {"phases", "platforms"} <= set(module.REQUIREMENTS), info.name
    assert with_kernels == set(KERNEL_MODULES)


def test_engine_kv_dtypes_are_ones_every_kernel_stores():
    """The KV dtypes the engine profile serves (rules/llm/engine.yaml engine.kv_cache.dtype: those
    the catalog marks accord_kernels) are stored by every kernel module and its torch reference, so
    serving never reaches a dtype they lack."""
    engine = yaml.safe_load((ROOT / "rules/llm/engine.yaml").read_text())["rules"]
    rule = next(r for r in engine if r["id"] == "engine.kv_cache.dtype")
    assert "not meta(kv_cache_dtype).accord_kernels" in rule["when"]
    allowed = [c for c in CATALOG["kv_cache_dtype"]["choices"]
               if choice_property("kv_cache_dtype", "accord_kernels", c)]
    assert "auto" in allowed and "nvfp4" not in allowed
    for need in (module.REQUIREMENTS for module in KERNEL_MODULES):
        stored = need.get("kv_cache_dtypes")
        if stored is not None:
            assert set(allowed) <= set(stored), (need, allowed)


def test_the_capability_table_covers_every_triton_release_a_preset_names():
    """A preset's Triton (rules/facts/*.yaml packages.triton) must be a release the table probed,
    else the rules would judge that machine from another release's compiles."""
    probed = {capabilities.release(version) for version in TRITON_RELEASES}
    named = {name: preset["packages"]["triton"] for name, preset in PRESETS.items()
             if (preset.get("packages") or {}).get("triton")}
    assert named, "no preset names a Triton release"
    missing = {name: version for name, version in named.items() if capabilities.release(version) not in probed}
    assert not missing, f"probe these with benchmarks/kernel_capabilities.py: {missing}"


def test_every_declared_step_is_a_probed_release():
    """Each "from this Triton release on" step of min_cuda_sm names a release the table holds."""
    probed = {capabilities.release(version) for version in TRITON_RELEASES}
    for module in KERNEL_MODULES:
        for kv, steps in module.REQUIREMENTS.get("min_cuda_sm", {}).items():
            assert {capabilities.release(since) for since in steps} <= probed, (module.__name__, kv, steps)
