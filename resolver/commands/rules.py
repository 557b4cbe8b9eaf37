"""`accord rules`: lint the rule set, count it, map it to the seed rules, or export its graph.

    accord rules --lint [--system S]        exit 0 clean, 1 problems found
    accord rules --stats [--system S] [--json]
    accord rules --graph dot|json [--system S]
"""

from __future__ import annotations

import collections
import json

import yaml

from accord.resolver.commands.options import CommandParser
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import RULES_DIR, SYSTEMS, load_catalog
from accord.resolver.language.ruleset import load_rules


def _systems(choice: str | None) -> list[str]:
    return [choice] if choice else list(SYSTEMS)


def coverage(system: str) -> dict:
    """Seed rule ids -> the Accord rules encoding them, plus the ones deliberately not encoded."""
    encoded: dict[str, list[str]] = collections.defaultdict(list)
    for rule in load_rules(system):
        for seed_id in rule.seed:
            encoded[seed_id].append(rule.id)
    path = RULES_DIR / system / "coverage.yaml"
    not_encoded = {}
    if path.exists():
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        # Aliases, deprecated spellings, types and choices are encoded by the catalog itself.
        for entry in doc.get("in_catalog") or ():
            encoded[entry["seed"]].append(f"catalog:{entry['flag']}")
        # Parsing, config files, idempotence and the frozen result are the resolver's own job.
        for entry in doc.get("in_resolver") or ():
            encoded[entry["seed"]].append("resolver")
        not_encoded = {e["seed"]: e["why"] for e in doc.get("not_encoded") or () if e["seed"] not in encoded}
    total = len(encoded) + len(not_encoded)
    return {
        "encoded": {k: sorted(v) for k, v in sorted(encoded.items())},
        "not_encoded": dict(sorted(not_encoded.items())),
        "total": total,
        "percent": round(100.0 * len(encoded) / total, 1) if total else 0.0,
    }


def stats(system: str) -> dict:
    ruleset = load_rules(system)
    by_area: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for rule in ruleset:
        by_area[rule.area][rule.kind] += 1
    return {
        "system": system,
        "flags": len(load_catalog(system)),
        "rules": len(ruleset),
        "by_kind": dict(sorted(collections.Counter(r.kind for r in ruleset).items())),
        "by_area": {area: dict(sorted(c.items())) for area, c in sorted(by_area.items())},
        "seed_coverage": coverage(system),
    }


def _print_stats(data: dict) -> None:
    cov = data["seed_coverage"]
    print(f"{data['system']}: {data['flags']} flags, {data['rules']} rules "
          f"({', '.join(f'{k} {v}' for k, v in data['by_kind'].items())})")
    for area, kinds in data["by_area"].items():
        print(f"  {area:<16} {sum(kinds.values()):>4}  " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
    print(f"  seed rules: {len(cov['encoded'])} of {cov['total']} encoded ({cov['percent']}%), "
          f"{len(cov['not_encoded'])} not encoded (reasons: --stats --json)")


def run_lint(systems: list[str]) -> int:
    from accord.resolver.facts.machine import list_presets, load_preset
    from accord.resolver.facts.schema import FACT_KEYS
    from accord.resolver.commands.rules_lint import lint

    presets = {name: load_preset(name) for name in list_presets()}
    failed = False
    for system in systems:
        problems = lint(load_catalog(system), load_rules(system), FACT_KEYS, presets)
        for problem in problems:
            print(f"{system}: {problem}")
        print(f"{system}: {'FAILED, ' + str(len(problems)) + ' problem(s)' if problems else 'ok'}")
        failed |= bool(problems)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="accord rules", description="Lint, count or export the rule set.")
    parser.add_argument("--system", choices=SYSTEMS)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--lint", action="store_true", help="check the rules; exit 1 on problems")
    action.add_argument("--stats", action="store_true", help="counts and seed-rule coverage")
    action.add_argument("--graph", choices=("dot", "json"), help="export the rule graph")
    parser.add_argument("--json", action="store_true", help="with --stats: JSON output")
    opts = parser.parse_args(argv)
    systems = _systems(opts.system)
    if opts.lint:
        return run_lint(systems)
    if opts.stats:
        data = [stats(s) for s in systems]
        if opts.json:
            print(json.dumps(data if len(data) > 1 else data[0], indent=2, sort_keys=True))
        else:
            for item in data:
                _print_stats(item)
            if len(data) > 1:
                encoded = sum(len(d["seed_coverage"]["encoded"]) for d in data)
                total = sum(d["seed_coverage"]["total"] for d in data)
                print(f"all systems: {encoded} of {total} seed rules encoded ({100.0 * encoded / total:.1f}%)")
        return 0
    from accord.resolver.language.graph import build_graph, export

    if len(systems) != 1:
        raise UsageError("--graph exports one system at a time: add --system llm or --system diffusion.")
    print(export(build_graph(load_catalog(systems[0]), load_rules(systems[0])), opts.graph))
    return 0
