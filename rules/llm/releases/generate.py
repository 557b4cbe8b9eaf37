"""Build the release catalogs from the stored raw inventories of SGLang releases' launch parsers.

    python -m accord.rules.llm.releases.generate              # rebuild both catalog.json from parsers/*.json.gz
    python -m accord.rules.llm.releases.generate --check      # exit 1 when a stored catalog is stale
    python -m accord.rules.llm.releases.generate --dump       # first fetch and dump the missing inventories

Inventories: `rules/<system>/releases/parsers/<V>.json.gz`, one per release, each exactly as the release's
parser was read (`{"release", "flags": [...], "source"}`, gzip with mtime 0, sorted keys). `--dump` (needs the
network and the oracle venv; development only) reads the releases from 0.4.0 to 0.5.23 off the package
index, and dumps each missing one: for the LLM server with the shared oracle's `release_parser`, falling
back to `dump_parser.py` beside this file (extra stubs for releases the shared tool cannot import); for
the diffusion server with `dump_parser.py --system diffusion`. Releases without a diffusion server are
listed in `rules/diffusion/releases/absent.json`.

The catalog (`catalog.json`) is what Accord reads (accord.resolver.commandline.releases): per action (its
dest and primary option string) the releases it exists in and each attribute's value per release range,
the parser order, how each inventory was obtained, and `successors` (an option string a release dropped ->
the one that took its place, where the data or a checked entry in SUCCESSOR_HINTS says so). Same
inventories, same bytes.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from accord.resolver.commandline.releases import ATTRIBUTES, ReleaseCatalog, version_key
from accord.rules.paths import RULES_DIR

SYSTEMS = ("llm", "diffusion")
FIRST, LAST = "0.4.0", "0.5.23"
HERE = Path(__file__).resolve().parent
SHARED_RELEASE_PARSER = Path("/work/shared/oracle/release_parser")

# Successors the inventories alone cannot show (the dest changed with the spelling). Each entry is checked
# against the inventories when the catalog is built: the old option's last release must be followed by a
# release that parses the new one. Read from the releases' server_args.py (help texts, deprecation notes).
SUCCESSOR_HINTS: dict[str, dict[str, str]] = {
    "llm": {
        "--file-storage-pth": "--file-storage-path",  # 0.4.3.post3: same help text, the spelling fixed
        "--enable-llama4-multimodal": "--enable-multimodal",  # 0.4.6: Llama-4's switch made general
        "--impl": "--model-impl",  # 0.4.9.post3: same help text and default
        "--max-micro-batch-size": "--pp-max-micro-batch-size",  # 0.5.3.post1: same help text
        "--nsa-prefill": "--nsa-prefill-backend",  # 0.5.4: the NSA prefill kernel choice, renamed
        "--nsa-decode": "--nsa-decode-backend",  # 0.5.4: the NSA decode kernel choice, renamed
        "--oltp-traces-endpoint": "--otlp-traces-endpoint",  # 0.5.4.post2: same help text, typo fixed
        "--kt-amx-method": "--kt-method",  # 0.5.5.post1: same default (AMXINT4)
        "--kt-amx-weight-path": "--kt-weight-path",  # 0.5.5.post1: same help text
    },
    "diffusion": {
        # 0.5.18: --warmup and --server-warmup were the deprecated spellings of --warmup-mode (request / server),
        # as seed 004's ServerArgs says ("deprecated: warmup and server_warmup"); 0.5.18 parses only --warmup-mode.
        "--warmup": "--warmup-mode",
        "--server-warmup": "--warmup-mode",
    },
}


def releases_dir(system: str) -> Path:
    return RULES_DIR / system / "releases"


# -- storing inventories -----------------------------------------------------------------------------------
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+| id='\d+'")


def _stable(x):
    """Defaults and choices that were written as a repr lose their memory addresses (run-dependent)."""
    if isinstance(x, str) and x.startswith("<") and x.endswith(">"):
        return _ADDRESS.sub("", x)
    if isinstance(x, list):
        return [_stable(v) for v in x]
    if isinstance(x, dict):
        return {k: _stable(v) for k, v in x.items()}
    return x


def gzip_json(data) -> bytes:
    raw = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as f:
        f.write(raw)
    return buf.getvalue()


def store_inventory(system: str, dumped: dict, source: str) -> Path:
    """Write one release's inventory (the dumper's JSON, addresses removed, with how it was obtained)."""
    flags = [{k: _stable(v) if k in ("default", "choices") else v for k, v in f.items()} for f in dumped["flags"]]
    patches = dumped.get("patches") or []
    if patches:
        source = f"{source} ({'; '.join(patches)})"
    data = {"release": dumped["release"], "flags": flags, "source": source}
    path = releases_dir(system) / "parsers" / f"{dumped['release']}.json.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip_json(data))
    return path


def read_inventories(system: str) -> list[dict]:
    folder = releases_dir(system) / "parsers"
    out = [json.loads(gzip.decompress(p.read_bytes())) for p in folder.glob("*.json.gz")]
    for inv in out:
        if version_key(inv["release"]) is None:
            raise ValueError(f"{system}: inventory of an unreadable version {inv['release']!r}")
    return sorted(out, key=lambda inv: version_key(inv["release"]))


# -- dumping (development, network) -------------------------------------------------------------------------
def index_versions() -> list[str]:
    """Every sglang release on the package index from FIRST to LAST, oldest first."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    line = next(x for x in out.splitlines() if x.startswith("Available versions:"))
    found = [v.strip() for v in line.split(":", 1)[1].split(",")]
    lo, hi = version_key(FIRST), version_key(LAST)
    return sorted((v for v in found if lo <= version_key(v) <= hi), key=version_key)


