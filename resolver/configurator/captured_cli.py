"""The `accord` command line run inside the server's own process, with its output captured.

Every answer of the configurator's API is what the CLI prints (see `server`). The CLI prints to
sys.stdout and sys.stderr, so capturing it swaps process-wide streams: `CLI_LOCK` lets one capture
run at a time, whether it runs the whole CLI (`run_cli`) or prints from a shared outcome
(`outcomes`). Resolving is CPU-bound Python, so the lock costs nothing the GIL did not.
"""

from __future__ import annotations

import contextlib
import io
import threading

from accord.resolver.errors import EXIT_USAGE

CLI_LOCK = threading.Lock()


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `accord ARGV`, run in this process by the CLI's own main."""
    from accord.resolver.cli import main

    out, err = io.StringIO(), io.StringIO()
    with CLI_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as stop:  # argparse --help and friends
            code = stop.code if isinstance(stop.code, int) else EXIT_USAGE
    return code, out.getvalue(), err.getvalue()
