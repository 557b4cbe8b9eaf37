"""Read YAML data files through a small on-disk cache, so a cold `accord resolve` skips YAML parsing.

Parsing the catalog and rule files is most of a cold start. The parsed documents are plain data
(dicts, lists, strings, numbers), so we store them with `marshal`, which loads in a millisecond and
cannot run code. The cache entry is keyed by the files' names and contents (sha256), so an edited
rule file is never served stale; a missing, unwritable or corrupt cache just means parsing again.
Set ACCORD_CACHE_DIR to move the cache, or to an empty string to switch it off.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import marshal
import os
from pathlib import Path
from typing import Any

from accord.resolver.errors import UsageError


def cache_dir() -> Path | None:
    configured = os.environ.get("ACCORD_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accord"


@contextlib.contextmanager
def bulk_load():
    """No cyclic garbage collection while a plan's tens of thousands of objects are created.

    They all stay alive, so each collection the allocations trigger would walk them for nothing;
    on the LLM rules that is a third of the load time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_documents(path: Path, text: str) -> list[Any]:
    """Every YAML document of one file (empty documents dropped); a syntax error names file and line."""
    import yaml  # imported on a cache miss only: it is a fifth of a cold start

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return [doc for doc in yaml.load_all(text, Loader=loader) if doc is not None]
    except yaml.YAMLError as err:
        from accord.resolver.language.yamlerrors import problem_line  # error path only

        number = problem_line(err, text)
        line = f" line {number}" if number is not None else ""
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
    with bulk_load():
        if entry is not None and entry.exists():
            try:
                return marshal.loads(entry.read_bytes())
            except (ValueError, EOFError, TypeError, OSError):
                pass  # a damaged entry: parse again and overwrite it
        documents = [parse_documents(path, text) for path, text in zip(paths, texts)]
    if entry is not None:
        write_atomically(entry, marshal.dumps(documents))
    return documents


def write_atomically(entry: Path, data: bytes) -> None:
    """Write a temporary file beside `entry`, then rename it into place: readers see all or nothing."""
    import tempfile  # writes are rare (a cache miss); its import is not

    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, entry)
    except OSError:
        if tmp is not None:  # read-only home, full disk: work without the cache, leave no litter
            try:
                os.unlink(tmp)
            except OSError:
                pass
