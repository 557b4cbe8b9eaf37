"""How live `accord ui` feels: the time from one change on the page to its answers.

A change on the page (a GPU, a flag, a fix) sends what the page sends: `/api/resolve` first (the
command, the values, or the conflict appear when it answers), then `/api/dry-run` for the choices,
or `/api/proof` when there is a conflict. This walks a scripted session of such changes against a
real server on a free loopback port and prints the medians per change, to the first answer and to
the last (goal: <= 50 ms), per endpoint, and two baselines from the same run: the CLI's own work
for the same answers with no HTTP (`run_cli` in process) and an HTTP round trip computing nothing.

Each change is computed, not remembered: the per-launch values the solver keeps (`Plan.shared`)
and the server's outcomes (`OUTCOMES`, one solve per launch) are dropped before every change, so
walking the session again does not answer from memory (the two requests of one change do share
them, as they do for the page). The first walk, where every launch shape is new to the solver's
analysis too, is printed on its own, and so is a change back to a launch the server has answered
(the page's undo, or a toggle back), which its outcomes answer without solving.

    python benchmarks/bench_ui.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accord.resolver.api import plan_for  # noqa: E402
from accord.resolver.configurator.answers import command_for  # noqa: E402
from accord.resolver.configurator.captured_cli import run_cli  # noqa: E402
from accord.resolver.configurator.outcomes import OUTCOMES  # noqa: E402
from accord.resolver.configurator.server import running  # noqa: E402
from accord.resolver.facts.model import BUILTIN_MODELS  # noqa: E402

MODEL = ["--model-path", str(BUILTIN_MODELS["llm"])]
# (facts, args) after each change of a typical session: machine, model, flags, a conflict, its fix.
SESSION = [
    ("h100", []),
    ("h100", MODEL),
    ("h100", [*MODEL, "--tp", "8"]),
    ("h100", [*MODEL, "--tp", "8", "--kv-cache-dtype", "fp8_e4m3"]),
    ("h100", [*MODEL, "--tp", "8", "--kv-cache-dtype", "nvfp4"]),
    ("h100", [*MODEL, "--tp", "8", "--kv-cache-dtype", "auto"]),
    ("h100", [*MODEL, "--tp", "8", "--kv-cache-dtype", "auto", "--attention-backend", "flashinfer"]),
    ("b200", [*MODEL, "--tp", "8", "--kv-cache-dtype", "nvfp4"]),
    ("b200", [*MODEL, "--tp", "8", "--kv-cache-dtype", "nvfp4", "--mem-fraction-static", "0.85"]),
    ("b200", [*MODEL, "--tp", "4", "--kv-cache-dtype", "nvfp4", "--mem-fraction-static", "0.85"]),
]


# Other machines and flags than SESSION's: they warm what every launch shares, not the session's own.
WARM_UP = [("a100", []), ("a100", [*MODEL, "--tp", "2"]), ("mi300x", [*MODEL, "--dtype", "bfloat16"])]


def post(base: str, endpoint: str, body: dict) -> tuple[int, float]:
    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(f"{base}/api/{endpoint}", data=data,
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as err:
        err.read()
        status = err.code
    return status, (time.perf_counter() - start) * 1e3


def change(base: str, body: dict, per_endpoint: dict, remembered: bool = False) -> tuple[float, float]:
    """One change as the page makes it: (ms to the first answer, ms to the last); computed afresh
    unless `remembered`."""
    if not remembered:
        plan_for(body["system"]).cache.forget("shared")
        OUTCOMES.forget()
    status, first = post(base, "resolve", body)
    per_endpoint["resolve"].append(first)
    endpoint = "proof" if status == 409 else "dry-run"
    _, second = post(base, endpoint, body)
    per_endpoint[endpoint].append(second)
    return first, first + second


def cli_work(facts: str, args: list[str]) -> float:
    """The same answers computed by the CLI in process, without HTTP (ms)."""
    plan_for("llm").cache.forget("shared")
    start = time.perf_counter()
    code, _, _ = run_cli(command_for("resolve", "llm", args, ["--facts", facts]))
    run_cli(command_for("proof" if code == 3 else "dry-run", "llm", args, ["--facts", facts]))
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="times the session is walked (default 5)")
    rounds = parser.parse_args().rounds
    with running() as base:
        urllib.request.urlopen(f"{base}/api/models").read()
        # Warm the catalog, rules, parser and presets with other launches than the session's.
        for facts, args in WARM_UP:
            change(base, {"system": "llm", "facts": facts, "args": args}, {"resolve": [], "dry-run": [], "proof": []})
        first, per_change, per_endpoint, baseline = [], [], {"resolve": [], "dry-run": [], "proof": []}, []
        first_walk, cpu = [], []
        for _ in range(rounds):
            for facts, args in SESSION:
                start_cpu = time.process_time()  # the server runs in this process: client and server CPU
                to_first, to_last = change(base, {"system": "llm", "facts": facts, "args": args}, per_endpoint)
                cpu.append((time.process_time() - start_cpu) * 1e3)
                first.append(to_first)
                per_change.append(to_last)
                if len(first_walk) < len(SESSION):
                    first_walk.append(to_last)
                baseline.append(cli_work(facts, args))
        repeat = []
        for walk in range(2):  # the first walk fills the outcomes, the second is answered from them
            for facts, args in SESSION:
                body = {"system": "llm", "facts": facts, "args": args}
                to_last = change(base, body, {"resolve": [], "dry-run": [], "proof": []}, remembered=True)[1]
                if walk:
                    repeat.append(to_last)
        empty = []
        for _ in range(50):
            start = time.perf_counter()
            urllib.request.urlopen(f"{base}/api/models").read()
            empty.append((time.perf_counter() - start) * 1e3)

    median, median_first = statistics.median(per_change), statistics.median(first)
    verdict = {True: "met", False: "NOT met"}
    print(f"changes measured:                 {len(per_change)} ({len(SESSION)}-step session x {rounds})")
    print(f"median per change, first answer:  {median_first:7.1f} ms   goal <= 50 ms: {verdict[median_first <= 50]}"
          "   (command, values or conflict shown)")
    print(f"median per change, all answers:   {median:7.1f} ms   goal <= 50 ms: {verdict[median <= 50]}"
          "   (plus the choices, or the proof)")
    print(f"  90th percentile, all answers:   {statistics.quantiles(per_change, n=10)[-1]:7.1f} ms")
    print(f"  CPU per change, all answers:    {statistics.median(cpu):7.1f} ms   (server and client CPU time: "
          "what a change costs when the machine is not shared)")
    print(f"  first walk only, all answers:   {statistics.median(first_walk):7.1f} ms   (every launch shape new)")
    print(f"  a change back, all answers:     {statistics.median(repeat):7.1f} ms   (a launch answered before: "
          "from the server's outcomes)")
    for endpoint, times in per_endpoint.items():
        if times:
            print(f"  median /api/{endpoint:<8}             {statistics.median(times):7.1f} ms  ({len(times)} calls)")
    cli_ms = statistics.median(baseline)
    print(f"baseline: same CLI work, no HTTP  {cli_ms:7.1f} ms   (all answers / baseline = {median / cli_ms:.2f})")
    print(f"baseline: HTTP round trip alone   {statistics.median(empty):7.1f} ms   (GET /api/models)")
    print(f"machine load average:             {os.getloadavg()[0]:7.2f}   (wall figures are noisy above "
          f"{os.cpu_count()}, the core count)")


if __name__ == "__main__":
    main()
