"""Score `accord launch` against upstream: does upstream, given the emitted command, hold Accord's value
for every field it decides?

Why: the promise of `accord launch` is that upstream SGLang 0.5.23's own parsing and resolution arrive
at exactly Accord's values. For each stored case (tests/differential/fixtures/launch_oracle.json) this
resolves the command with Accord again, writes its upstream launch, checks that it is the command the
fixture's upstream answer belongs to, and compares every upstream field that carries an Accord setting
(upstream_parser.yaml's flags, and the options of written_as) with Accord's value. Field classes that
are compared differently, and cases that differ, are listed with their reasons in
tests/differential/launch_exceptions.yaml.

usage: python -m tests.differential.launch_score [FIXTURE...] [--ids]   (prints the agreement figures)
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
from pathlib import Path
from typing import Any

import yaml

from tests.differential.run_launch import (
    DEFAULT_FIXTURE,
    accord_launch,
    upstream_args,
    upstream_defaults,
    values_digest,
)

FIXTURES = sorted(DEFAULT_FIXTURE.parent.glob("launch_oracle*.json"))

EXCEPTIONS = Path(__file__).resolve().parent / "launch_exceptions.yaml"


@functools.lru_cache(maxsize=None)
def exceptions() -> dict:
    return yaml.safe_load(EXCEPTIONS.read_text())


def _plain(value: Any) -> Any:
    from accord.resolver.frozen import thaw
    value = thaw(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _model(value: Any) -> Any:
    """A model folder compared by its last two parts (org/name): both sides read copies of it."""
    return "/".join(Path(value).parts[-2:]) if isinstance(value, str) and "/" in value else value


def same(up: Any, ac: Any) -> bool:
    up, ac = _plain(up), _plain(ac)
    if isinstance(up, bool) or isinstance(ac, bool):
        return up is ac
    if isinstance(up, (int, float)) and isinstance(ac, (int, float)):
        return abs(up - ac) < 1e-9
    if isinstance(ac, (dict, list)) and isinstance(up, str):
        try:
            return json.loads(up) == ac
        except ValueError:
            return False
    return up == ac


def expected(config, system: str) -> dict[str, Any]:
    """{upstream field: Accord's value for it}: the catalog settings upstream's parser has, and the
    options written_as computes (under upstream's field name)."""
    from accord.resolver.commandline.emit import _eval, _ValuesEnv, load_spec
    from accord.resolver.language.catalog import load_catalog

    spec = load_spec(system)
    out = {name: config.values[name] for name in spec.flags
           if name in config.values and name not in spec.expressed_by}
    env = _ValuesEnv(config, load_catalog(system).defaults())
    for entry in spec.written_as:
        # Upstream holds `holds` (the expression only undoes what upstream does to the value it is
        # given) or else the written value itself.
        out[entry["flag"][2:].replace("-", "_")] = _eval(entry.get("holds", entry["value"]), env)
    return out


def _holds(when: str, config) -> bool:
    from accord.resolver.commandline.emit import _eval, _ValuesEnv
    from accord.resolver.language.catalog import load_catalog
    return bool(_eval(when, _ValuesEnv(config, load_catalog(config.system).defaults())))


def options_of(words: list[str]) -> list[tuple[str, ...]]:
    """A command's options, each with its values, in a fixed order: upstream's parser reads each
    option once, so the order they are written in changes nothing."""
    groups: list[list[str]] = []
    for word in words:
        if word.startswith("--") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return sorted(tuple(g) for g in groups)


def compare(case: dict, answer: dict, defaults: dict) -> list[tuple[str, Any, Any]]:
    """The disagreements of one case: [(field, upstream, accord)]. Pseudo-fields: `accord` (Accord
    now rejects the command), `stale` (Accord's values moved since the fixture was written, so the
    command did too and upstream's answer to it is unknown), `emitter` (the same values now give
    another command: the emitter changed), `status` (upstream refused the command)."""
    config, launch = accord_launch(case)
    if config is None:
        return [("accord", "ok", f"rejected: {launch}")]
    args = upstream_args(case["system"], launch.args)
    if options_of(args) != options_of(case["emitted"]) or dict(launch.env) != case["env"]:
        if values_digest(config) != case["values_sha"]:
            return [("stale", "fixture command", "values moved since: regenerate with run_launch")]
        changed = sorted(set(args) ^ set(case["emitted"]))[:8]
        return [("emitter", "stored command", f"same values, another command now (words {changed})")]
    if answer["status"] != "ok":
        return [("status", f"error: {answer.get('error', '')[:200]}", "ok")]
    fields = exceptions()["fields"].get(case["system"]) or {}
    upstream = {**defaults, **answer["resolved"]}
    diffs = []
    for name, value in sorted(expected(config, case["system"]).items()):
        rule = fields.get(name) or {}
        up, ac = upstream.get(name, "<n/a>"), value
        if isinstance(up, str) and up.startswith("<n/a"):
            continue  # upstream's server object holds no such field (the oracle says so)
        if rule.get("compare") == "skip":
            continue
        if "left_to_upstream" in rule and _plain(ac) in rule["left_to_upstream"]:
            continue  # Accord's value says "upstream decides" (the reason is in the exceptions file)
        if "upstream_forces_when" in rule and _holds(rule["upstream_forces_when"], config):
            continue
        if rule.get("compare") == "model":
            up, ac = _model(up), _model(ac)
        if not same(up, ac):
            diffs.append((name, up, _plain(ac)))
    return diffs


def load_fixtures(paths=None) -> dict:
    """Several launch fixtures as one (their case ids are distinct)."""
    merged: dict = {"cases": [], "oracle": {}}
    for path in paths or FIXTURES:
        data = json.loads(Path(path).read_text())
        clash = set(data["oracle"]) & set(merged["oracle"])
        if clash:
            raise ValueError(f"{path} repeats case ids {sorted(clash)[:5]}")
        merged["cases"] += data["cases"]
        merged["oracle"].update(data["oracle"])
    return merged


def score(fixture: dict) -> dict[str, list]:
    defaults = {s: upstream_defaults(s) for s in ("llm", "diffusion")}
    return {case["id"]: compare(case, fixture["oracle"][case["id"]], defaults[case["system"]])
            for case in fixture["cases"] if case["id"] in fixture["oracle"]}


def summary(fixture: dict, results: dict) -> list[str]:
    """The agreement lines: per system, cases where upstream accepts the emitted command and holds
    every compared field; then the same counting the listed exceptions."""
    listed = exceptions().get("cases") or {}
    lines = []
    for system in ("llm", "diffusion"):
        every = [c["id"] for c in fixture["cases"] if c["system"] == system and c["id"] in results]
        ids = [i for i in every if not (results[i] and results[i][0][0] == "stale")]
        agree = sum(1 for i in ids if not results[i])
        explained = sum(1 for i in ids if results[i] and i in listed)
        lines.append(f"{system}: upstream accepts and agrees on every field in {agree}/{len(ids)} = "
                     f"{100 * agree / max(1, len(ids)):.1f}% ({explained} listed exceptions; "
                     f"{len(ids) - agree - explained} unexplained; {len(every) - len(ids)} stale)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture", nargs="*", help="default: every tests/differential/fixtures/launch_oracle*.json")
    parser.add_argument("--ids", action="store_true", help="list every disagreeing case")
    parser.add_argument("--show", type=int, default=3)
    opts = parser.parse_args(argv)
    fixture = load_fixtures(opts.fixture or None)
    results = score(fixture)
    for line in summary(fixture, results):
        print(line)
    by_field: dict[str, list[str]] = collections.defaultdict(list)
    for cid, diffs in results.items():
        for field, *_ in diffs:
            by_field[field].append(cid)
    for field, ids in sorted(by_field.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{field}: {len(ids)} case(s)")
        for cid in ids[:opts.show]:
            diff = next(d for d in results[cid] if d[0] == field)
            print(f"  {cid}: upstream={diff[1]!r} accord={diff[2]!r}")
    if opts.ids:
        for cid, diffs in sorted(results.items()):
            if diffs:
                print(f"  {cid}: {', '.join(d[0] for d in diffs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