def dump_release(system: str, version: str) -> Path | None:
    from accord.rules.llm.releases import dump_parser

    if system == "llm" and SHARED_RELEASE_PARSER.exists():
        # A fixed hash seed: choices built from a set come out in the same order every run.
        env = dict(os.environ, PYTHONHASHSEED="0")
        done = subprocess.run([str(SHARED_RELEASE_PARSER), version], capture_output=True, text=True, timeout=900,
                              env=env)
        if done.returncode == 0 and done.stdout.strip():
            return store_inventory(system, json.loads(done.stdout), "shared/oracle/release_parser")
    try:
        dumped = dump_parser.dump(version, system)
    except RuntimeError as e:
        if system == "diffusion" and "no diffusion ServerArgs" in str(e):
            return None
        raise
    label = "rules/llm/releases/dump_parser.py" + ("" if system == "llm" else f" --system {system}")
    return store_inventory(system, dumped, label)


def dump_missing(systems, versions=None) -> None:
    versions = versions or index_versions()
    for system in systems:
        have = {inv["release"] for inv in read_inventories(system)}
        absent_file = releases_dir(system) / "absent.json"
        absent = set(json.loads(absent_file.read_text())) if absent_file.exists() else set()
        for v in versions:
            if v in have or v in absent:
                continue
            try:
                path = dump_release(system, v)
            except Exception as e:  # noqa: BLE001 - report and go on with the other releases
                print(f"{system} {v}: FAILED: {e}", file=sys.stderr)
                continue
            if path is None:
                absent.add(v)
                print(f"{system} {v}: no parser in this release", file=sys.stderr)
            else:
                print(f"{system} {v}: {path.relative_to(RULES_DIR.parent)}", file=sys.stderr)
        if system == "diffusion":
            absent_file.write_text(json.dumps(sorted(absent, key=version_key), indent=1) + "\n")


# -- the compact catalog ------------------------------------------------------------------------------------
def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class _Slot:
    """One place in the merged parser order; an action that moved between releases has several."""

    __slots__ = ("name", "releases")

    def __init__(self, name: str):
        self.name, self.releases = name, set()


