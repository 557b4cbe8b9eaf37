"""Read YAML data files through a small on-disk cache, so a cold `accord resolve` skips YAML parsing.

Parsing the catalog and rule files is most of a cold start. The parsed documents are plain data
(dicts, lists, strings, numbers), so we store them with `marshal`, which loads in a millisecond and
cannot run code. The cache entry is keyed by the files' names and contents (sha256), so an edited
rule file is never served stale; a missing, unwritable or corrupt cache just means parsing again.
Set ACCORD_CACHE_DIR to move the cache, or to an empty string to switch it off.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from resolver.errors import UsageError

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def cache_dir() -> Path | None:
    configured = os.environ.get("ACCORD_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accord"


def parse_documents(path: Path, text: str) -> list[Any]:
    """Every YAML document of one file (empty documents dropped); a syntax error names file and line."""
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise UsageError(f"{path}{line}: malformed YAML ({problem}); fix the file and run again.") from None


def read_yaml_files(paths: list[Path]) -> list[list[Any]]:
    """The documents of each file, in order; parsed once per distinct content."""
    texts = [p.read_text(encoding="utf-8") for p in paths]
    digest = hashlib.sha256()
    for path, text in zip(paths, texts):
        digest.update(path.name.encode() + b"\0" + text.encode() + b"\0")
    folder = cache_dir()
    entry = folder / f"{digest.hexdigest()[:32]}.marshal" if folder else None
    if entry is not None and entry.exists():
        try:
            return marshal.loads(entry.read_bytes())
        except (ValueError, EOFError, TypeError, OSError):
            pass  # a damaged entry: parse again and overwrite it
    documents = [parse_documents(path, text) for path, text in zip(paths, texts)]
    if entry is not None:
        _write_atomically(entry, marshal.dumps(documents))
    return documents


def _write_atomically(entry: Path, data: bytes) -> None:
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, entry)
    except OSError:
        pass  # read-only home, full disk: work without the cache
