"""Compile every kernel offline for every GPU target under each Triton release; store the table.

    # one throwaway virtual environment per Triton release (any that see this checkout's accord):
    python benchmarks/kernel_capabilities.py --python /tmp/triton-venvs/*/bin/python
    # only the running interpreter's Triton, printed (no file written):
    python benchmarks/kernel_capabilities.py --print

Writes kernels/capabilities.yaml (see kernels/capabilities.py for what it holds and who reads it),
merging the releases it probed into the rows already there, so that releases can be added one at a
time. Needs no GPU: Triton compiles for a GPUTarget with its bundled ptxas / LLVM.

How to make a release's environment without touching the project's (the bundled compilers are in
the wheel; torch and accord come from the project's environment, listed after the venv's own
site-packages so that its triton wins):

    python3.11 -m venv /tmp/triton-venvs/3.6.0 && /tmp/triton-venvs/3.6.0/bin/pip install --no-deps triton==3.6.0
    cp .venv/lib/python3.11/site-packages/__editable__*accord* /tmp/triton-venvs/3.6.0/lib/python3.11/site-packages/
    echo $PWD/.venv/lib/python3.11/site-packages > /tmp/triton-venvs/3.6.0/lib/python3.11/site-packages/zz-main.pth
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from accord.kernels.capabilities import TABLE_PATH, TARGETS, load_table, release

HEADER = """\
# Where Accord's Triton kernels build, per Triton release: written by benchmarks/kernel_capabilities.py
# (offline compiles, tiny tiles, for each GPU target), read by kernels/capabilities.py and checked by
# tests/test_kernels_compile.py. Do not edit by hand: rerun the script.
# Per release: "unprobed" targets this machine could not compile for at all (not "does not build"),
# then per kernel module the targets it builds for with each "kv cache/model" element-type pair
# (its KV kernels) and with no KV cache ("other": its remaining kernels, fp16).
"""


def probe_here() -> dict:
    """This interpreter's Triton version and probe results (runs in a child per release)."""
    os.environ.pop("TRITON_INTERPRET", None)
    import triton

    from accord.kernels.capabilities import probe

    return {"version": triton.__version__, "row": probe()}


def probe_with(python: str) -> dict | None:
    """One release's probe, from a child process of its interpreter (None if that child failed)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    started = time.monotonic()
    done = subprocess.run([python, __file__, "--child"], capture_output=True, text=True, env=env,
                          timeout=3600)
    if done.returncode != 0:
        print(f"probing with {python} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"Triton {result['version']}: probed in {time.monotonic() - started:.0f} s ({python})",
          file=sys.stderr)
    return result


def write_table(rows: dict, path: Path = TABLE_PATH) -> None:
    ordered = {version: rows[version] for version in sorted(rows, key=release)}
    body = yaml.safe_dump({"targets": list(TARGETS), "triton": ordered}, sort_keys=False,
                          default_flow_style=None, width=200)
    path.write_text(HEADER + body)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", nargs="+", default=[], help="interpreters, one per Triton release")
    parser.add_argument("--print", action="store_true", help="probe this interpreter's Triton and print")
    parser.add_argument("--jobs", type=int, default=2, help="releases probed at once")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(probe_here(), sort_keys=True))
        return 0
    if args.print:
        print(yaml.safe_dump(probe_here(), sort_keys=False, default_flow_style=None, width=200))
        return 0
    if not args.python:
        parser.error("give --python interpreters (one per Triton release) or --print")
    rows = load_table()["triton"] if TABLE_PATH.exists() else {}
    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for result in pool.map(probe_with, args.python):
            if result is None:
                failed += 1
                continue
            rows[result["version"]] = result["row"]
            write_table(rows)   # after each release, so that a failure keeps the others
    print(f"wrote {TABLE_PATH} ({', '.join(sorted(rows, key=release))})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
