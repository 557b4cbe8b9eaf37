"""`accord known-issues [--release V] [--symptom S] [--json] [launch flags ...]`: known SGLang issues.

    $ accord known-issues                          # every known issue
    $ accord known-issues --release 0.4.10.post2   # those affecting that release
    $ accord known-issues --release 0.4.10.post2 --facts b200 --model-path deepseek-ai/DeepSeek-V3 \\
          --tp 8 --attention-backend KERNEL        # those this launch triggers on that release

The issues are the rules of kind known_bad (rules/<system>/known_issues.yaml). Given launch flags
(parsed as `accord resolve` parses them, with --facts / --fact), the launch is resolved for the
release (--release, else the engine's package fact, else the release the rules follow) and the issues it warns about are
listed. Exit codes as `accord resolve`: 0 listed (whether or not an issue applies), 2 bad usage (an
unknown flag, a release that is not an SGLang version), 3 the launch has no legal configuration.
"""

from __future__ import annotations

import argparse
import json

from accord.resolver.commandline.release_target import release_fact, rules_release
from accord.resolver.commands.options import add_fact_options
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import SYSTEMS
from accord.resolver.language.ruleset import SYMPTOMS, known_issues, release_in_bounds, release_key

_OWN = ("--release", "--symptom", "--json", "--system")


def add_options(parser: argparse.ArgumentParser) -> None:
    add_fact_options(parser)
    parser.add_argument("--release", metavar="VERSION",
                        help="only the issues affecting this SGLang release, e.g. 0.4.10.post2 (with launch "
                             "flags: the release the launch is checked for)")
    parser.add_argument("--symptom", choices=SYMPTOMS, help="only issues with this symptom")
    parser.add_argument("--json", action="store_true", help="print JSON for tools")


def _launch_given(argv: list[str]) -> bool:
    """Whether anything besides the listing options was typed (launch flags, --facts, --fact)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in _OWN:
            skip = "=" not in word and name != "--json"
            continue
        return True
    return False


def _checked_release(text: str | None) -> str | None:
    if text is not None and release_key(text) is None:
        raise UsageError(f"--release {text!r} is not an SGLang release; write one like 0.5.6 or 0.4.10.post2 "
                         f"(no rc or dev builds).")
    return text


def _entry(issue: dict) -> dict:
    return {"id": issue["id"], "symptom": issue["symptom"], "releases": issue["releases"],
            "issue": list(issue["issue"]), "fixed_by": issue["fixed_by"], "message": issue["message"]}


def _render(issues: list[dict], head: str) -> str:
    from accord.resolver.explaining.layout import terminal_width, wrap_hanging

    width = terminal_width()
    lines = [head]
    for issue in issues:
        fix = f"fixed by {issue['fixed_by']}" if issue["fixed_by"] else "no fix merged"
        lines.append(f"{issue['id']}  [{issue['symptom']}]  SGLang {issue['releases']}  ({fix})")
        lines += wrap_hanging("    issue: ", ", ".join(issue["issue"]), width)
        lines += wrap_hanging("    ", issue["message"], width)
    return "\n".join(lines)


def _all_issues() -> list[dict]:
    return [issue for system in SYSTEMS for issue in known_issues(system)]


def main(argv: list[str]) -> int:
    argv = list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n", 1)[1])
        return 0
    if _launch_given(argv):
        return _launch(argv)
    from accord.resolver.commands.options import CommandParser

    own = CommandParser(prog="accord known-issues", add_help=False)
    add_options(own)
    own.add_argument("--system", choices=SYSTEMS)
    opts = own.parse_args(argv)
    release = _checked_release(opts.release)
    issues = [i for i in (known_issues(opts.system) if opts.system else _all_issues())
              if (release is None or release_in_bounds(release_key(release), i["bounds"]))
              and (opts.symptom is None or i["symptom"] == opts.symptom)]
    if opts.json:
        print(json.dumps({"release": release, "launch": None, "issues": [_entry(i) for i in issues]},
                         indent=2, sort_keys=True))
        return 0
    where = f"affecting SGLang {release}" if release else "in the releases each names"
    print(_render(issues, f"# {len(issues)} known SGLang issues {where}"))
    return 0


def _launch(argv: list[str]) -> int:
    """The issues a launch triggers on a release: resolve it and keep the known-issue warnings."""
    from accord.resolver.api import ConflictError, resolve
    from accord.resolver.commands.resolve import print_conflict, resolve_command

    release = _checked_release(_option(argv, "--release"))
    if release is not None:
        argv = [*argv, "--fact", f"{release_fact()}={release}"]
    opts, parsed, facts = resolve_command(argv, "accord known-issues", options=add_options)
    release = release or str(facts.get(release_fact()) or rules_release(parsed.system))
    try:
        config = resolve(parsed.system, parsed.user, facts, parsed.sources, warnings=parsed.warnings)
    except ConflictError as err:
        return print_conflict(err, opts.json, parsed.warnings, parsed)
    warned = {w[1:w.index("]")] for w in config.warnings if w.startswith("[bad.") and "]" in w}
    issues = [i for i in known_issues(parsed.system)
              if i["id"] in warned and (opts.symptom is None or i["symptom"] == opts.symptom)]
    if opts.json:
        print(json.dumps({"release": release, "launch": True, "hash": config.hash,
                          "issues": [_entry(i) for i in issues]}, indent=2, sort_keys=True))
        return 0
    print(_render(issues, f"# this launch triggers {len(issues)} known SGLang issue(s) on SGLang {release}"))
    return 0


def _option(argv: list[str], name: str) -> str | None:
    """The value of `name` in argv (`--name V` or `--name=V`), or None."""
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None
