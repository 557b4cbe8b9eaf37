"""Start a group of named child processes, watch them, and tear all of them down together.

A serving engine is several processes that are useless alone: if one dies the others must not
linger holding ports, GPU memory or socket files. `ProcessGroup` gives that guarantee:

- children are started with multiprocessing's 'spawn' method (no inherited locks or CUDA state);
- a child that raises reports its exception text to the parent over a private pipe (plain JSON
  bytes, never pickle) before exiting, so the parent can say *which* process died and *why*;
- when any child exits, every child is sent SIGTERM and, after a short grace period, SIGKILL;
- on SIGINT/SIGTERM (or `request_stop`) children marked with `drain` are stopped first and given
  their drain period to finish what they were doing (a front end finishing in-flight requests
  while the processes behind it keep running), then the rest are stopped as above;
- when a child fails, children marked with `alert` are first sent their signal and given a few
  seconds to exit on their own (a front end telling every client in flight that the request
  failed), then the rest are stopped as above;
- `shutdown` returns only once every process it started has exited, the multiprocessing resource
  tracker (which the 'spawn' method starts) included;
- each child asks the kernel to kill it when the parent dies (PR_SET_PDEATHSIG on Linux; a
  parent-pid watchdog thread elsewhere), so not even a SIGKILLed parent leaves orphans.

Children may call `report_ready()` once they can serve; `run(ready_timeout=...)` fails the group
if some child has not done so in time. This module is generic: it knows nothing of what the
children do.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable

EXIT_CHILD_FAILED = 1
EXIT_WATCHDOG = 4  # a child's watchdog found the group stuck (the children exit with it)
TERMINATE_GRACE_S = 3.0

# The child's end of its report pipe; set only inside a supervised child.
_report_conn: multiprocessing.connection.Connection | None = None


def report_ready() -> None:
    """Tell the supervising parent this process is ready to serve (no-op outside a supervised child)."""
    if _report_conn is not None:
        _send(_report_conn, {"kind": "ready"})


def report_error(text: str) -> None:
    """Tell the supervising parent why this process is about to exit (when it cannot raise, e.g.
    from a watchdog thread that then calls os._exit)."""
    if _report_conn is not None:
        _send(_report_conn, {"kind": "error", "text": text})


def _send(conn: multiprocessing.connection.Connection, message: dict) -> None:
    try:
        conn.send_bytes(json.dumps(message).encode("utf-8"))
    except (BrokenPipeError, OSError):
        pass  # the parent is gone; the death signal will end this process


def _die_with_parent(parent_pid: int) -> None:
    """Make sure this process does not outlive the process that started it."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    else:
        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the request above took effect
        os._exit(1)


def _describe(exc: BaseException) -> tuple[str, int]:
    """One line (the exception and, for a bug, where it was raised) and the exit status it means:
    an AccordError keeps its documented exit code (2 for bad usage), anything else is a failure."""
    from accord.resolver.errors import AccordError

    if isinstance(exc, AccordError):
        return str(exc), exc.exit_code
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
    return text, EXIT_CHILD_FAILED


