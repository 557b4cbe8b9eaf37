"""`--help` of the commands that take a launch command (resolve, why, launch, serve, tune).

Why it is short: a system has five hundred launch flags, and listing them all made `accord resolve
--help` some 1,400 lines that buried the command's own dozen options. So the help is paged by flag
group, one design for every launch command:

    accord COMMAND --help          what the command does, examples, its own options, the flag groups
    accord COMMAND --help GROUP    the launch flags of one group (a family such as `exec`: its groups)
    accord COMMAND --help all      the above, then every group

A group is listed with `accord flags`' own table (commandline/flagtable.py), so a flag reads the same
wherever it is looked up, and `accord flags WORD` searches them. The summary and example commands
of each command are data (`rules/help.yaml`): they name SGLang flags, which this code does not.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from accord.resolver.commandline.flagtable import entries, table
from accord.resolver.errors import UsageError
from accord.resolver.language.catalog import Catalog
from accord.resolver.language.yamlcache import read_yaml_files
from accord.rules.paths import RULES_DIR

EVERY_GROUP = "all"
WIDTH = 96  # the description's own lines; argparse wraps the options to the terminal


class HelpAction(argparse.Action):
    """`-h, --help [GROUP]`: print the help asked for and exit 0, as argparse's own help does."""

    def __init__(self, option_strings, dest, catalog: Catalog, help: str | None = None):
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, metavar="GROUP",
                         help=help or f"show this help and exit; with GROUP, that group's launch flags "
                                      f"(the groups are listed below; {EVERY_GROUP}: every flag)")
        self.catalog = catalog

    @staticmethod
    def add_to(parser: argparse.ArgumentParser, catalog: Catalog) -> None:
        """`--help [GROUP]` on `parser`, and `-h` as its unlisted short form."""
        parser.add_argument("--help", action=HelpAction, catalog=catalog)
        parser.add_argument("-h", action=HelpAction, catalog=catalog, help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        # built only when help is asked for: a parse that is not for help never reads help.yaml
        usage = (_help_data().get(command_name(parser.prog)) or {}).get("usage")
        if usage:  # a command with arguments of its own before the launch flags (`accord why FLAG`)
            parser.usage = usage
        parser.description = description(parser.prog, self.catalog)
        parser.epilog = group_listing(parser.prog, self.catalog)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        sys.stdout.write(command_help(parser, self.catalog, values))
        parser.exit()


def command_name(prog: str) -> str:
    """`accord launch` -> `launch`: the key of the command's entry in rules/help.yaml."""
    words = prog.split()
    return words[1] if len(words) > 1 and words[0] == "accord" else ""


def description(prog: str, catalog: Catalog) -> str:
    """What opens the help: the command's summary and example commands (rules/help.yaml)."""
    entry = _help_data().get(command_name(prog)) or {}
    summary = entry.get("summary") or f"Flags of the {catalog.system} server."
    text = textwrap.fill(summary, WIDTH) + "\n"
    if entry.get("examples"):
        text += "\nexamples:\n"
        for example in entry["examples"]:
            line = f"  {example['command']}"
            if example.get("shows"):  # beside the command, or below it when that would be too wide
                shows = f"({example['shows']})"
                line += f"    {shows}" if len(line) + 4 + len(shows) <= WIDTH else f"\n      {shows}"
            text += line + "\n"
    return text


def group_listing(prog: str, catalog: Catalog) -> str:
    """What closes the help, where the terminal leaves the eye: the flag groups with their sizes,
    and the commands that list a group's flags."""
    sizes = _group_sizes(catalog)
    how = (f"{catalog.system} flags by group, {sum(sizes.values())} in all: `{prog} --help GROUP` lists "
           f"a group, `{prog} --help {EVERY_GROUP}` every flag, `accord flags --system {catalog.system} "
           f"WORD` searches them")
    # a no-break space keeps each group beside its size; textwrap breaks only at ASCII whitespace
    items = ", ".join(f"{group}\N{NO-BREAK SPACE}({size})" for group, size in sizes.items())
    listing = textwrap.fill(items, WIDTH, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
    return (textwrap.fill(how, WIDTH, break_on_hyphens=False) + ":\n"
            + listing.replace("\N{NO-BREAK SPACE}", " "))


def command_help(parser: argparse.ArgumentParser, catalog: Catalog, topic: str | None) -> str:
    """The help for `--help` (topic None), `--help GROUP` or `--help all`."""
    if topic is None:
        return parser.format_help()
    groups = groups_for(topic, catalog)
    rows = entries(catalog)
    sections = [f"{catalog.system} flags: {group}\n{table([e for e in rows if e['group'] == group])}\n"
                for group in groups]
    if topic == EVERY_GROUP:
        return parser.format_help() + "\n" + "\n".join(sections)
    return parser.format_usage() + "\n" + "\n".join(sections)


def groups_for(topic: str, catalog: Catalog) -> list[str]:
    """The groups `--help TOPIC` lists: every one for `all`, the group named, or a family's groups
    (`exec` is exec.comm, exec.moe, ...); anything else is a usage error naming the groups."""
    groups = list(_group_sizes(catalog))
    if topic == EVERY_GROUP:
        return groups
    chosen = [g for g in groups if g == topic or g.startswith(topic + ".")]
    if chosen:
        return chosen
    import difflib  # only for a mistyped group

    close = difflib.get_close_matches(topic, groups, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UsageError(f"--help {topic}: no {catalog.system} flag group of that name; {hint}groups: "
                     f"{', '.join(groups)}, or {EVERY_GROUP}. `accord flags --system {catalog.system} "
                     f"{topic}` searches the flags for a word.")


def _group_sizes(catalog: Catalog) -> dict[str, int]:
    """Group -> how many `accord flags` entries it has, groups in name order."""
    sizes: dict[str, int] = {}
    for entry in entries(catalog):
        sizes[entry["group"]] = sizes.get(entry["group"], 0) + 1
    return dict(sorted(sizes.items()))


def _help_data() -> dict:
    (data,), = read_yaml_files([RULES_DIR / "help.yaml"])
    return data
