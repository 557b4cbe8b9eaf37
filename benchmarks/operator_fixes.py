"""Answers an operator would apply (issue 25): on the wrong launch commands of
tests/data/operator_fixes.yaml, the fraction whose first fix is the one an operator would apply
(target >= 90%), whether every combined fix keeps the served model and resolves when pasted, and
whether `--relax` keeps the model and never picks a slower backend than the fastest legal one by
the preference data (rules/preferences/).

    python benchmarks/operator_fixes.py [-v]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.operator_fixes import cases, judge  # noqa: E402


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    start = time.perf_counter()
    verdicts = [judge(case) for case in cases()]
    took = time.perf_counter() - start
    matched = sum(v.matches for v in verdicts)
    with_combined = [v for v in verdicts if v.conflicts]
    for v in verdicts:
        if verbose or not v.matches or not v.combined_resolves or not v.combined_keeps_model or v.relax_slower:
            print(f"{'ok ' if v.matches else 'MISS'} {v.id}: first {v.first}; conflicts {v.conflicts}; "
                  f"combined keeps model {v.combined_keeps_model}, resolves {v.combined_resolves}; "
                  f"relax keeps model {v.relax_keeps_model}, slower {v.relax_slower}")
    print(f"first fix is the operator's: {matched}/{len(verdicts)} = {matched / len(verdicts):.0%}")
    print(f"combined fix keeps the model: {sum(v.combined_keeps_model for v in with_combined)}/{len(with_combined)}; "
          f"resolves when pasted: {sum(v.combined_resolves for v in with_combined)}/{len(with_combined)}")
    print(f"--relax keeps the model: {sum(v.relax_keeps_model for v in verdicts)}/{len(verdicts)}; "
          f"picks a slower backend than the fastest legal: {sum(bool(v.relax_slower) for v in verdicts)}")
    print(f"{len(verdicts)} commands judged in {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
