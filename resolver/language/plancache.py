"""The plan cache: a system's compiled rule set and its checked flag catalog kept on disk, so a
cold `accord resolve` neither parses YAML, nor checks a catalog entry, nor compiles an expression.

An entry is plain data (strings, numbers, tuples, frozensets and the expressions' code objects)
written with `marshal`. Its name is a hash of everything the compiled form depends on: the names and
bytes of the rule files, the bytes of the modules that compile them (so another Accord version, or
a local edit of the compiler, never finds an old entry) and the Python version (bytecode differs
between versions). An entry is therefore never stale: an edit gives another name. A damaged entry
fails to load and is built again; a write goes to a temporary file renamed into place, so a reader
never sees half of one.

The entries live in the user's cache folder (see `yamlcache.cache_dir`: ACCORD_CACHE_DIR, else
$XDG_CACHE_HOME/accord, else ~/.cache/accord), never inside the package. ACCORD_CACHE_DIR set to an
empty string switches caching off; an unwritable folder just means compiling every time.
"""

from __future__ import annotations

import hashlib
import marshal
import sys
from pathlib import Path
from typing import Any

from accord.resolver.language.yamlcache import cache_dir, write_atomically

FORMAT = "accord-plan-2"
# The modules whose code decides what an entry holds and how it is read back.
_COMPILER_FILES = ("catalog.py", "expr.py", "expr_compiler.py", "expr_runtime.py", "ruleset.py", "ruletypes.py",
                   "derived.py", "ruledata.py", "plancache.py")
_HERE = Path(__file__).resolve().parent


def entry_path(kind: str, paths: list[Path]) -> Path | None:
    """Where the entry for these source files lives (None: caching is off)."""
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256(f"{FORMAT}\0{kind}\0{sys.version}\0{marshal.version}\0".encode())
    for name in _COMPILER_FILES:
        digest.update((_HERE / name).read_bytes() + b"\0")
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return folder / f"plan-{kind}-{digest.hexdigest()[:32]}.marshal"


def load(entry: Path | None) -> Any | None:
    """The data stored in an entry, or None when there is none or it is damaged."""
    if entry is None:
        return None
    try:
        stored = marshal.loads(entry.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not (isinstance(stored, tuple) and len(stored) == 3 and stored[:2] == (FORMAT, entry.name)):
        return None  # another format, or a file copied under another name
    return stored[2]


def store(entry: Path | None, data: Any) -> None:
    """Write an entry atomically; any failure (read-only home, full disk) is silently skipped."""
    if entry is None:
        return
    try:
        payload = marshal.dumps((FORMAT, entry.name, data))
    except ValueError:
        return  # a value marshal cannot write (never in shipped rules): work without the cache
    write_atomically(entry, payload)
    _prune(entry)


KEEP = 8  # entries kept per system: every edit of a rule file leaves one behind


def _prune(entry: Path) -> None:
    """Remove all but the newest KEEP entries of the same system (an older one is only rebuilt)."""
    kind = entry.name.rsplit("-", 1)[0]
    try:
        others = sorted(entry.parent.glob(f"{kind}-*.marshal"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in others[KEEP:]:
            old.unlink()
    except OSError:
        pass  # another process pruned it first, or the folder is read-only
