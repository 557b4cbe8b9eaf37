"""The SGLang release a command is for: refuse what it cannot parse, and launch in its words.

Why: a command is for the release installed where it runs (the engine's `packages.*` fact,
probed from the installed distribution, or given as `--fact packages.<engine>=V`). Accord's rules follow the newest release
in the catalog. For an older one, two things change and both are here:

- `refuse_unparsed`: a typed option or value that release's own parser would refuse is a usage
  error (exit 2) naming the release that added or removed it and how the target release says it,
  before anything resolves. A typo is Accord's parser's job; this is about releases.
- `for_release`: the launch command Accord writes is carried into that release's words
  (release_words); a value it cannot say is left to its own default and named in a warning.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Sequence

from accord.resolver.commandline.release_words import (
    Change,
    Group,
    Translator,
    matches,
    split_command,
    spellings_document,
    takes_values,
    translate,
)
from accord.resolver.commandline.releases import ReleaseCatalog, release_catalog
from accord.resolver.errors import UsageError
from accord.resolver.facts.schema import PACKAGE_PREFIX



def release_fact() -> str:
    """The fact naming the engine release a command is for (`packages.` + rules/packages.yaml `engine`)."""
    from accord.resolver.facts.probe import engine_package

    return PACKAGE_PREFIX + engine_package()


def rules_release(system: str) -> str | None:
    """The release the rules follow: the newest in the system's release catalog."""
    catalog = release_catalog(system)
    return catalog.newest if catalog is not None else None


def target_release(system: str, facts: Mapping[str, Any]) -> tuple[ReleaseCatalog, str] | None:
    """(the catalog, the catalogued release the command is for) when that is older than the rules'
    own release; None when it is the rules' release, newer, or not known."""
    given = facts.get(release_fact())
    catalog = release_catalog(system)
    if given is None or catalog is None:
        return None
    release = catalog.nearest(str(given))
    if catalog.compare(release, catalog.newest) >= 0:
        return None
    return catalog, release


def refuse_unparsed(argv: Sequence[str], own_options: Mapping[str, int | str], system: str,
                    facts: Mapping[str, Any], config_file: str | None = None) -> None:
    """Raise UsageError when the target release's parser would refuse a typed option or value: the
    release named by the engine's package fact, else the rules' own (whose parser also refuses spellings its
    docs still show, such as the ambiguous `--cuda-graph-max-bs`). `own_options` are the Accord
    command's own option strings (with their values, skipped). A `config_file`'s entries are checked
    too, as the words upstream's config merger turns them into."""
    catalog = release_catalog(system)
    if catalog is None:
        return
    given = facts.get(release_fact())
    if given is None and not _rules_follow_newest(system) or facts.get("engine") == "accord":
        return  # the rules' own release is the seed's (not a parser Accord read), or Accord's engine runs it
    release = catalog.nearest(str(given)) if given is not None else catalog.newest
    if given is not None and catalog.compare(str(given), catalog.newest) > 0:
        return  # newer than every parser Accord has read: nothing to check against
    named = (f"{release_fact()}={given}" if given is not None
             else f"the release Accord's rules follow; --fact {release_fact()}=V names another")
    checker = Translator(catalog, system, release, release)
    problems = _refused(_launch_words(argv, own_options, _short_forms(system)), catalog, release, checker)
    if config_file is not None:
        problems += [f"in {config_file}: {problem}" for problem in
                     _refused(config_words(config_file, own_options, system, catalog, release), catalog, release, checker)]
    if problems:
        raise UsageError(
            f"this command is for SGLang {release} ({named}), whose own parser "
            f"would refuse it: {'; '.join(problems)}. Write the command as {release} spells it, or name the "
            f"release you will run with --fact {release_fact()}=V (`accord upgrade --to V` rewrites a command "
            f"for another release).")


def _refused(words: Sequence[str], catalog: ReleaseCatalog, release: str, checker: Translator) -> list[str]:
    """Why `release`'s parser would refuse these launch words (empty: it parses them)."""
    groups, unknown = split_command(words, catalog, release)
    problems = [_unknown_option(catalog, release, word) for word in unknown if word.startswith("--")]
    return problems + [change.why for group in groups for change in [checker.group(group)[1]]
                       if change is not None and not change.expressed]


