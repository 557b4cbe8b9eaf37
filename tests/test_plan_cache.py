"""The plan cache (resolver/language/plancache.py): same answers with and without it, never stale, never
trusted when damaged, written atomically to the user's cache folder and nowhere else."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accord.resolver.explaining.diagnose import find_conflicts
from accord.resolver.facts.machine import load_facts
from accord.resolver.language import plancache
from accord.resolver.language.catalog import RULES_DIR, load_catalog
from accord.resolver.language.expr import parse
from accord.resolver.language.ruleset import load_rules, plan_sources
from accord.resolver.solving.solve import Plan

ROOT = Path(__file__).resolve().parent.parent
TYPICAL = ["--tp", "8", "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.85"]
# (preset, user values): a typical launch, a launch with its own choices, and a conflict.
LAUNCHES = [
    ("h100", {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85}),
    ("b200", {"tp_size": 4, "attention_backend": "flashinfer", "enable_dp_attention": True, "dp_size": 4}),
    ("b200", {"tp_size": 16, "attention_backend": "fa3", "kv_cache_dtype": "fp4_e2m1"}),
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("ACCORD_CACHE_DIR", str(folder))
    return folder


def plan_entries(folder: Path) -> list[Path]:
    """The rule-set entries (a miss also stores the catalog's own entry, left out here)."""
    return sorted(p for p in folder.glob("plan-*.marshal") if not p.name.startswith("plan-catalog-")) if folder.exists() else []


def answers(plan: Plan) -> list:
    """What a plan decides for LAUNCHES: every value and its origin, or the minimal conflicts."""
    out = []
    for preset, user in LAUNCHES:
        facts = load_facts(preset)
        outcome = plan.solve(user, facts)
        if outcome.satisfiable:
            out.append((outcome.values, outcome.origin, [(r.id, k) for r, k in outcome.unknown]))
        else:
            out.append([(c.flags, c.rules, c.facts, c.fixes) for c in find_conflicts(plan, user, facts)])
    return out


def test_rules_from_the_cache_decide_exactly_as_rules_from_yaml(cache, monkeypatch):
    monkeypatch.setenv("ACCORD_CACHE_DIR", "")
    parsed = load_rules("llm")
    monkeypatch.setenv("ACCORD_CACHE_DIR", str(cache))
    written = load_rules("llm")   # a miss: compiles, then stores the entry
    assert len(plan_entries(cache)) == 1
    loaded = load_rules("llm")    # a hit: read back from the entry
    catalog = load_catalog("llm")
    assert [r.id for r in loaded] == [r.id for r in parsed]
    for a, b in zip(parsed, loaded):
        # Every field that holds no expression, so a field added to Rule cannot be lost by the cache.
        plain = [name for name in a.FIELDS if name not in ("when", "require", "value", "values", "fix")]
        assert [getattr(a, n) for n in plain] == [getattr(b, n) for n in plain]
        # What the rule reads is stored with it, not recomputed: it must be what parsing found.
        assert (a.reads_flags, a.reads_facts, a.constrained_flags) == (b.reads_flags, b.reads_facts, b.constrained_flags)
        assert [f for f, _ in a.fix] == [f for f, _ in b.fix]
        assert [c.value for c in a.values] == [c.value for c in b.values]
        for x, y in zip(a.expressions(), b.expressions()):
            assert (x.source, x.flags, x.facts, x.set_checks, x.names) == (y.source, y.flags, y.facts, y.set_checks, y.names)
    assert [d.id for d in loaded.derived] == [d.id for d in parsed.derived]
    assert [(d.expr.flags, d.expr.facts, d.expr.set_checks, d.expr.names) for d in loaded.derived] == \
        [(d.expr.flags, d.expr.facts, d.expr.set_checks, d.expr.names) for d in parsed.derived]
    assert answers(Plan(catalog, loaded)) == answers(Plan(catalog, parsed)) == answers(Plan(catalog, written))


def test_an_expression_from_the_cache_still_has_its_validated_tree(cache):
    load_rules("llm")
    meta = load_catalog("llm").choice_metadata()  # what `meta(flag).prop` reads
    for rule in list(load_rules("llm"))[:50]:
        for expr in rule.expressions():
            if isinstance(expr.source, str) and expr.code is not None:
                assert ast.dump(expr.tree) == ast.dump(parse(expr.source, meta=meta).tree)


def _cli(args: list[str], cache_dir: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ACCORD_CACHE_DIR": cache_dir, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "accord.resolver.cli", *args], env=env, capture_output=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.parametrize("args", [
    ["resolve", "--facts", "h100", "--json", *TYPICAL],
    ["resolve", "--facts", "b200", "--json", "--tp", "16", "--attention-backend", "fa3", "--kv-cache-dtype", "fp8_e5m2"],
], ids=["resolved", "conflict"])
def test_cli_output_bytes_are_the_same_with_and_without_the_cache(tmp_path, args):
    without = _cli(args, "")
    cold = _cli(args, str(tmp_path / "cache"))   # writes the entries
    warm = _cli(args, str(tmp_path / "cache"))   # reads them
    assert plan_entries(tmp_path / "cache")
    assert (without.returncode, without.stdout, without.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert (without.returncode, without.stdout, without.stderr) == (warm.returncode, warm.stdout, warm.stderr)


def test_an_edited_rule_file_is_never_answered_from_the_old_entry(tmp_path, cache):
    root = tmp_path / "rules"
    shutil.copytree(RULES_DIR, root)
    before = load_rules("llm", root)
    rule = next(r for r in before if r.reason)
    path = root / "llm" / rule.file
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    entry = next(e for e in doc["rules"] if e["id"] == rule.id)
    entry["reason"] = rule.reason + " Edited."
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    after = load_rules("llm", root)
    assert after.by_id()[rule.id].reason.endswith(" Edited.")
    assert load_rules("llm", root).by_id()[rule.id].reason.endswith(" Edited.")  # and from its own entry
    assert len(plan_entries(cache)) == 2


def test_edited_choice_metadata_in_the_catalog_rebuilds_the_rule_set(tmp_path, cache):
    """`meta(flag).prop` compiles the catalog's metadata into the rule's code, so the catalog's
    files are part of the rule set's key: an edit there must never be answered by the old code."""
    root = tmp_path / "rules"
    shutil.copytree(RULES_DIR, root)
    rule = "attn.vendor.amd"
    env_on_rocm = {"platform": "rocm"}

    class Env:
        def flag(self, name):
            return "wave" if name == "attention_backend" else None

        def fact(self, key):
            return env_on_rocm[key]
    assert load_rules("llm", root).by_id()[rule].when(Env())   # wave is an AMD kernel
    path = root / "llm" / "flags" / "exec.kernel.yaml"
    text = path.read_text(encoding="utf-8")
    assert "wave: {vendor: amd}" in text
    path.write_text(text.replace("wave: {vendor: amd}", "wave: {vendor: nvidia}"), encoding="utf-8")
    assert not load_rules("llm", root).by_id()[rule].when(Env())
    assert len(plan_entries(cache)) == 2


@pytest.mark.parametrize("damage", [b"", b"not marshal data", None], ids=["empty", "garbage", "truncated"])
def test_a_damaged_entry_is_ignored_and_rebuilt(cache, damage):
    expected = [r.id for r in load_rules("llm")]
    (entry,) = plan_entries(cache)
    good = entry.read_bytes()
    entry.write_bytes(good[: len(good) // 2] if damage is None else damage)
    assert [r.id for r in load_rules("llm")] == expected
    assert entry.read_bytes() == good  # rewritten whole


def test_an_entry_under_another_name_is_not_trusted(cache):
    load_rules("llm")
    load_rules("diffusion")
    llm = plancache.entry_path("llm", _sources("llm"))
    diffusion = plancache.entry_path("diffusion", _sources("diffusion"))
    expected = [r.id for r in load_rules("llm")]
    llm.write_bytes(diffusion.read_bytes())  # the other system's plan, under this one's name
    assert plancache.load(llm) is None
    assert [r.id for r in load_rules("llm")] == expected


def _sources(system: str) -> list[Path]:
    return plan_sources(system)


def test_an_empty_setting_switches_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCORD_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    load_rules("llm")
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


def test_entries_go_to_the_user_cache_folder_never_into_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCORD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    before = {p for p in ROOT.rglob("*.marshal")}
    load_rules("llm")
    assert plan_entries(tmp_path / "xdg" / "accord")
    assert {p for p in ROOT.rglob("*.marshal")} == before
    assert not list((tmp_path / "xdg" / "accord").glob(".tmp-*"))  # the temporary file was renamed


def test_an_unwritable_cache_folder_only_means_compiling_again(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be", encoding="utf-8")
    monkeypatch.setenv("ACCORD_CACHE_DIR", str(blocker / "accord"))
    assert len(load_rules("llm")) == len(load_rules("llm"))


def test_old_entries_of_a_system_are_pruned(cache):
    cache.mkdir(parents=True)
    for i in range(plancache.KEEP + 3):
        old = cache / f"plan-llm-{i:032d}.marshal"
        old.write_bytes(b"old")
        os.utime(old, ns=(i, i))
    load_rules("llm")
    entries = plan_entries(cache)
    assert len([p for p in entries if p.name.startswith("plan-llm-")]) == plancache.KEEP
    assert plancache.entry_path("llm", _sources("llm")) in entries  # the new one is kept


# -- the catalog's entry -------------------------------------------------------------------------------

def catalog_entries(folder: Path, system: str) -> list[Path]:
    return sorted(folder.glob(f"plan-catalog-{system}-*.marshal")) if folder.exists() else []


@pytest.mark.parametrize("system", ["llm", "diffusion"])
def test_the_catalog_from_the_cache_equals_the_catalog_from_yaml(tmp_path, cache, monkeypatch, system):
    root = tmp_path / "rules"  # a root of its own: the shipped catalog is kept per process
    shutil.copytree(RULES_DIR, root)
    monkeypatch.setenv("ACCORD_CACHE_DIR", "")
    parsed = load_catalog(system, root)
    monkeypatch.setenv("ACCORD_CACHE_DIR", str(cache))
    written = load_catalog(system, root)  # a miss: reads the YAML, then stores the entry
    assert len(catalog_entries(cache, system)) == 1
    loaded = load_catalog(system, root)   # a hit
    assert list(loaded.flags) == list(parsed.flags)  # declaration order, which --help and the solver follow
    assert loaded == parsed == written    # every field of every flag, tuples staying tuples
    assert [type(getattr(f, n)) for f in loaded for n in ("flags", "choices", "default", "deprecated_spellings")] == \
        [type(getattr(f, n)) for f in parsed for n in ("flags", "choices", "default", "deprecated_spellings")]


@pytest.mark.parametrize("damage", [b"", b"not marshal data", None], ids=["empty", "garbage", "truncated"])
def test_a_damaged_catalog_entry_is_ignored_and_rebuilt(tmp_path, cache, damage):
    root = tmp_path / "rules"
    shutil.copytree(RULES_DIR, root)
    expected = load_catalog("llm", root)
    (entry,) = catalog_entries(cache, "llm")
    good = entry.read_bytes()
    entry.write_bytes(good[: len(good) // 2] if damage is None else damage)
    assert load_catalog("llm", root) == expected
    assert entry.read_bytes() == good  # rewritten whole


def test_an_edited_catalog_file_is_never_answered_from_the_old_entry(tmp_path, cache):
    root = tmp_path / "rules"
    shutil.copytree(RULES_DIR, root)
    before = load_catalog("llm", root)
    flag = next(f for f in before if f.help)
    path = next(p for p in (root / "llm").rglob("*.yaml") if f"name: {flag.name}\n" in p.read_text(encoding="utf-8"))
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    entry = next(e for e in doc["flags"] if e["name"] == flag.name)
    entry["help"] = flag.help + " Edited."
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    assert load_catalog("llm", root)[flag.name].help.endswith(" Edited.")
    assert load_catalog("llm", root)[flag.name].help.endswith(" Edited.")  # and from its own entry
    assert len(catalog_entries(cache, "llm")) == 2


def test_a_catalog_entry_of_the_other_system_is_not_trusted(tmp_path, cache):
    root = tmp_path / "rules"
    shutil.copytree(RULES_DIR, root)
    expected = load_catalog("llm", root)
    load_catalog("diffusion", root)
    (llm,) = catalog_entries(cache, "llm")
    (diffusion,) = catalog_entries(cache, "diffusion")
    llm.write_bytes(diffusion.read_bytes())
    assert plancache.load(llm) is None
    assert load_catalog("llm", root) == expected
