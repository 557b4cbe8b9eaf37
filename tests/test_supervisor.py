"""engine.supervisor.ProcessGroup: failures tear the whole group down, and nothing is orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from accord.engine.supervisor import ProcessGroup, report_ready
from tests.processes import children_of

REPO = Path(__file__).resolve().parent.parent


# Child targets: module-level so the spawned children can import them.
def serve_forever(ready: bool = True) -> None:
    if ready:
        report_ready()
    while True:
        time.sleep(0.1)


def fail_after(delay: float, message: str) -> None:
    report_ready()
    time.sleep(delay)
    raise RuntimeError(message)


def refuse_usage() -> None:
    from accord.resolver.errors import UsageError

    raise UsageError("--tp-size 3 does not divide 4 heads")


def note_sigterm_then_exit(path: str, linger: float) -> None:
    """Record when SIGTERM came, keep running `linger` seconds (finishing work), then exit."""
    def on_term(signum, frame):
        Path(path).write_text(f"{time.monotonic()}")
        time.sleep(linger)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    serve_forever()


def note_signal_then_exit(path: str, signum: int) -> None:
    """Record when `signum` came (the alert of a failure elsewhere), then exit cleanly."""
    def on_signal(received, frame):
        Path(path).write_text(f"{time.monotonic()}")
        raise SystemExit(0)

    signal.signal(signum, on_signal)
    serve_forever()


def alive(pid: int) -> bool:
    """True while `pid` is a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def test_a_failing_child_tears_down_the_group_and_names_the_process_and_error(capsys):
    group = ProcessGroup("demo")
    group.start("worker", serve_forever)
    group.start("broken", fail_after, 0.3, "disk on fire")
    pids = list(group.pids().values())
    started = time.monotonic()
    code = group.run()
    assert code != 0
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err
    assert "'broken'" in err and "RuntimeError: disk on fire" in err and "exited with status 1" in err
    assert "\n" not in err.strip(), "the failure is one paragraph"
    assert wait_gone(pids, 1.0) == []


def test_a_usage_error_in_a_child_keeps_its_exit_code_and_message(capsys):
    group = ProcessGroup("demo")
    group.start("worker", serve_forever)
    group.start("picky", refuse_usage)
    assert group.run() == 2
    err = capsys.readouterr().err
    assert "Last error: --tp-size 3 does not divide 4 heads" in err and "UsageError" not in err


def test_a_child_killed_by_a_signal_is_reported_by_signal_name(capsys):
    group = ProcessGroup("demo")
    group.start("victim", serve_forever)
    group.start("bystander", serve_forever)
    pids = group.pids()
    threading.Timer(1.0, os.kill, (pids["victim"], signal.SIGKILL)).start()
    assert group.run() != 0
    err = capsys.readouterr().err
    assert "'victim'" in err and "SIGKILL" in err and "bystander" in err
    assert wait_gone(pids.values(), 1.0) == []


def test_request_stop_shuts_down_cleanly_with_status_zero():
    group = ProcessGroup("demo")
    group.start("a", serve_forever)
    group.start("b", serve_forever)
    pids = list(group.pids().values())
    threading.Timer(0.5, group.request_stop).start()
    assert group.run() == 0
    assert wait_gone(pids, 1.0) == []


def test_on_ready_runs_once_every_child_reported_ready():
    group = ProcessGroup("demo")
    group.start("a", serve_forever)
    group.start("b", serve_forever)
    calls = []
    code = group.run(ready_timeout=30, on_ready=lambda: (calls.append(1), group.request_stop()))
    assert code == 0 and calls == [1]


def test_a_child_that_never_becomes_ready_fails_the_group(capsys):
    group = ProcessGroup("demo")
    group.start("quiet", serve_forever, ready=False)
    group.start("chatty", serve_forever)
    pids = list(group.pids().values())
    assert group.run(ready_timeout=2.0) != 0
    err = capsys.readouterr().err
    assert "quiet did not become ready within 2 s" in err and "chatty did" not in err
    assert wait_gone(pids, 1.0) == []


