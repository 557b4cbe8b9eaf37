"""`accord` command line: one subcommand per use, each in its own module, imported on demand.

Only the chosen subcommand's module is imported, so `accord resolve` never pays for the engine
(torch, triton, zmq) and `accord serve` is the only command that loads it.
"""

from __future__ import annotations

import gc
import importlib
import sys

from accord.resolver.errors import EXIT_USAGE, AccordError

COMMANDS = {
    "resolve": ("accord.resolver.commands.resolve", "Resolve a launch command against rules and facts."),
    "why": ("accord.resolver.commands.why", "Show the value of flags and the chain of rules that produced it."),
    "flags": ("accord.resolver.commands.flags", "Browse and search the flag catalog."),
    "rules": ("accord.resolver.commands.rules", "Lint, count or export the rule set."),
    "probe": ("accord.resolver.commands.probe", "Print the facts of this machine (or of a preset)."),
    "known-issues": ("accord.resolver.commands.known_issues", "List known SGLang issues, by release or for a launch."),
    "matrix": ("accord.resolver.commands.matrix", "Generate a CI matrix of legal configurations."),
    "launch": ("accord.resolver.commands.launch", "Resolve, then start upstream SGLang exactly as resolved."),
    "tune": ("accord.resolver.commands.tune", "Find the fastest legal launch for a model, GPUs and a workload."),
    "upgrade": ("accord.resolver.commands.upgrade", "Rewrite a launch command for another SGLang release."),
    "serve": ("accord.resolver.commands.serve", "Resolve, then start the engine processes."),
    "completion": ("accord.resolver.commands.completion", "Print a bash or zsh completion script."),
    "ui": ("accord.resolver.configurator.server", "Serve the interactive configurator on this machine."),
}

# Commands that answer and exit within a second. Run as the program, they run without the cyclic
# garbage collector: reference counting still frees almost everything, and what the collector would
# do is walk the tens of thousands of long-lived objects of the catalog and the rules again and again
# (a sixth of a cold `accord resolve`). Servers (serve, ui) and the matrix generator keep it.
SHORT_LIVED = frozenset({"resolve", "why", "flags", "rules", "probe", "completion", "upgrade"})

USAGE = "usage: accord {" + ",".join(COMMANDS) + "} [options]\n\n" + "\n".join(
    f"  {name:<11} {text}" for name, (_, text) in COMMANDS.items()
) + "\n\nRun `accord COMMAND --help` for the options of one command."


def main(argv: list[str] | None = None) -> int:
    """Run one command. Without `argv` this is the program itself (the `accord` script or
    `python -m accord.resolver.cli`), which exits when it returns; a caller passing
    `argv` keeps its process as it was."""
    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if as_program and argv and argv[0] in SHORT_LIVED:
        gc.disable()
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else EXIT_USAGE
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" Did you mean `accord {close[0]}`?" if close else ""
        print(f"accord: unknown command {name!r}.{hint} Commands: {', '.join(COMMANDS)}.", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return int(module.main(rest) or 0)
    except AccordError as err:
        print(f"accord {name}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `accord flags | head`: the reader left; stop quietly, as other Unix tools do.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