def config_words(path: str, own_options: Mapping[str, int | str], system: str, catalog: ReleaseCatalog,
                 release: str) -> list[str]:
    """A `--config` file's entries as the words upstream's config merger (`_convert_config_to_args`)
    passes to `release`'s parser: a switch's `--key` for true and nothing for false, `--key true` for
    an option that takes a value, a list's items after its key, a mapping as JSON, anything else as
    text. A key is an option spelled without its dashes, or a flag's dest, which Accord reads as that
    flag's own spelling (a dest need not be the spelling with underscores); a null leaves
    the flag unset, as Accord reads it. Accord's own options (`facts:`) are not launch words."""
    from accord.resolver.commandline.configfile import read_config
    from accord.resolver.commandline.flagspellings import spelling_index
    from accord.resolver.language.catalog import load_catalog

    flags = load_catalog(system)
    spellings = spelling_index(flags)
    words: list[str] = []
    for entry in read_config(path):
        key = entry.key.lstrip("-")
        option = "--" + key.replace("_", "-")
        if option not in spellings and key.replace("-", "_") in flags:
            option = flags[key.replace("-", "_")].primary
        value = entry.value
        if option in own_options or value is None or value is False or value == []:
            continue  # null leaves the flag unset (Accord's reading; upstream would pass the text "None")
        words.append(option)
        if isinstance(value, list):
            words += [str(item) for item in value]
        elif isinstance(value, dict):
            words.append(json.dumps(value))
        elif value is True:
            action = catalog.action(release, option)
            if action is not None and takes_values(action) != "0":
                words.append("true")
        else:
            words.append(str(value))
    return words


def release_note(system: str, facts: Mapping[str, Any]) -> str | None:
    """For an older release, what Accord checked for it and what it could not: the options and
    values come from that release's own parser, the rules from the rules' release (except rules
    and known issues that carry a release range)."""
    target = target_release(system, facts)
    if target is None:
        return None
    catalog, release = target
    return (f"for SGLang {release}: options and values are checked against {release}'s own parser and the "
            f"launch is written in its spellings; the rules state SGLang {catalog.newest}'s behaviour except "
            f"where a rule or known issue carries a release range, so a check {release} makes differently "
            f"may still surface at launch")


def typed_release(argv: Sequence[str]) -> str | None:
    """The release a command line names before anything is parsed: `--fact packages.<engine>=V`, else,
    when the machine is probed (no --facts, or --facts probe), the installed engine distribution's
    version (read from its metadata, never imported). A facts file's release is read later, with the
    facts."""
    named, facts_spec = None, "probe"
    for i, word in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else ""
        name, eq, inline = word.partition("=")
        if name == "--fact":
            key, _, version = (inline if eq else value).partition("=")
            if key == release_fact():
                named = version
        elif name == "--facts":
            facts_spec = inline if eq else value
    if named is not None or facts_spec != "probe":
        return named
    from importlib import metadata

    try:
        return metadata.version(release_fact()[len(PACKAGE_PREFIX):]).split("+")[0]
    except metadata.PackageNotFoundError:
        return None


def read_older_words(argv: Sequence[str], system: str, own_options: Mapping[str, int | str]) -> tuple[list[str], list[str]]:
    """`argv` with the options of an older target release that Accord's catalog does not know
    (a retired switch of an old release) said in the rules' release's words, and a note for
    each. A user of that release types its spellings; the launch is written back in them."""
    release = typed_release(argv)
    catalog = release_catalog(system)
    if release is None or catalog is None:
        return list(argv), []
    release = catalog.nearest(release)
    if catalog.compare(release, catalog.newest) >= 0:
        return list(argv), []
    from accord.resolver.commandline.flagspellings import spelling_index
    from accord.resolver.language.catalog import load_catalog

    known = spelling_index(load_catalog(system))
    translator = Translator(catalog, system, release, catalog.newest, split_command(argv, catalog, release)[0])
    out, notes, i = [], [], 0
    while i < len(argv):
        word = argv[i]
        name = word.partition("=")[0]
        action = catalog.action(release, name) if word.startswith("--") else None
        if action is None or name in known or name in own_options:
            out.append(word)
            i += 1
            continue
        (group,), _ = split_command(_group_words(argv, i, action), catalog, release)
        i += len(group.words) if "=" not in word else 1
        groups, change = translator.group(group)
        if change is None or not change.expressed:
            raise UsageError(
                f"{group.shown()} is an option of SGLang {release}, the release this command is for, but Accord's "
                f"rules follow SGLang {catalog.newest}, where {change.why if change else 'it means something else'}; "
                f"Accord cannot check or carry it. Drop it (and set what it did another way), or run a newer "
                f"release.")
        out += [w for g in groups for w in g.words]
        notes.append(f"read {group.shown()} as SGLang {release} does: {' '.join(change.after) or 'its default'} "
                     f"({change.why})")
    return out, notes