def test_cleanups_run_after_every_child_is_gone():
    group = ProcessGroup("demo")
    group.start("a", serve_forever)
    pid = group.pids()["a"]
    seen = []
    group.add_cleanup(lambda: seen.append(alive(pid)))
    threading.Timer(0.5, group.request_stop).start()
    assert group.run() == 0
    assert seen == [False]


def test_a_clean_stop_drains_the_marked_child_before_stopping_the_others(tmp_path):
    group = ProcessGroup("demo")
    group.start("front", note_sigterm_then_exit, str(tmp_path / "front"), 1.0)
    group.start("back", note_sigterm_then_exit, str(tmp_path / "back"), 0.0)
    group.drain("front", 10.0)
    assert group.run(ready_timeout=60, on_ready=lambda: threading.Timer(0.2, group.request_stop).start()) == 0
    front, back = (float((tmp_path / n).read_text()) for n in ("front", "back"))
    assert back - front >= 1.0, "the others are stopped only once the drained child has exited"


def test_a_failure_does_not_wait_for_the_drain(tmp_path, capsys):
    group = ProcessGroup("demo")
    group.start("front", note_sigterm_then_exit, str(tmp_path / "front"), 30.0)
    group.start("worker", fail_after, 0.3, "boom")
    group.drain("front", 60.0)
    started = time.monotonic()
    assert group.run(ready_timeout=60) == 1
    assert time.monotonic() - started < 30, "a failed group is torn down, not drained"


def test_a_failure_alerts_the_marked_child_before_the_group_goes_down(tmp_path, capsys):
    """`alert`: when another child fails, the marked child gets its signal (a front end failing
    the requests in flight) and exits on its own before the others are stopped."""
    group = ProcessGroup("demo")
    group.start("front", note_signal_then_exit, str(tmp_path / "front"), int(signal.SIGUSR1))
    group.start("back", note_sigterm_then_exit, str(tmp_path / "back"), 0.0)
    group.start("worker", fail_after, 0.5, "boom")
    group.alert("front", signal.SIGUSR1, 10.0)
    assert group.run(ready_timeout=60) == 1
    front, back = (float((tmp_path / n).read_text()) for n in ("front", "back"))
    assert front < back, "the alerted child hears of the failure before the others are stopped"
    assert "boom" in capsys.readouterr().err


def test_duplicate_child_names_are_refused():
    group = ProcessGroup("demo")
    try:
        group.start("a", serve_forever)
        try:
            group.start("a", serve_forever)
        except ValueError as err:
            assert "already has a child named 'a'" in str(err)
        else:
            raise AssertionError("a second child named 'a' was accepted")
    finally:
        group.shutdown()


PARENT_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from accord.engine.supervisor import ProcessGroup
    from test_supervisor import serve_forever
    group = ProcessGroup("demo")
    group.start("a", serve_forever)
    group.start("b", serve_forever)
    print(" ".join(str(p) for p in group.pids().values()), flush=True)
    sys.exit(group.run(ready_timeout=60, on_ready=lambda: print("ready", flush=True)))
""")


def _start_parent() -> tuple[subprocess.Popen, list[int]]:
    script = PARENT_SCRIPT.format(tests=str(REPO / "tests"))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert proc.stdout.readline().strip() == "ready"
    return proc, pids


def test_sigterm_to_the_parent_stops_every_child_and_exits_zero():
    proc, pids = _start_parent()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert wait_gone(pids, 1.0) == []


def test_the_parent_exits_only_after_every_process_it_started_the_resource_tracker_included():
    proc, pids = _start_parent()
    started = children_of(proc.pid)
    assert set(pids) < set(started), "spawn starts the resource tracker besides the children"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert [p for p in started if alive(p)] == []


def test_children_die_when_the_parent_is_killed_outright():
    proc, pids = _start_parent()
    proc.kill()
    proc.wait(5)
    assert wait_gone(pids, 5.0) == [], "children outlived a SIGKILLed parent"