def action_name(flag: dict) -> str:
    return f"{flag['dest']} {flag['options'][0]}"


def _runs(indices, releases) -> list[list[str]]:
    out, run = [], None
    for i in sorted(indices):
        if run and i == run[1] + 1:
            run[1] = i
        else:
            run = [i, i]
            out.append(run)
    return [[releases[a], releases[b]] for a, b in out]


def _merge_order(inventories) -> list[_Slot]:
    order: list[_Slot] = []
    previous: list[_Slot] = []
    for i, inv in enumerate(inventories):
        names = [action_name(f) for f in inv["flags"]]
        if len(set(names)) != len(names):
            raise ValueError(f"{inv['release']}: two actions share a dest and a primary option string")
        slots: list[_Slot | None] = [None] * len(names)
        matcher = difflib.SequenceMatcher(None, [s.name for s in previous], names, autojunk=False)
        for a, b, n in matcher.get_matching_blocks():
            for k in range(n):
                slots[b + k] = previous[a + k]
        for j, name in enumerate(names):
            if slots[j] is None:
                slot = _Slot(name)
                at = 0 if j == 0 else next(k for k, s in enumerate(order) if s is slots[j - 1]) + 1
                order.insert(at, slot)
                slots[j] = slot
            slots[j].releases.add(i)
        previous = slots
    return order


def _successors(system: str, releases: list[str], inventories) -> dict[str, str]:
    present: dict[str, set[int]] = {}
    for i, inv in enumerate(inventories):
        for f in inv["flags"]:
            for option in f["options"]:
                present.setdefault(option, set()).add(i)
    newest = len(releases) - 1
    out: dict[str, str] = {}
    for option, where in sorted(present.items()):
        last = max(where)
        if last == newest:
            continue
        before = inventories[last]["flags"]
        after = inventories[last + 1]["flags"]
        old = next(f for f in before if option in f["options"])
        before_names = {action_name(f) for f in before}
        # The same action (dest and primary spelling) kept without this alias; else the action that
        # stores into the dest the dropped option stored into (a release's deprecated alias names the
        # new dest itself): the one non-deprecated such action, of the same kind unless the old one was
        # a deprecation (an --enable-x / --disable-x pair shares a dest and is no rename); a flag that
        # already stood beside it counts only for a valued flag (two spellings of one value).
        same = [f for f in after if action_name(f) == action_name(old)]
        heirs = [f for f in after if f["dest"] == old["dest"] and option not in f["options"]
                 and not f["action"].startswith("Deprecated")]
        if not old["action"].startswith("Deprecated"):
            heirs = [f for f in heirs if f["action"] == old["action"]
                     and (action_name(f) not in before_names or f["action"] == "_StoreAction")]
        pick = same or (heirs if len(heirs) == 1 else [])
        if pick and pick[0]["options"][0] != option:
            out[option] = pick[0]["options"][0]
    for option, new in SUCCESSOR_HINTS.get(system, {}).items():
        where = present.get(option)
        if not where or max(where) == newest:
            raise ValueError(f"{system}: successor hint for {option}, which no release dropped")
        nxt = max(where) + 1
        if new not in {o for f in inventories[nxt]["flags"] for o in f["options"]}:
            raise ValueError(f"{system}: successor hint {option} -> {new}: {releases[nxt]} does not parse {new}")
        out[option] = new
    return dict(sorted(out.items()))