def _exit_on_sigterm(signum, frame) -> None:
    """SIGTERM becomes a clean exit so `finally` blocks run; a second one (some launchers signal
    the whole process group as well) then kills outright instead of interrupting the cleanup."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise SystemExit(0)


def _child_main(name: str, parent_pid: int, conn, target: Callable, args: tuple, kwargs: dict) -> None:
    """Entry point of every child: arm the parent-death signal, run the target, report failures."""
    global _report_conn
    _die_with_parent(parent_pid)
    # Ctrl-C reaches the whole terminal process group; only the parent decides how to shut down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _report_conn = conn
    try:
        target(*args, **kwargs)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _send(conn, {"kind": "error", "text": f"exited with status {exc.code}"})
        raise
    except BaseException as exc:  # noqa: BLE001 - everything is reported, then the child exits
        text, code = _describe(exc)
        _send(conn, {"kind": "error", "text": text})
        sys.exit(code)


def _stop_resource_tracker() -> None:
    """End the resource tracker 'spawn' started and wait for it, so nothing this process started
    outlives it. It exits once every holder of its pipe closed it: the children are gone, so
    closing ours ends it. (A private but long-standing CPython API; skipped where absent.)"""
    from multiprocessing import resource_tracker

    stop = getattr(getattr(resource_tracker, "_resource_tracker", None), "_stop", None)
    if stop is not None:
        try:
            stop()
        except (OSError, ChildProcessError):
            pass


class _Child:
    __slots__ = ("name", "process", "reader", "ready", "error")

    def __init__(self, name: str, process, reader):
        self.name = name
        self.process = process
        self.reader = reader
        self.ready = False
        self.error: str | None = None


class ProcessGroup:
    """Starts named child processes (multiprocessing 'spawn'), supervises them, tears all down.

    Call `start` from a thread that lives as long as the group (normally the main thread): on
    Linux the children's parent-death signal fires when the *starting thread* exits.
    """

    def __init__(self, name: str):
        self.name = name
        self._context = multiprocessing.get_context("spawn")
        self._children: list[_Child] = []
        self._stop_requested = False
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._closed = False
        self._cleanups: list[Callable[[], None]] = []
        self._drain: dict[str, float] = {}
        self._alert: dict[str, tuple[int, float]] = {}

    def pids(self) -> dict[str, int | None]:
        """Process ids of the started children, by name."""
        return {c.name: c.process.pid for c in self._children}

    def start(self, name: str, target: Callable, *args: Any, **kwargs: Any) -> None:
        """Spawn a child that runs `target(*args, **kwargs)`; the arguments must be picklable."""
        if any(c.name == name for c in self._children):
            raise ValueError(f"process group {self.name!r} already has a child named {name!r}")
        reader, writer = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child_main, name=f"{self.name}:{name}",
            args=(name, os.getpid(), writer, target, args, kwargs), daemon=False)
        process.start()
        writer.close()  # only the child writes; EOF on the reader then means the child is gone
        self._children.append(_Child(name, process, reader))

    def drain(self, name: str, seconds: float) -> None:
        """On a clean stop, SIGTERM child `name` first and wait up to `seconds` for it to exit
        before stopping the others."""
        self._drain[name] = seconds

    def alert(self, name: str, signum: int, seconds: float) -> None:
        """When another child fails, send child `name` the signal `signum` and wait up to
        `seconds` for it to exit before stopping the group."""
        self._alert[name] = (signum, seconds)

    def add_cleanup(self, callback: Callable[[], None]) -> None:
        """Run `callback` in `shutdown()`, after every child is gone (e.g. remove socket files)."""
        self._cleanups.append(callback)

    def run(self, ready_timeout: float | None = None,
            on_ready: Callable[[], None] | None = None) -> int:
        """Block until shutdown. 0 after SIGINT/SIGTERM or `shutdown()`; non-zero if a child failed:
        the status the failed child exited with (2 for a usage error it reported), else 1.

        With `ready_timeout`, every child must call `report_ready()` within that many seconds;
        `on_ready` is called once, in this thread, when all of them have.
        """
        restore = self._install_signal_handlers()
        failure = None
        try:
            failure = self._watch(ready_timeout, on_ready)
            if failure is not None:
                self._alert_survivors()
        finally:
            # Still under our handlers: a second signal cannot cut the teardown short.
            self.shutdown(drain=failure is None and self._stop_requested)
            self._restore_signal_handlers(restore)
        if failure is None:
            return 0
        text, code = failure
        print(text, file=sys.stderr, flush=True)
        return code

    def request_stop(self) -> None:
        """Ask a running `run()` (possibly in another thread) to shut the group down cleanly."""
        self._stop_requested = True
        try:
            self._wake_writer.send(b"\0")
        except OSError:
            pass

    def shutdown(self, drain: bool = False) -> None:
        """Terminate every child (SIGTERM, then SIGKILL after a grace period) and wait for them;
        with `drain`, the children marked with `drain()` first, each given its drain period."""
        if self._closed:
            return
        self._closed = True
        if drain:
            first = [c for c in self._children if c.name in self._drain and c.process.is_alive()]
            for child in first:
                child.process.terminate()
            for child in first:
                child.process.join(self._drain[child.name])
        for child in self._children:
            if child.process.is_alive():
                child.process.terminate()
        deadline = time.monotonic() + TERMINATE_GRACE_S
        for child in self._children:
            child.process.join(max(0.0, deadline - time.monotonic()))
        for child in self._children:
            if child.process.is_alive():
                child.process.kill()
                child.process.join()
        for child in self._children:
            child.reader.close()
            child.process.close()
        _stop_resource_tracker()
        for callback in self._cleanups:
            callback()
        self._wake_reader.close()
        self._wake_writer.close()

    # -- internals ---------------------------------------------------------------------------

    def _alert_survivors(self) -> None:
        """A child failed: signal the children marked with `alert` and give them their time."""
        alerted = [c for c in self._children if c.name in self._alert and c.process.is_alive()]
        for child in alerted:
            try:
                os.kill(child.process.pid, self._alert[child.name][0])
            except ProcessLookupError:
                pass
        for child in alerted:
            child.process.join(self._alert[child.name][1])

    def _watch(self, ready_timeout: float | None,
               on_ready: Callable[[], None] | None) -> tuple[str, int] | None:
        """Wait for a stop request, a child failure, or a readiness timeout; return the failure's
        text and exit status."""
        deadline = None if ready_timeout is None else time.monotonic() + ready_timeout
        all_ready_announced = False
        open_readers = {c.reader: c for c in self._children}
        sentinels = {c.process.sentinel: c for c in self._children}
        while not self._stop_requested:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            waitables = [self._wake_reader, *open_readers, *sentinels]
            ready = multiprocessing.connection.wait(waitables, timeout)
            for obj in ready:
                if obj is self._wake_reader:
                    self._drain_wake()
                elif obj in open_readers:
                    if not self._read_report(open_readers[obj]):
                        del open_readers[obj]
            exited = [sentinels[s] for s in ready if s in sentinels]
            if exited:
                return self._failure_text(exited[0], open_readers)
            if not all_ready_announced and all(c.ready for c in self._children):
                all_ready_announced = True
                deadline = None
                if on_ready is not None:
                    on_ready()
            if deadline is not None and time.monotonic() >= deadline:
                waiting = [c.name for c in self._children if not c.ready]
                return (f"{self.name}: {', '.join(waiting)} did not become ready within "
                        f"{ready_timeout:g} s; stopped every process of the group.", EXIT_CHILD_FAILED)
        return None

    def _read_report(self, child: _Child) -> bool:
        """Read one message from a child's pipe; False once the pipe is closed."""
        try:
            message = json.loads(child.reader.recv_bytes().decode("utf-8"))
        except (EOFError, OSError):
            return False
        if message.get("kind") == "ready":
            child.ready = True
        elif message.get("kind") == "error":
            child.error = str(message.get("text"))
        return True

    def _failure_text(self, child: _Child, open_readers: dict) -> tuple[str, int]:
        """The one paragraph printed when a child exits (who, how, its last reported error) and
        the status the group should exit with."""
        child.process.join(1.0)
        # The error report is written before the child exits; collect it if not read yet.
        while child.reader in open_readers and child.reader.poll(0):
            if not self._read_report(child):
                break
        code = child.process.exitcode
        if code is None:
            how = "stopped responding"
        elif code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with status {code}"
        reason = f" Last error: {child.error}" if child.error else " It reported no error before exiting."
        others = [c.name for c in self._children if c is not child]
        tail = f" Stopped the other processes ({', '.join(others)})." if others else ""
        status = code if code is not None and code > 0 else EXIT_CHILD_FAILED
        return f"{self.name}: process {child.name!r} (pid {child.process.pid}) {how}.{reason}{tail}", status

    def _drain_wake(self) -> None:
        try:
            while self._wake_reader.recv(64):
                pass
        except (BlockingIOError, OSError):
            pass

    def _install_signal_handlers(self) -> dict | None:
        if threading.current_thread() is not threading.main_thread():
            return None  # only the main thread may install handlers; use request_stop() instead
        previous = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda s, f: self.request_stop())
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict | None) -> None:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)
