"""Which launch flags each SGLang release's own parser accepts: the release catalog, read lazily.

    from accord.resolver.commandline.releases import release_catalog
    cat = release_catalog("llm")            # None when the system has no catalog
    cat.action("0.4.10.post2", "--tp-size") # the raw argparse action of that release, or None

The data is `rules/<system>/releases/catalog.json`, written by `python -m accord.rules.llm.releases.generate`
from the raw inventories of every release (`parsers/<V>.json.gz`). The catalog stores ranges, not copies:
each action (a dest and its primary option string) has the releases it exists in and, per attribute
(options, default, choices, nargs, type, action), its value per release range; `order` lists the actions in
parser order, each with the releases that place it there, so that a release's inventory is rebuilt exactly.
A range is `[first, last]` over the catalog's ordered release list, both ends included.

A release argument may be any version string: it means the catalogued release `nearest()` gives.
Nothing here imports more than the standard library and Accord's errors.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from pathlib import Path

from accord.resolver.errors import UsageError

ATTRIBUTES = ("options", "dest", "default", "choices", "nargs", "type", "action")

_VERSION = re.compile(
    r"""^\s*v?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d*))?
    (?:(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post_n>\d*))|(?:-(?P<post_implicit>\d+)))?
    (?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?
    (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def version_key(text: str) -> tuple | None:
    """A sortable key for a version string in PEP 440's order (0.5.9.dev1 < 0.5.9rc0 < 0.5.9 <
    0.5.9.post1 < 0.5.10), or None when `text` is not a version. A local part (+cu128) is ignored."""
    m = _VERSION.match(str(text))
    if not m:
        return None
    release = tuple(int(p) for p in m["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    dev = int(m["dev_n"] or 0) if m["dev_n"] is not None else None
    post_text = m["post_n"] if m["post_n"] is not None else m["post_implicit"]
    post = int(post_text or 0) if post_text is not None else None
    if m["pre"]:
        pre = (_PRE[m["pre"].lower()], int(m["pre_n"] or 0))
    elif dev is not None and post is None:
        pre = (-1, 0)  # 1.0.dev0 comes before 1.0a0
    else:
        pre = (3, 0)  # a final release (or its post releases)
    return (release, pre, -1 if post is None else post, float("inf") if dev is None else dev)


def _runs(ranges, index: dict[str, int]) -> list[tuple[int, int]]:
    return [(index[first], index[last]) for first, last in ranges]


def _inside(runs, i: int) -> bool:
    return any(lo <= i <= hi for lo, hi in runs)


class ReleaseCatalog:
    """One system's release catalog. Build it with `release_catalog(system)` (cached), or from the
    data of a catalog.json directly."""

    def __init__(self, data: dict, system: str = "llm"):
        self.system = data.get("system", system)
        self.releases: tuple[str, ...] = tuple(data["releases"])
        self.newest: str = self.releases[-1]
        self.oldest: str = self.releases[0]
        self.sources: dict[str, str] = dict(data.get("sources", {}))
        self._successors: dict[str, str] = dict(data.get("successors", {}))
        self._index = {r: i for i, r in enumerate(self.releases)}
        self._keys = [version_key(r) for r in self.releases]
        self._actions: dict[str, dict] = {}
        for name, entry in data["actions"].items():
            compiled = {"dest": entry["dest"], "releases": _runs(entry["releases"], self._index)}
            for attr in ATTRIBUTES:
                if attr == "dest":
                    continue
                compiled[attr] = [
                    (value[0], None if len(value) == 1 else _runs(value[1], self._index)) for value in entry[attr]
                ]
            self._actions[name] = compiled
        self._order = [(name, _runs(ranges, self._index)) for name, ranges in data["order"]]
        self._per_release: dict[int, list[dict]] = {}
        self._by_option: dict[int, dict[str, dict]] = {}
        self._lock = threading.Lock()

    # -- versions ---------------------------------------------------------------------------------
    def nearest(self, text: str) -> str:
        """The catalogued release a version string means: itself when catalogued, else the newest
        catalogued release older than it. UsageError for a version older than the oldest release or
        for text that is not a version."""
        text = str(text).strip()
        if text in self._index:
            return text
        key = version_key(text)
        if key is None:
            raise UsageError(
                f"{text!r} is not an SGLang version; give a release such as {self.newest} or 0.4.10.post2 "
                f"(the catalog knows {len(self.releases)} releases of the {self.system} server, "
                f"{self.oldest} to {self.newest})."
            )
        at = bisect.bisect_right(self._keys, key)
        if at == 0:
            raise UsageError(
                f"SGLang {text} is older than every release Accord knows the {self.system} launch flags of "
                f"({self.oldest} to {self.newest}); Accord cannot say which flags it parses. Give "
                f"{self.oldest} or newer."
            )
        return self.releases[at - 1]

    def compare(self, a: str, b: str) -> int:
        """-1, 0 or 1 as release `a` comes before, is, or comes after `b`: the catalog's order for
        catalogued releases, version order otherwise. UsageError when either is not a version."""
        if a in self._index and b in self._index:
            ka, kb = self._index[a], self._index[b]
        else:
            ka, kb = version_key(a), version_key(b)
            for text, key in ((a, ka), (b, kb)):
                if key is None:
                    raise UsageError(f"{text!r} is not an SGLang version; give a release such as {self.newest}.")
        return (ka > kb) - (ka < kb)

    # -- inventories ------------------------------------------------------------------------------
    def _value(self, values, i: int):
        for value, runs in values:
            if runs is None or _inside(runs, i):
                return value
        raise KeyError(i)  # a malformed catalog: an attribute has no value in a release of its action

    def _flags(self, release: str) -> list[dict]:
        i = self._index[self.nearest(release)]
        flags = self._per_release.get(i)
        if flags is None:
            with self._lock:
                flags = []
                for name, runs in self._order:
                    if not _inside(runs, i):
                        continue
                    entry = self._actions[name]
                    flags.append({attr: entry["dest"] if attr == "dest" else self._value(entry[attr], i)
                                  for attr in ATTRIBUTES})
                self._per_release[i] = flags
        return flags

    def inventory(self, release: str) -> list[dict]:
        """The raw `flags` list of that release's parser (same order, same values), rebuilt."""
        return json.loads(json.dumps(self._flags(release)))

    def _options(self, release: str) -> dict[str, dict]:
        i = self._index[self.nearest(release)]
        table = self._by_option.get(i)
        if table is None:
            table = {}
            for flag in self._flags(release):
                for option in flag["options"]:
                    table.setdefault(option, flag)
            self._by_option[i] = table
        return table

    def action(self, release: str, option: str) -> dict | None:
        """The raw action that parses option string `option` in that release; None when the release
        does not parse it (exact strings only: no prefix matching)."""
        flag = self._options(release).get(option)
        return None if flag is None else json.loads(json.dumps(flag))

    def options_of(self, release: str, dest: str) -> tuple[str, ...]:
        """Option strings that store into `dest` in that release, in parser order (primary first)."""
        seen: dict[str, None] = {}
        for flag in self._flags(release):
            if flag["dest"] == dest:
                seen.update(dict.fromkeys(flag["options"]))
        return tuple(seen)

    # -- spans --------------------------------------------------------------------------------------
    def _span(self, match) -> tuple[str, str] | None:
        lo = hi = None
        for name, entry in self._actions.items():
            for value, runs in entry["options"]:
                if not match(entry, value):
                    continue
                for a, b in runs if runs is not None else entry["releases"]:
                    lo = a if lo is None else min(lo, a)
                    hi = b if hi is None else max(hi, b)
        return None if lo is None else (self.releases[lo], self.releases[hi])

    def span(self, option: str) -> tuple[str, str] | None:
        """The first and the last release that parse option string `option` (there may be gaps)."""
        return self._span(lambda entry, options: option in options)

    def dest_span(self, dest: str) -> tuple[str, str] | None:
        """The first and the last release with an action storing into `dest`."""
        return self._span(lambda entry, options: entry["dest"] == dest)

    def successor(self, option: str) -> str | None:
        """The option string that took the place of `option` where a release dropped it, when known."""
        return self._successors.get(option)

    @property
    def successors(self) -> dict[str, str]:
        return dict(self._successors)


_CACHE: dict[str, ReleaseCatalog | None] = {}
_CACHE_LOCK = threading.Lock()


def catalog_path(system: str) -> Path:
    from accord.rules.paths import RULES_DIR

    return RULES_DIR / system / "releases" / "catalog.json"


def release_catalog(system: str = "llm") -> ReleaseCatalog | None:
    """The release catalog of `system` ("llm" or "diffusion"), read once; None when it has none."""
    with _CACHE_LOCK:
        if system not in _CACHE:
            path = catalog_path(system)
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                _CACHE[system] = None
            else:
                _CACHE[system] = ReleaseCatalog(data, system)
        return _CACHE[system]
