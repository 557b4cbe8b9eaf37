"""Pieces every `accord` subcommand shares: an argparse that fails like Accord, and the fact options."""

from __future__ import annotations

import argparse

from accord.resolver.errors import UsageError


class CommandParser(argparse.ArgumentParser):
    """argparse that reports bad options as a UsageError (one paragraph, exit 2) like every other
    Accord error, instead of printing usage and exiting on its own. `--help` still exits 0."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        usage = " ".join(self.format_usage().split()).removeprefix("usage: ")
        raise UsageError(f"{message}. Usage: {usage}")


def add_fact_options(parser: argparse.ArgumentParser) -> None:
    """`--facts` and `--fact`: where the machine facts come from, and overrides on top."""
    from accord.resolver.facts.machine import list_presets

    parser.add_argument("--facts", default="probe", metavar="PRESET|FILE|probe",
                        help=f"where machine facts come from: a preset ({', '.join(list_presets())}), "
                             "a YAML/JSON facts file, or probe (this machine, the default)")
    parser.add_argument("--fact", action="append", default=[], metavar="KEY=VALUE",
                        help="set one fact, e.g. --fact gpu.sm=100 or --fact cuda=none (repeatable)")
