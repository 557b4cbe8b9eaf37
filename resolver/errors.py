"""Errors that end a command, each with its documented exit code.

Every user-facing failure is one of these and is printed as a single paragraph, never a traceback:
exit 2 for bad usage (unknown flag, bad value, unreadable file, unknown preset), exit 3 when the
request is well-formed but no legal configuration exists.
"""

from __future__ import annotations

EXIT_USAGE = 2
EXIT_CONFLICT = 3


class AccordError(Exception):
    """Base class: carries the exit code the CLI should return."""

    exit_code = 1


class UsageError(AccordError):
    """The input itself is wrong: a flag, a value, a file, a preset or a fact."""

    exit_code = EXIT_USAGE


class UncheckedError(AccordError):
    """Under `--strict`, rules that could not be checked because a fact they read is unknown: a
    strict answer never passes what it did not check. Exit 3, as for a conflict."""

    exit_code = EXIT_CONFLICT
