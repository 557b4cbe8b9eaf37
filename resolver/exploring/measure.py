"""`accord tune --measure K`: serve the top K candidates on Accord's own engine here and measure them.

Each candidate's launch command goes to `accord serve` in a subprocess (the resolver never imports
the engine), on a free port; a small load generator sends the tuning workload over HTTP (streamed
completions, so the first token's arrival is seen), and the server is stopped (SIGTERM, then kill)
whatever happens. Predicted and measured figures are printed side by side with the Spearman rank
correlation of the throughputs: the question the cost model must answer is "which is faster", so
the rank is what is scored. `--calibrate FILE` fits one speed factor per attention-backend family
(the geometric mean of measured / predicted throughput) and writes it for `--calibration FILE`.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

from accord.resolver.errors import UsageError
from accord.resolver.exploring.costmodel import CostModel, Workload

READY_TIMEOUT_S = 240
READY_LINE = "accord serve: ready"
WARMUP_TIMEOUT_S = 60        # a candidate that cannot answer one short request in this long is not measured
SLOWEST_MEASURED = 0.1       # candidates predicted below this fraction of #1's throughput are skipped


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServedCandidate:
    """`accord serve ARGV --port P` in a subprocess; a context manager that always stops it."""

    def __init__(self, argv: Sequence[str], facts_args: Sequence[str], log_dir: Path):
        self.port = free_port()
        self.log_path = log_dir / f"serve-{self.port}.log"
        self.log = open(self.log_path, "w+")
        # One thread per rank unless the caller says otherwise: ranks sharing a few cores with
        # torch's default thread count oversubscribe them (TPOT 300 ms instead of 15 here).
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        command = [sys.executable, "-m", "accord.resolver.cli", "serve", *facts_args, *argv,
                   "--port", str(self.port)]
        self.command = command
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"accord serve exited with {self.proc.returncode}: {self.output()[-800:]}")
            if READY_LINE in self.output():
                return
            time.sleep(0.2)
        raise RuntimeError(f"accord serve was not ready within {READY_TIMEOUT_S} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the server's own process group only
            self.proc.wait(10)
        finally:
            self.log.close()

    def __enter__(self) -> "ServedCandidate":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def one_request(port: int, prompt: list[int], output_len: int, timeout: float = 300) -> tuple[float, float, int]:
    """(seconds to the first token, seconds in all, completion tokens) of one streamed completion."""
    body = json.dumps({"prompt": prompt, "max_tokens": output_len, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    start = time.monotonic()
    first = None
    tokens = 0
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            item = json.loads(data)
            if first is None and any(c.get("text") for c in item.get("choices") or ()):
                first = time.monotonic() - start
            if item.get("usage"):
                tokens = int(item["usage"].get("completion_tokens") or 0)
    finally:
        conn.close()
    total = time.monotonic() - start
    return (first if first is not None else total), total, tokens


def load(port: int, workload: Workload, seconds: float, vocab: int, seed: int = 0) -> dict[str, Any]:
    """Closed-loop users (or an open-loop rate) for `seconds`, or a burst (every request at once,
    timed until the last one ends); throughput and mean TTFT / TPOT."""
    run = _LoadRun(port, workload, seconds, vocab, seed)
    run.warm_up()
    start = time.monotonic()
    run.deadline = start + seconds
    if workload.burst is not None:
        run.at_once()
    elif workload.request_rate is not None:
        run.paced()
    else:
        run.closed_loop()
    return run.summary(time.monotonic() - start)


class _LoadRun:
    """One `load`: the random prompts, and the results and errors its request threads record."""

    def __init__(self, port: int, workload: Workload, seconds: float, vocab: int, seed: int):
        self.port, self.workload, self.seconds = port, workload, seconds
        self.rng = random.Random(seed)
        self.top = max(2, min(vocab, 250))
        self.done: list[tuple[float, float, int]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.deadline = 0.0

    def prompt(self) -> list[int]:
        with self.lock:
            return [self.rng.randrange(1, self.top) for _ in range(self.workload.input_len)]

    def warm_up(self) -> None:
        """One short request, not counted: a server that cannot answer it is not measured."""
        try:
            one_request(self.port, self.prompt(), min(4, self.workload.output_len), timeout=WARMUP_TIMEOUT_S)
        except (OSError, http.client.HTTPException) as err:
            raise RuntimeError(f"no answer to a warm-up request within {WARMUP_TIMEOUT_S} s ({err})") from None

    def send(self, timeout: float) -> bool:
        """One request, its result or error recorded; False when it failed (the run goes on)."""
        try:
            result = one_request(self.port, self.prompt(), self.workload.output_len, timeout=timeout)
        except Exception as err:  # counted and reported
            with self.lock:
                self.errors.append(str(err)[:200])
            return False
        with self.lock:
            self.done.append(result)
        return True

    def user(self) -> None:
        """A closed-loop user: its next request when the last one ends, until the deadline or an error."""
        while time.monotonic() < self.deadline and self.send(self.seconds + 60):
            pass

    def closed_loop(self) -> None:
        """`concurrency` users (1 by default), each until the deadline."""
        users = [threading.Thread(target=self.user, daemon=True) for _ in range(self.workload.concurrency or 1)]
        for t in users:
            t.start()
        for t in users:
            t.join()

    def at_once(self) -> None:
        """The burst: every request at once, waited for to the last."""
        threads = [threading.Thread(target=self.send, args=(self.seconds + 600,), daemon=True)
                   for _ in range(self.workload.burst or 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def paced(self) -> None:
        """The open loop: a request every 1 / rate seconds until the deadline, each on its own thread."""
        gap = 1.0 / self.workload.request_rate
        threads = []
        at = time.monotonic()
        while at < self.deadline:
            t = threading.Thread(target=lambda: self.done.append(
                one_request(self.port, self.prompt(), self.workload.output_len, timeout=self.seconds + 60)),
                daemon=True)
            t.start()
            threads.append(t)
            at += gap
            time.sleep(max(0.0, at - time.monotonic()))
        for t in threads:
            t.join()

    def summary(self, elapsed: float) -> dict[str, Any]:
        """Requests and errors counted, throughput over `elapsed`, and mean TTFT / TPOT."""
        done, errors = self.done, self.errors
        tokens = sum(n for _, _, n in done)
        ttft = [f for f, _, _ in done]
        tpot = [(total - f) / (n - 1) for f, total, n in done if n > 1]
        return {"requests": len(done), "errors": len(errors), "throughput_tok_s": round(tokens / elapsed, 1),
                "ttft_ms": round(1e3 * sum(ttft) / len(ttft), 2) if ttft else None,
                "tpot_ms": round(1e3 * sum(tpot) / len(tpot), 3) if tpot else None,
                **({"first_error": errors[0]} if errors else {})}


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties share their mean rank); None under 2 points or no spread."""
    if len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return round(cov / var, 3) if var else None


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def fit_family_speed(rows: list[Mapping[str, Any]], current: Mapping[str, float]) -> dict[str, float]:
    """Per attention-backend family: the current factor times the geometric mean of measured /
    predicted throughput over that family's measured candidates."""
    ratios: dict[str, list[float]] = {}
    for row in rows:
        measured, predicted = row["measured"].get("throughput_tok_s"), row["predicted"]["throughput_tok_s"]
        if measured and predicted:
            ratios.setdefault(row["family"], []).append(math.log(measured / predicted))
    fitted = dict(current)
    for family, logs in sorted(ratios.items()):
        fitted[family] = round(float(current.get(family, 1.0)) * math.exp(sum(logs) / len(logs)), 6)
    return fitted