def build(system: str, inventories=None) -> dict:
    """The compact catalog of `system` from its raw inventories."""
    inventories = read_inventories(system) if inventories is None else inventories
    releases = [inv["release"] for inv in inventories]
    actions: dict[str, dict] = {}
    for i, inv in enumerate(inventories):
        for f in inv["flags"]:
            entry = actions.setdefault(action_name(f), {"dest": f["dest"], "releases": set(),
                                                        **{a: {} for a in ATTRIBUTES if a != "dest"}})
            entry["releases"].add(i)
            for attr in ATTRIBUTES:
                if attr != "dest":
                    entry[attr].setdefault(_canon(f[attr]), set()).add(i)
    compact = {}
    for name in sorted(actions):
        entry = actions[name]
        out = {"dest": entry["dest"], "releases": _runs(entry["releases"], releases)}
        for attr in ATTRIBUTES:
            if attr == "dest":
                continue
            values = sorted(entry[attr].items(), key=lambda kv: min(kv[1]))
            if len(values) == 1:
                out[attr] = [[json.loads(values[0][0])]]
            else:
                out[attr] = [[json.loads(v), _runs(where, releases)] for v, where in values]
        compact[name] = out
    order = [[slot.name, _runs(slot.releases, releases)] for slot in _merge_order(inventories)]
    absent_file = releases_dir(system) / "absent.json"
    catalog = {
        "format": 1,
        "system": system,
        "generated_by": "python -m accord.rules.llm.releases.generate",
        "releases": releases,
        "without_parser": json.loads(absent_file.read_text()) if absent_file.exists() else [],
        "sources": {inv["release"]: inv.get("source", "") for inv in inventories},
        "successors": _successors(system, releases, inventories),
        "actions": compact,
        "order": order,
    }
    check(catalog, inventories)
    return catalog


def check(catalog: dict, inventories) -> None:
    """The catalog gives back every inventory exactly, or the build fails."""
    reader = ReleaseCatalog(json.loads(render(catalog)), catalog["system"])
    for inv in inventories:
        if reader.inventory(inv["release"]) != inv["flags"]:
            raise AssertionError(f"{catalog['system']} {inv['release']}: the catalog does not rebuild the inventory")


def render(catalog: dict) -> str:
    """catalog.json's text: one action, one order slot, one release per line; keys sorted."""
    def one(value) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    lines = ["{"]
    keys = sorted(catalog)
    for n, key in enumerate(keys):
        value = catalog[key]
        end = "," if n < len(keys) - 1 else ""
        if isinstance(value, dict) and value:
            lines.append(f" {one(key)}: {{")
            items = list(value.items()) if key != "actions" else sorted(value.items())
            for m, (k, v) in enumerate(items):
                lines.append(f"  {one(k)}: {one(v)}" + ("," if m < len(items) - 1 else ""))
            lines.append(" }" + end)
        elif isinstance(value, list) and value and key in ("order",):
            lines.append(f" {one(key)}: [")
            for m, v in enumerate(value):
                lines.append(f"  {one(v)}" + ("," if m < len(value) - 1 else ""))
            lines.append(" ]" + end)
        else:
            lines.append(f" {one(key)}: {one(value)}{end}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def generate(systems=SYSTEMS, check_only: bool = False) -> list[str]:
    """Write (or with check_only compare) each system's catalog.json; returns the stale or written ones."""
    touched = []
    for system in systems:
        if not (releases_dir(system) / "parsers").is_dir():
            continue
        text = render(build(system))
        path = releases_dir(system) / "catalog.json"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            touched.append(str(path))
            if not check_only:
                path.write_text(text, encoding="utf-8")
    return touched


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accord.rules.llm.releases.generate",
                                 description="Rebuild the SGLang release catalogs from the stored inventories.")
    ap.add_argument("--system", choices=SYSTEMS, action="append", help="only this system (repeatable)")
    ap.add_argument("--dump", action="store_true", help="first dump the missing inventories (network)")
    ap.add_argument("--release", action="append", help="with --dump: only these releases")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a catalog is stale")
    args = ap.parse_args(argv)
    systems = tuple(args.system or SYSTEMS)
    if args.dump:
        dump_missing(systems, args.release)
    touched = generate(systems, check_only=args.check)
    for path in touched:
        print(("stale: " if args.check else "wrote ") + path)
    return 1 if args.check and touched else 0


if __name__ == "__main__":
    sys.exit(main())