def _group_words(argv: Sequence[str], at: int, action: Mapping[str, Any]) -> list[str]:
    """The words of the option at `at` and its values, as the release's action reads them."""
    if "=" in argv[at]:
        return [argv[at]]
    count = takes_values(action)
    end = at + 1
    if count.isdigit():
        end += int(count)
    else:
        while end < len(argv) and not argv[end].startswith("--") and (count != "?" or end == at + 1):
            end += 1
    return list(argv[at:end])


def _rules_follow_newest(system: str) -> bool:
    """Whether the system's rules follow its newest catalogued parser (`rules_follow_newest:` in
    rules/<system>/releases/spellings.yaml). The diffusion rules follow their seed, whose flags the
    newest wheel partly retired, so a command without a named release is not held to that wheel."""
    return bool(spellings_document(system).get("rules_follow_newest"))


def _short_forms(system: str) -> dict[str, str]:
    """Accord's own short aliases (`--tp`) -> the upstream spelling they stand for: the launch
    Accord writes spells every option out, so a short form is never upstream's to parse."""
    from accord.resolver.language.catalog import load_catalog

    return {short: flag.flags[0] for flag in load_catalog(system) for short in flag.short_forms}


def _launch_words(argv: Sequence[str], own_options: Mapping[str, int | str], short_forms: Mapping[str, str]) -> list[str]:
    """The launch flags of a command line: Accord's own options and their values left out (a value
    may itself look like options: `--prefill "--tp 8"`), Accord's short forms spelled out."""
    words: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        name, eq, value = word.partition("=")
        if word.startswith("--") and name in own_options:
            count = own_options[name]
            if eq:
                continue
            if isinstance(count, int):
                i += count
            else:
                while i < len(argv) and not argv[i].startswith("--"):
                    i += 1
            continue
        words.append(short_forms.get(name, name) + eq + value if word.startswith("--") else word)
    return words


def _unknown_option(catalog: ReleaseCatalog, release: str, word: str) -> str:
    """Why `release` refuses `word`, and how it says the same thing when it can."""
    name = word.partition("=")[0]
    found = matches(catalog, release, name)
    if len(found) > 1:
        return f"{name} is ambiguous there (it could be {', '.join(found[:4])})"
    newest = catalog.newest
    current = matches(catalog, newest, name)
    if len(current) != 1:
        return f"SGLang {release} has no option {name}"
    translator = Translator(catalog, "", newest, release)
    action = catalog.action(newest, current[0])
    sample = Group(current[0], ("{value}",) if takes_values(action) == "1" else ())
    groups, change = translator.group(sample)
    said = " ".join(w for g in groups for w in g.words)
    if change is not None and change.expressed and said:
        return f"{change.why}: write {said}"
    return change.why if change is not None else f"SGLang {release} has no option {name}"


