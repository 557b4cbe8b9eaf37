"""Do two checkouts print the same conflicts? Byte-for-byte comparison of `accord resolve` outputs.

Why: making the explanation and fixes faster must not change a single fix, rank or proof. This runs
many commands through `accord resolve --json` in two checkouts (by default /work/main and this one)
and diffs every output; each command that ends in a conflict (exit 3) is also run as text and with
`--relax` (JSON and text), since those print the fixes and the combined fix too.

The commands: every rule case (tests/rule_cases, both systems, fires and quiet), every command of
the llm and diffusion differential fixtures (tests/differential/fixtures), and the benchmark's
conflict. Each checkout runs them in one process (the CLI's `main`, stdout captured), with the plan
cache off, so the comparison is of the code alone.

    python benchmarks/conflict_equivalence.py [--base /work/main] [--head .]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HEAD = Path(__file__).resolve().parents[1]
CONFLICT = 3  # the documented exit code of "no legal configuration"


def _fact_arg(key, value) -> str:
    if value is None:
        return f"{key}=none"
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    return f"{key}={value}"


def commands(model_root: Path) -> list[tuple[str, list[str]]]:
    """(id, argv after `accord`) for every command compared; model folders live under model_root."""
    import yaml

    from tests.differential.diffusion_gen import localize, materialize
    from tests.differential.gen_llm import accord_argv

    out: list[tuple[str, list[str]]] = [
        ("bench-conflict", ["resolve", "--facts", "b200", "--tp", "16", "--attention-backend", "fa3",
                            "--kv-cache-dtype", "fp4_e2m1"])]
    for system in ("llm", "diffusion"):
        for path in sorted((HEAD / "tests" / "rule_cases" / system).glob("*.yaml")):
            for entry in yaml.safe_load(path.read_text()) or ():
                for mode in ("fires", "quiet"):
                    items = entry.get(mode) or []
                    for i, case in enumerate(items if isinstance(items, list) else [items]):
                        argv = ["resolve", "--system", system, "--facts", case.get("facts", "cpu")]
                        for key, value in (case.get("fact") or {}).items():
                            argv += ["--fact", _fact_arg(key, value)]
                        out.append((f"{system}:{entry['rule']}:{mode}:{i}", argv + shlex.split(case.get("flags", ""))))
    fixtures = HEAD / "tests" / "differential" / "fixtures"
    llm = json.loads((fixtures / "llm_oracle.json").read_text())
    for case in llm["cases"]:
        out.append((f"llm-fixture:{case['id']}", ["resolve", "--facts", case["preset"], *accord_argv(case["argv"])]))
    materialize(model_root)
    for case in json.loads((fixtures / "diffusion_oracle.json").read_text()):
        out.append((f"diffusion-fixture:{case['id']}",
                    ["resolve", "--system", "diffusion", "--facts", case["preset"], *localize(case["argv"], model_root)]))
    return out


def _run(main, argv: list[str]) -> list:
    """[exit code, stdout, stderr] of one command, with the checkout's own folder (the worker's working
    directory) and the one the commands' model folders live in (HEAD's) written `<CHECKOUT>`: two
    checkouts that print the same thing about their own files agree."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            rc = main(argv)
        except SystemExit as stop:  # argparse's own usage errors
            rc = stop.code
        except Exception as crash:  # noqa: BLE001 (a crash is an output too: both sides must agree)
            rc = f"crashed: {type(crash).__name__}: {crash}"
    def portable(text: str) -> str:
        return text.replace(os.getcwd(), "<CHECKOUT>").replace(str(HEAD), "<CHECKOUT>")
    return [rc, portable(stdout.getvalue()), portable(stderr.getvalue())]


def worker(commands_path: str, out_path: str) -> None:
    """Run every command with this process's checkout (PYTHONPATH) and write the outputs."""
    try:
        from accord.resolver.cli import main
    except ImportError:  # a checkout from before the `accord` namespace
        from resolver.cli import main

    results = {}
    for cid, argv in json.loads(Path(commands_path).read_text()):
        first = results[f"{cid} --json"] = _run(main, [argv[0], "--json", *argv[1:]])
        if first[0] == CONFLICT:
            results[f"{cid} (text)"] = _run(main, argv)
            results[f"{cid} --relax --json"] = _run(main, [argv[0], "--relax", "--json", *argv[1:]])
            results[f"{cid} --relax (text)"] = _run(main, [argv[0], "--relax", *argv[1:]])
    Path(out_path).write_text(json.dumps(results, sort_keys=True))


def _namespace_root(tree: Path, folder: Path) -> Path:
    """A folder whose `accord/` links to the checkout's four code folders, so a checkout that was
    never installed imports as `accord.*` (ahead of whatever the running environment installed)."""
    package = folder / "accord"
    package.mkdir(parents=True)
    for name in ("resolver", "rules", "engine", "kernels"):
        (package / name).symlink_to(tree / name, target_is_directory=True)
    return folder


def run_checkout(tree: Path, commands_path: Path, out_path: Path) -> dict:
    path = f"{_namespace_root(tree, out_path.with_suffix('.ns'))}{os.pathsep}{tree}"
    env = {**os.environ, "PYTHONPATH": path, "ACCORD_CACHE_DIR": "", "COLUMNS": "100",
           "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, __file__, "--worker", str(commands_path), str(out_path)],
                   check=True, env=env, cwd=tree)
    return json.loads(out_path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="/work/main", help="the checkout to compare against")
    parser.add_argument("--head", default=str(HEAD), help="the checkout under test")
    parser.add_argument("--base-outputs", metavar="FILE",
                        help="reuse the base checkout's outputs from FILE (written there when missing)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        worker(*opts.worker)
        return 0
    with tempfile.TemporaryDirectory(prefix="accord-equiv-") as tmp:
        tmp_path = Path(tmp)
        sys.path.insert(0, str(HEAD))
        # A fixed folder for the model files, so saved base outputs name the same paths.
        listed = commands(Path(tempfile.gettempdir()) / "accord-equivalence-models")
        (tmp_path / "commands.json").write_text(json.dumps(listed))
        saved = Path(opts.base_outputs) if opts.base_outputs else None
        if saved is not None and saved.is_file():
            base = json.loads(saved.read_text())
        else:
            base = run_checkout(Path(opts.base).resolve(), tmp_path / "commands.json", tmp_path / "base.json")
            if saved is not None:
                saved.write_text(json.dumps(base, sort_keys=True))
        head = run_checkout(Path(opts.head).resolve(), tmp_path / "commands.json", tmp_path / "head.json")
    conflicts = sum(1 for key, (rc, _, _) in base.items() if key.endswith(" --json") and
                    not key.endswith("--relax --json") and rc == CONFLICT)
    differ = sorted(key for key in set(base) | set(head) if base.get(key) != head.get(key))
    for key in differ[:20]:
        print(f"DIFFERS: {key}\n  base: {base.get(key)!r:.600}\n  head: {head.get(key)!r:.600}")
    print(f"{len(listed)} commands, {conflicts} of them conflicts; {len(base)} outputs compared "
          f"(conflicts also as text and with --relax); {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