def measure_candidates(result, k: int, seconds: float, calibrate: str | None, costs: CostModel,
                       facts_args: Sequence[str], log: IO[str] = sys.stderr) -> dict[str, Any]:
    """Serve and load the top `k` candidates one after another; the report `--json` carries."""
    # The ranking under --measure already holds only candidates whose predictions differ
    # measurably; of those, the top K, leaving out any predicted far too slow to measure in time.
    best = result.candidates[0].predicted["throughput_tok_s"] if result.candidates else 0
    chosen = [c for c in result.candidates if c.predicted["throughput_tok_s"] >= SLOWEST_MEASURED * best][:k]
    skipped = [c for c in result.candidates[:k] if c not in chosen]
    if skipped:
        print(f"accord tune: not measuring {len(skipped)} candidate(s) predicted below {SLOWEST_MEASURED:.0%} "
              "of #1's throughput (they would take minutes each).", file=log)
    if len(chosen) < k:
        print(f"accord tune: only {len(chosen)} candidate(s) to measure (asked for {k}).", file=log)
    # The baseline (what `accord resolve` picks) is measured too, so a winner that measures slower
    # than the plain command is said, not hidden.
    if result.baseline.predicted and all(c.argv != result.baseline.argv for c in chosen):
        chosen = [*chosen, result.baseline]
    vocab = int(result.facts.get("model.vocab_size") or 256)
    rows = []
    # SIGTERM (a timeout, a closed terminal) unwinds like Ctrl-C, so every server is stopped.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if threading.current_thread() is threading.main_thread() else None
    try:
        _serve_each(result, chosen, seconds, facts_args, vocab, rows, log)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    ok = [r for r in rows if r["measured"].get("throughput_tok_s")]
    rho = spearman([r["predicted"]["throughput_tok_s"] for r in ok], [r["measured"]["throughput_tok_s"] for r in ok])
    report: dict[str, Any] = {"rows": rows, "spearman_throughput": rho, "seconds_each": seconds,
                              **measured_ranking(ok)}
    if calibrate:  # fitted on the ranked candidates (the baseline carries no backend family)
        fitted = fit_family_speed([r for r in ok if r["rank"] != BASELINE], costs.family_speed)
        write_calibration(calibrate, fitted, result, len(ok), rho)
        report["calibration"] = {"file": calibrate, "family_speed": fitted}
    return report


