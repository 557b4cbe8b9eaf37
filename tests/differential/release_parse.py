"""Parse launch commands with an SGLang release's own parser: does release V accept this argv?

    python -m tests.differential.release_parse --release 0.4.10.post2 CASES.json [--json OUT.json]
    python -m tests.differential.release_parse --release 0.5.9 --system diffusion CASES.json

CASES.json is a JSON list of `{"id", "argv"}` (argv: the flags after `sglang serve`). The release's wheel is
installed without dependencies under <tmp>/accord-sglang-releases (downloaded once) and its
`ServerArgs.add_cli_args` is imported in a subprocess of the oracle venv (<tmp>/accord-oracle-venv, see
../shared/oracle/README.md) with stubs for what the release imports and the venv lacks, as
rules/llm/releases/dump_parser.py does for the release catalog. Each argv is parsed with a fresh
`argparse.ArgumentParser(prog="sglang serve")` as the release's `prepare_server_args` builds it (so
argparse's prefix matching is on, as upstream's), and argparse's refusal is caught (SystemExit, its stderr).

A development tool like the oracle: it needs that venv and, the first time, the network; no test imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def run(release: str, cases_file: str, system: str = "llm") -> dict:
    from accord.rules.llm.releases import dump_parser

    return dump_parser.dump(release, system, cases_file=cases_file)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.differential.release_parse", description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", required=True, help="the SGLang release whose parser is used, e.g. 0.4.10.post2")
    ap.add_argument("--system", choices=("llm", "diffusion"), default="llm")
    ap.add_argument("--json", metavar="OUT", help="also write the results here")
    ap.add_argument("cases", metavar="ARGV_FILE", help="a JSON list of {id, argv}")
    args = ap.parse_args(argv)
    cases = json.loads(Path(args.cases).read_text())
    if not isinstance(cases, list) or not all(isinstance(c, dict) and isinstance(c.get("argv"), list) for c in cases):
        ap.error(f"{args.cases}: expected a JSON list of {{\"id\", \"argv\"}}")
    try:
        out = run(args.release, args.cases, args.system)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    results = out["results"]
    for r in results:
        if r["accepted"]:
            print(f"{r['id']}: accepted")
        else:
            print(f"{r['id']}: refused: {r['message']}")
    accepted = sum(r["accepted"] for r in results)
    print(f"accepted by sglang {out['release']}'s own parser: {accepted} of {len(results)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"release": out["release"], "system": args.system, "results": results,
                                               "patches": out.get("patches", [])}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
