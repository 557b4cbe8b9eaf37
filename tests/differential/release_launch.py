"""Do the commands `accord launch` writes for an older SGLang release parse in that release?

For each release asked, random legal commands (tests/differential/gen_llm.py, the generator the
oracle checks use) and the hand-picked ones are first written as a user of that release would type
them (`accord upgrade --to V`: its spellings; a command V cannot say is counted apart), then resolved
with `--fact packages.sglang=V`, the way `accord launch --dry-run --fact packages.sglang=V` does. A
command Accord still refuses for that release (a typed flag or value V lacks: exit 2 naming V) is
counted apart; every emitted command is parsed by V's own parser
(tests/differential/release_parse.py, built from V's wheel in the oracle venv).

usage: python -m tests.differential.release_launch [--releases 0.4.10.post2,0.5.2,0.5.9]
       [--random 150] [--seed 3636] [--out DIR]
prints per release: emitted, refused for the release, and "accepted by V's own parser: K of N".
A development tool like the oracle (needs its venv and, the first time, the network).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tests.differential import gen_llm, release_parse

DEFAULT_RELEASES = "0.4.10.post2,0.5.2,0.5.9"


def emitted_commands(cases: list[dict], release: str) -> tuple[list[dict], dict[str, str], dict[str, str]]:
    """([{id, argv}] Accord emitted for `release`, {id: why Accord refused it for the release},
    {id: why Accord refused it anyway})."""
    from accord.resolver.api import resolve
    from accord.resolver.commandline.emit import emit
    from accord.resolver.commandline.flagparse import parse_flags
    from accord.resolver.commandline.release_target import read_older_words, refuse_unparsed
    from accord.resolver.errors import AccordError
    from accord.resolver.facts.machine import load_facts

    out, for_release, other = [], {}, {}
    for case in cases:
        argv = gen_llm.accord_argv(case["argv"])
        try:
            older = in_release_words(argv, release)
        except AccordError as err:  # a word 0.5.23's own parser refuses (the seed's spelling)
            other[case["id"]] = str(err).splitlines()[0]
            continue
        if older is None:
            for_release[case["id"]] = "the release cannot say this command (accord upgrade exits 3)"
            continue
        case = {**case, "id": case["id"] + ("+upgraded" if older != argv else "")}
        argv, older_words = read_older_words(older, "llm", {})
        try:
            _, parsed = parse_flags(argv, system="llm")
            facts = load_facts(case["preset"], [f"packages.sglang={release}"],
                               model_path=parsed.user.get("model_path"), system="llm")
        except AccordError as err:
            other[case["id"]] = str(err).splitlines()[0]
            continue
        try:
            refuse_unparsed(older, {}, "llm", facts)
        except AccordError as err:
            for_release[case["id"]] = str(err).splitlines()[0]
            continue
        try:
            config = resolve("llm", parsed.user, facts, parsed.sources, warnings=parsed.warnings)
        except AccordError as err:
            other[case["id"]] = str(err).splitlines()[0]
            continue
        out.append({"id": case["id"], "argv": emit(config).args})
    return out, for_release, other


def in_release_words(argv: list[str], release: str) -> list[str] | None:
    """The generated command (0.5.23's words) as a user of `release` would type it, through
    `accord upgrade`'s rewrite; None when that release cannot say it."""
    from accord.resolver.commandline.release_target import rewrite
    from accord.resolver.commandline.releases import release_catalog

    catalog = release_catalog("llm")
    result = rewrite(argv, "llm", catalog.newest, release)
    return list(result.words) if result.expressed else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.differential.release_launch")
    ap.add_argument("--releases", default=DEFAULT_RELEASES)
    ap.add_argument("--random", type=int, default=150)
    ap.add_argument("--seed", type=int, default=3636)
    ap.add_argument("--out", help="keep the emitted commands and the parse results in this folder")
    args = ap.parse_args(argv)
    cases = gen_llm.random_cases(args.random, args.seed) + gen_llm.hand_cases()
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="accord-release-launch-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for release in args.releases.split(","):
        emitted, for_release, other = emitted_commands(cases, release)
        path = out_dir / f"emitted-{release}.json"
        path.write_text(json.dumps(emitted, indent=1))
        results = release_parse.run(release, str(path))["results"]
        refused = [r for r in results if not r["accepted"]]
        (out_dir / f"parsed-{release}.json").write_text(json.dumps(results, indent=1, sort_keys=True))
        for result in refused:
            print(f"  {release} {result['id']}: {result['message'][:300]}")
        print(f"{release}: {len(cases)} commands; {len(for_release)} refused by Accord for this release "
              f"(a typed flag or value it lacks); {len(other)} refused for other reasons; "
              f"accepted by sglang {release}'s own parser: {len(emitted) - len(refused)} of {len(emitted)}")
        failed += len(refused)
    print(f"results in {out_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