BASELINE = "base"  # the rank of the baseline's row: it is not one of the ranked candidates


def measured_ranking(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The measured rows re-ranked by measured throughput, and, when that puts another row above
    the predicted #1, a sentence saying which and by how much (`verdict`; None when #1 held)."""
    order = sorted(rows, key=lambda r: -r["measured"]["throughput_tok_s"])
    first = next((r for r in rows if r["rank"] == 1), None)
    verdict = None
    if order and first is not None and order[0] is not first:
        best = order[0]
        named = "" if best["rank"] == BASELINE else f"#{best['rank']}, "
        who = (f"{named}the baseline (what `accord resolve` picks for the command)," if best.get("baseline")
               else f"#{best['rank']}")
        verdict = (f"{who} measured faster than the predicted #1: {best['measured']['throughput_tok_s']:.1f} vs "
                   f"{first['measured']['throughput_tok_s']:.1f} tok/s; trust the measurement on this machine, or "
                   f"fit the cost model to it with --calibrate FILE")
    return {"by_measurement": [r["rank"] for r in order], "verdict": verdict}


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _serve_each(result, chosen, seconds: float, facts_args: Sequence[str], vocab: int, rows: list,
                log: IO[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="accord-tune-") as tmp:
        for rank, candidate in enumerate(chosen, 1):
            label = result.candidates.index(candidate) + 1 if candidate in result.candidates else BASELINE
            print(f"accord tune: measuring {'#' if label != BASELINE else ''}{label}: {' '.join(candidate.argv)}",
                  file=log, flush=True)
            with ServedCandidate(candidate.argv, facts_args, Path(tmp)) as server:
                try:
                    server.wait_ready()
                    measured = load(server.port, result.workload, seconds, vocab, seed=rank)
                except RuntimeError as err:
                    measured = {"error": str(err)}
            rows.append({"rank": label, "baseline": candidate.argv == result.baseline.argv,
                         "argv": candidate.argv, "family": candidate.family,
                         "predicted": candidate.predicted, "measured": measured})


def write_calibration(path: str, fitted: Mapping[str, float], result, n: int, rho: float | None) -> None:
    import yaml

    target = Path(path)
    if target.is_dir() or not target.parent.is_dir():
        raise UsageError(f"--calibrate {path}: give a file in an existing folder.")
    text = ("# Written by `accord tune --measure --calibrate`; read it back with `--calibration FILE`.\n"
            + yaml.safe_dump({"family_speed": dict(fitted), "fitted_on": {
                "device": result.device, "workload": result.workload.describe(), "candidates": n,
                "spearman_before": rho}}, sort_keys=True))
    temp = target.with_name(f".{target.name}.accord-tmp")
    temp.write_text(text, encoding="utf-8")
    temp.replace(target)


def render_report(report: Mapping[str, Any]) -> str:
    lines = ["", "# measured on this machine (Accord's own engine)",
             (f"{'#':>3} {'pred tok/s':>11} {'meas tok/s':>11} {'pred TTFT':>10} {'meas TTFT':>10} "
              f"{'pred TPOT':>10} {'meas TPOT':>10}  requests")]
    for row in report["rows"]:
        p, m = row["predicted"], row["measured"]
        if "error" in m:
            lines.append(f"{row['rank']:>3} {p['throughput_tok_s']:>11.1f}  failed: {m['error'][:120]}")
            continue
        lines.append(f"{row['rank']:>3} {p['throughput_tok_s']:>11.1f} {m['throughput_tok_s']:>11.1f} "
                     f"{_ms(p['ttft_ms']):>10} {_ms(m['ttft_ms']):>10} {_ms(p['tpot_ms']):>10} "
                     f"{_ms(m['tpot_ms']):>10}  {m['requests']} ({m['errors']} errors)")
    rho = report["spearman_throughput"]
    lines.append(f"Spearman rank correlation, predicted vs measured throughput: "
                 f"{'n/a' if rho is None else rho} over {sum(1 for r in report['rows'] if 'error' not in r['measured'])} candidates")
    if report.get("by_measurement"):
        lines.append("ranked by measured throughput: " + ", ".join(map(str, report["by_measurement"])))
    if report.get("verdict"):
        lines.append(f"note: {report['verdict']}")
    if "calibration" in report:
        cal = report["calibration"]
        lines.append(f"calibration written to {cal['file']}: family_speed "
                     + ", ".join(f"{k}={v:g}" for k, v in cal["family_speed"].items()))
    return "\n".join(lines)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"