def for_release(options: Sequence[Any], system: str, facts: Mapping[str, Any], option_type: Any
                ) -> tuple[list[Any], list[str], str | None]:
    """The launch options in the target release's words: (options, warnings, release or None).
    `option_type` builds an option (emit.Option) from (flag, form, value, carries, dest)."""
    target = target_release(system, facts)
    if target is None:
        return list(options), [], None
    catalog, release = target
    command = [Group(option.words()[0], tuple(option.words()[1:])) for option in options]
    translator = Translator(catalog, system, catalog.newest, release, command)
    out: list[Any] = []
    written: dict[str, Group] = {}
    lost: list[str] = []
    for option in options:
        words = option.words()
        groups, change = translator.group(Group(words[0], tuple(words[1:])))
        if change is not None and not change.expressed:
            lost.append(f"{' '.join(words)} ({_since(catalog, release, words[0]) or change.why})")
            continue
        clash = [g for g in groups if g.option in written and written[g.option] != g]
        if clash:
            lost.append(f"{' '.join(words)} (it would need {clash[0].shown()}, which "
                        f"{written[clash[0].option].shown()} already says otherwise)")
            continue
        for group in groups:
            if group.option not in written:
                written[group.option] = group
                out.append(_option(option_type, catalog.action(release, group.option), group, option.carries))
    warnings = [f"SGLang {release} has no option for {len(lost)} value{'s' if len(lost) > 1 else ''} Accord "
                f"decided, so it starts from its own default for {'it' if len(lost) == 1 else 'them'}: "
                f"{'; '.join(lost)}."] if lost else []
    return out, warnings, release


def _since(catalog: ReleaseCatalog, release: str, option: str) -> str | None:
    """'added in V' / 'gone after V' for an option the release lacks (None: it has the option)."""
    span = catalog.span(option)
    if span is None or catalog.action(release, option) is not None:
        return None
    first, last = span
    return f"added in {first}" if catalog.compare(release, first) < 0 else f"gone after {last}"


def _option(option_type: Any, action: Mapping[str, Any], group: Group, carries: tuple[str, ...]) -> Any:
    """An emit.Option for a group in the target release's words."""
    dest = action["dest"]
    if takes_values(action) == "0":
        negated = group.option.startswith("--no-") and action["action"] == "BooleanOptionalAction"
        if negated:
            on = next(o for o in action["options"] if not o.startswith("--no-"))
            return option_type(on, "negatable", False, carries, dest)
        return option_type(group.option, "switch", True, carries, dest)
    if takes_values(action) in ("+", "*") or len(group.values) != 1:
        return option_type(group.option, "list", tuple(group.values), carries, dest)
    return option_type(group.option, "value", group.values[0], carries, dest)


@dataclasses.dataclass(frozen=True)
class Rewritten:
    """A command carried from one release to another (`accord upgrade`)."""

    source: str
    target: str
    words: tuple[str, ...]
    changes: tuple[Change, ...]
    defaults: tuple[tuple[str, Any, Any], ...]  # (option, source default, target default) of untyped settings

    @property
    def expressed(self) -> bool:
        return all(change.expressed for change in self.changes)


def rewrite(words: Sequence[str], system: str, source: str, target: str) -> Rewritten:
    """`words` (a command for `source`) in `target`'s words, every change explained, and the
    defaults that changed under the settings the command leaves out."""
    catalog = _catalog(system)
    groups, unknown = split_command(words, catalog, source)
    if unknown:
        raise UsageError(f"SGLang {source}'s own parser would refuse {' '.join(unknown)}: "
                         f"{_unknown_option(catalog, source, unknown[0]) if unknown[0].startswith('--') else 'a word that is no option'}. "
                         f"Fix the command, or give the release it was written for with --from.")
    out, changes = translate(groups, Translator(catalog, system, source, target, groups))
    typed = {catalog.action(source, g.option)["dest"] for g in groups}
    defaults = []
    for action in catalog.inventory(source):
        if action["dest"] in typed or action["action"] in ("_HelpAction",):
            continue
        options = catalog.options_of(target, action["dest"])
        if not options:
            continue
        after = catalog.action(target, options[0]).get("default")
        if after != action.get("default"):
            defaults.append((options[0], action.get("default"), after))
    return Rewritten(source, target, tuple(w for g in out for w in g.words), tuple(changes), tuple(defaults))


def _catalog(system: str) -> ReleaseCatalog:
    catalog = release_catalog(system)
    if catalog is None:
        raise UsageError(f"Accord has no release catalog for the {system} server; releases can be "
                         f"compared for: llm.")
    return catalog
