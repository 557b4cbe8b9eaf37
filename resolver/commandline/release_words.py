"""A launch command in the words of one SGLang release.

Why: operators run the SGLang release pinned in their image, not the newest one, and the launch
flags move fast: options are renamed, split, retired, and choices come and go. Accord's rules speak
the release they follow (the newest in the release catalog); this module carries a command between
releases, option by option, and says why each word changed or could not be carried:

- the same setting under the target release's spelling (the catalog knows each setting's options
  per release);
- a rewrite written down as data where a setting moved between options (`--attn-dp-size N` is
  `--dp-size N --enable-dp-attention` before attention-DP got its own option):
  `rules/<system>/releases/spellings.yaml`, each with its source;
- the option that replaced a retired one (the catalog's successors);
- otherwise the target release cannot say it, and the change says so.

The catalog (`releases.release_catalog`) answers which options a release parses; argparse's own
rules (exact spelling, else a unique prefix) decide what a word means to that release.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Mapping, Sequence

from accord.resolver.commandline.releases import ReleaseCatalog
from accord.resolver.language.catalog import RULES_DIR
from accord.resolver.language.yamlcache import read_yaml_files

SPELLINGS_FILE = "releases/spellings.yaml"
SWITCH_ACTIONS = frozenset({"_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction", "DeprecatedStoreTrueAction",
                            "DeprecatedStoreConstAction", "BooleanOptionalAction", "_CountAction", "_HelpAction",
                            "_VersionAction"})


@dataclasses.dataclass(frozen=True)
class Group:
    """One option of a command with the words of its value (none for a switch)."""

    option: str
    values: tuple[str, ...] = ()

    @property
    def words(self) -> list[str]:
        return [self.option, *self.values]

    def shown(self) -> str:
        return " ".join(self.words)


@dataclasses.dataclass(frozen=True)
class Change:
    """What happened to one option on the way to another release.

    kind: renamed | rewritten | replaced (by the retired option's successor) | dropped (the target
    release already starts from that value) | removed (the release has no option for it) |
    choice-gone (the option is there, the value is not)."""

    kind: str
    before: str
    after: tuple[str, ...]
    why: str

    @property
    def expressed(self) -> bool:
        return self.kind not in ("removed", "choice-gone")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "before": self.before, "after": list(self.after), "why": self.why}


def takes_values(action: Mapping[str, Any]) -> str:
    """How many words an action reads: "0", "1", "?" (one if the next word is not an option),
    "+" / "*" (every word up to the next option), or a count."""
    if action["action"] in SWITCH_ACTIONS:
        return "0"
    nargs = action.get("nargs")
    if nargs is None:
        return "1"
    return str(nargs)


def matches(catalog: ReleaseCatalog, release: str, word: str) -> list[str]:
    """The options of `release` that `word` names, as argparse reads it: the exact option, else
    every option it is a prefix of (one: an abbreviation; several: ambiguous; none: unknown)."""
    if catalog.action(release, word) is not None:
        return [word]
    return [option for option in _options(catalog, release) if option.startswith(word)]


@functools.lru_cache(maxsize=64)
def _options(catalog: ReleaseCatalog, release: str) -> tuple[str, ...]:
    """Every option string `release` parses, sorted (for prefix matching)."""
    return tuple(sorted({option for action in catalog.inventory(release) for option in action["options"]}))


def split_command(words: Sequence[str], catalog: ReleaseCatalog, release: str) -> tuple[list[Group], list[str]]:
    """The command's words as option groups, read with `release`'s parser; and the words that
    release does not parse (an unknown or ambiguous option, with its values; a stray word)."""
    groups: list[Group] = []
    unknown: list[str] = []
    i = 0
    words = list(words)
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            unknown.append(word)
            continue
        name, eq, inline = word.partition("=")
        found = matches(catalog, release, name)
        action = catalog.action(release, found[0]) if len(found) == 1 else None
        count = takes_values(action) if action is not None else "*"
        values: list[str] = [inline] if eq else []
        if not eq:
            if count.isdigit():
                values, i = words[i:i + int(count)], i + int(count)
            else:
                while i < len(words) and not _is_option(words[i]) and (count != "?" or not values):
                    values.append(words[i])
                    i += 1
        if action is None:
            unknown.extend([name, *values])
        else:
            groups.append(Group(found[0], tuple(values)))
    return groups, unknown


def _is_option(word: str) -> bool:
    return word.startswith("--") and len(word) > 2


@functools.lru_cache(maxsize=None)
def spellings_document(system: str) -> Mapping[str, Any]:
    """`rules/<system>/releases/spellings.yaml` (empty when the file is absent)."""
    path = RULES_DIR / system / SPELLINGS_FILE
    if not path.is_file():
        return {}
    ((data,),) = read_yaml_files([path])
    return data or {}


def load_spellings(system: str) -> tuple[Mapping[str, Any], ...]:
    """The rewrites of `rules/<system>/releases/spellings.yaml`."""
    return tuple(spellings_document(system).get("spellings") or ())


class Translator:
    """Carries option groups from one release to another of one system's catalog."""

    def __init__(self, catalog: ReleaseCatalog, system: str, source: str, target: str,
                 command: Iterable[Group] = ()):
        self.catalog, self.source, self.target = catalog, source, target
        self.spellings = load_spellings(system)
        self.settings = {catalog.action(source, g.option)["dest"]: g.values for g in command
                         if catalog.action(source, g.option) is not None}

    def setting(self, option: str) -> tuple[str, ...] | None:
        """The words the command gives another option (any of the source release's spellings of
        it), else the source release's default for it; None when the source release lacks it."""
        action = self.catalog.action(self.source, option)
        if action is None:
            return None
        if action["dest"] in self.settings:
            return self.settings[action["dest"]]
        return None if action.get("default") is None else (str(action["default"]),)

    def group(self, group: Group) -> tuple[list[Group], Change | None]:
        """The target release's words for one option group of the source release, and the change
        (None when the words stay as they are)."""
        cat, target = self.catalog, self.target
        action = cat.action(self.source, group.option)
        if action is None:
            raise ValueError(f"{group.option} is not an option of SGLang {self.source}")
        same = cat.action(target, group.option)  # the same option, whatever its dest is called there
        if same is not None and (takes_values(same) == "0") != (takes_values(action) == "0"):
            same = None
        kept = self._checked(group, group.option, same) if same is not None else None
        if kept is not None and (kept[1] is None or kept[1].expressed):
            return kept
        for rewrite in self.spellings:
            out = self._rewrite(rewrite, group)
            if out is not None:
                return out
        if kept is not None:
            return kept
        renamed = self._same_setting(group, action)
        if renamed is not None:
            return renamed
        successor = cat.successor(group.option)
        if successor is not None and cat.action(target, successor) is not None:
            new_action = cat.action(target, successor)
            if takes_values(new_action) == takes_values(action):
                kept, change = self._checked(group, successor, new_action)
                if change is None or change.expressed:
                    return kept, Change("replaced", group.shown(), tuple(w for g in kept for w in g.words),
                                        f"SGLang {target} replaced {group.option} with {successor}")
        return [], Change("removed", group.shown(), (), self._absent(group.option, action["dest"]))

    def _checked(self, group: Group, option: str, action: Mapping[str, Any]) -> tuple[list[Group], Change | None]:
        choices = action.get("choices")
        if choices is not None and takes_values(action) != "0":
            allowed = {str(c) for c in choices}
            gone = [v for v in group.values if v not in allowed]
            if gone:
                return [], Change("choice-gone", group.shown(), (), (
                    f"SGLang {self.target}'s {option} accepts only {', '.join(map(str, choices))}"
                    f"{self._choice_span(option, gone[0])}"))
        new = Group(option, group.values)
        if option == group.option:
            return [new], None
        return [new], Change("renamed", group.shown(), tuple(new.words), f"SGLang {self.target} spells it {option}")

    def _same_setting(self, group: Group, action: Mapping[str, Any]) -> tuple[list[Group], Change | None] | None:
        """The setting under another of the target's options (same argparse dest)."""
        options = self.catalog.options_of(self.target, action["dest"])
        if not options:
            return None
        target_action = self.catalog.action(self.target, options[0])
        negated = group.option.startswith("--no-") and action["action"] == "BooleanOptionalAction"
        if takes_values(target_action) == "0" and takes_values(action) == "0":
            # a switch: `--no-x` is "off"; the target's store-true switch can only say "on".
            if not negated:
                on = next((o for o in options if not o.startswith("--no-")), options[0])
                return self._checked(group, on, target_action)
            off = next((o for o in options if o.startswith("--no-")), None)
            if off is not None:
                return self._checked(group, off, target_action)
            if not target_action.get("default"):
                return [], Change("dropped", group.shown(), (), f"SGLang {self.target} starts with it off")
            return None
        if takes_values(target_action) != takes_values(action):
            return None
        return self._checked(group, options[0], target_action)

    def _rewrite(self, rewrite: Mapping[str, Any], group: Group) -> tuple[list[Group], Change | None] | None:
        """A data rewrite of this group for the target release, when one applies and the target
        parses every option it writes."""
        if rewrite["option"] != group.option:
            return None
        if "value" in rewrite and list(group.values) != [str(rewrite["value"])]:
            return None
        words: list[str] = []
        for word in map(str, rewrite["words"]):
            if word == "{value}":
                words += group.values
            elif word.startswith("{option:"):   # another option's value: "{option:--tp-size}"
                other = self.setting(word[len("{option:"):-1])
                if other is None:
                    return None
                words += other
            else:
                words.append(word)
        if not words:
            return [], Change("dropped", group.shown(), (), rewrite["why"])
        groups, unknown = split_command(words, self.catalog, self.target)
        if unknown:
            return None
        return groups, Change("rewritten", group.shown(), tuple(words), rewrite["why"])

    def _absent(self, option: str, dest: str) -> str:
        span = self.catalog.span(option)
        if span is None:
            return f"SGLang {self.target} has no option {option}"
        first, last = span
        if self.catalog.compare(self.target, first) < 0:
            return f"{option} first appears in SGLang {first}; {self.target} has no option for it"
        successor = self.catalog.successor(option)
        then = f" (its successor {successor} is not in {self.target} either)" if successor else ""
        return f"{option} was last in SGLang {last}; {self.target} has no option for it{then}"

    def _choice_span(self, option: str, value: str) -> str:
        present = [r for r in self.catalog.releases if _has_choice(self.catalog, r, option, value)]
        if not present:
            return ""
        if self.catalog.compare(self.target, present[0]) < 0:
            return f"; {value} first appears in SGLang {present[0]}"
        return f"; {value} was last in SGLang {present[-1]}"


def _has_choice(catalog: ReleaseCatalog, release: str, option: str, value: str) -> bool:
    action = catalog.action(release, option)
    return action is not None and action.get("choices") is not None and value in {str(c) for c in action["choices"]}


def translate(groups: Iterable[Group], translator: Translator) -> tuple[list[Group], list[Change]]:
    """Every group in the target's words, with the changes; a rewrite that writes an option another
    group also sets to a different value cannot be carried and is reported as removed."""
    out: list[Group] = []
    changes: list[Change] = []
    for group in groups:
        new, change = translator.group(group)
        clash = [g for g in new for o in out if o.option == g.option and o.values != g.values]
        if clash:
            change = Change("removed", group.shown(), (), f"SGLang {translator.target} would need "
                            f"{clash[0].shown()}, which another option of this command sets differently")
            new = []
        out += [g for g in new if g not in out]
        if change is not None:
            changes.append(change)
    return out, changes
