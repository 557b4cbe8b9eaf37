"""How many real failures from public SGLang issue reports Accord catches before launch.

Why: resolution rules only see what upstream's resolution and launch code check; a launch that
hangs or produces garbage on the GPU passes both. The reports in
tests/differential/fixtures/issue_reports_llm.yaml are real launch commands with what happened; a
failure counts as caught when Accord refuses the command, or warns, naming the rule the entry
expects (the right cause). Each report runs with the SGLang release the reporter ran
(`packages.sglang`), so a known issue (rules/llm/known_issues.yaml) speaks only for the releases
in its range.

usage: python -m tests.differential.issue_reports     # prints one line per report and the figure
"""

from __future__ import annotations

from pathlib import Path

import yaml

from accord.resolver.api import ConflictError, resolve
from accord.resolver.commandline.flagparse import parse_flags
from accord.resolver.errors import AccordError
from accord.resolver.facts.machine import load_facts
from tests.differential.gen_llm import accord_argv

REPORTS = Path(__file__).resolve().parent / "fixtures" / "issue_reports_llm.yaml"
FAILURES = ("hang", "crash", "garbage", "launch-error")


def load_reports() -> list[dict]:
    return yaml.safe_load(REPORTS.read_text())["reports"]


def accord_verdict(report: dict) -> dict:
    """{"status": ok|refused|usage, "rules": [...]}: how `accord resolve` answers (refused, or
    resolved with warnings), with the rules that refused or warned, plus those `--strict` refuses
    (a known-bad rule stays a warning when another rule already refuses the command)."""
    plain = _verdict(report, strict=False)
    if plain["status"] == "refused":
        strict = _verdict(report, strict=True)
        plain["rules"] = sorted(set(plain["rules"]) | set(strict["rules"]))
    return plain


def _verdict(report: dict, strict: bool) -> dict:
    machine = report["machine"]
    overrides = [f"{k}={v}" for k, v in (machine.get("fact") or {}).items()]
    overrides.append(f"packages.sglang={report['sglang']}")
    try:
        _, parsed = parse_flags(accord_argv(report["argv"]))
        facts = load_facts(machine["preset"], overrides, model_path=parsed.user.get("model_path"),
                           system=parsed.system)
        config = resolve(parsed.system, parsed.user, facts, parsed.sources, warnings=parsed.warnings,
                         strict=strict)
    except ConflictError as err:
        return {"status": "refused", "rules": sorted({r for c in err.conflicts for r in c.rules})}
    except AccordError as err:
        return {"status": "usage", "rules": [], "error": str(err)}
    warned = [w[1:w.index("]")] for w in config.warnings if w.startswith("[") and "]" in w]
    return {"status": "ok", "rules": warned}


def caught(report: dict, verdict: dict) -> bool:
    """Refused or warned naming the expected rule (a failure), or left alone (a working launch)."""
    if report["outcome"] not in FAILURES:
        return verdict["status"] == "ok" and not any(r.startswith("bad.") for r in verdict["rules"])
    return report["caught_by"] is not None and report["caught_by"] in verdict["rules"]


def main() -> int:
    reports = load_reports()
    failures = [r for r in reports if r["outcome"] in FAILURES]
    hits = 0
    for report in reports:
        verdict = accord_verdict(report)
        ok = caught(report, verdict)
        hits += ok and report in failures
        print(f"{report['id']:24} {report['outcome']:12} accord={verdict['status']:8} "
              f"expected={report['caught_by'] or '-':36} {'yes' if ok else 'no'}")
    visible = [r for r in failures if r["caught_by"]]
    print(f"real failures caught before launch: {hits} of {len(failures)} "
          f"({hits} of {len(visible)} whose cause a launch setting shows); "
          f"working launches left alone: {sum(caught(r, accord_verdict(r)) for r in reports if r not in failures)}"
          f" of {len(reports) - len(failures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
