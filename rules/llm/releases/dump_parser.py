"""Dump the launch parser of one SGLang release as JSON: every action's option strings, dest, default,
choices, nargs, type and action class. A development tool (it downloads a wheel); never imported by
Accord itself nor by a test.

    python rules/llm/releases/dump_parser.py [--system llm|diffusion] VERSION > VERSION.json

It follows the approach of the shared oracle's `release_parser`: the release's wheel is installed without
its dependencies under <tmp>/accord-sglang-releases/sglang-V, and its `ServerArgs.add_cli_args` is
imported with the oracle venv's Python (<tmp>/accord-oracle-venv, 0.5.23's dependencies), a module that
sglang imports and the venv lacks being replaced by an inert stub. On top of that it repairs, one at a
time, the import failures that older or newer releases hit against those dependencies, and records each
repair in the output's "patches" list:

- `from M import N` where the installed M no longer (or not yet) has N (0.4.x imports
  `triton.runtime.cache.default_cache_dir`): N becomes a stub attribute of M;
- a module that a library imports at module level and the venv lacks (transformers submodules that
  need `torchcodec` in 0.5.12-0.5.17): that module becomes a stub for every importer.

Defaults that are not JSON are written as their repr with memory addresses and ids removed, so that
two runs print the same bytes. The parser is built; nothing is parsed or resolved.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

TMP = Path(os.environ.get("TMPDIR", "/tmp"))
VENV = Path(os.environ.get("ACCORD_ORACLE_VENV", TMP / "accord-oracle-venv"))
RELEASES = TMP / "accord-sglang-releases"
ORACLE = Path(os.environ.get("ACCORD_ORACLE_DIR") or next(
    (p / "shared" / "oracle" for p in Path(__file__).resolve().parents if (p / "shared" / "oracle").is_dir()),
    Path("/work/shared/oracle"),
))

# Where each system's ServerArgs lives; the first module that imports wins.
TARGETS = {
    "llm": ["sglang.srt.server_args"],
    "diffusion": ["sglang.multimodal_gen.runtime.server_args.server_args", "sglang.multimodal_gen.runtime.server_args"],
}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+| id='\d+'|0x[0-9a-fA-F]{6,}")


def stable_repr(x) -> str:
    """A repr without the parts that change from run to run (addresses, MagicMock ids)."""
    return _ADDRESS.sub("", repr(x))


def plain(x):
    """A JSON value for an argparse attribute: JSON as it is, anything else as its stable repr."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else repr(x)
    if isinstance(x, (list, tuple, set, frozenset)):
        return [plain(v) for v in x]  # a set in iteration order, fixed by PYTHONHASHSEED=0 (as release_parser)
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    return stable_repr(x)


def _inner(system: str, cases_file: str | None = None) -> None:
    """Runs inside the oracle venv with the release on sys.path: build the parser and print it (or the
    results of parsing each case of `cases_file`)."""
    import importlib.abc
    import importlib.machinery
    import importlib.metadata
    import importlib.util
    import types

    patches: list[str] = []
    force_stub: set[str] = set()

    class _Meta(type):
        def __getattr__(cls, n):
            if n.startswith("__"):
                raise AttributeError(n)
            return _Dummy()

    class _Dummy(metaclass=_Meta):
        def __init__(self, *a, **k):
            pass

        def __call__(self, *a, **k):
            return _Dummy()

        def __getattr__(self, n):
            if n.startswith("__"):
                raise AttributeError(n)
            return _Dummy()

        def __iter__(self):
            return iter(())

        def __bool__(self):
            return False

        def __repr__(self):
            return "<stub>"

        def __mro_entries__(self, bases):
            return (_Dummy,)

        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            from pydantic_core import core_schema

            return core_schema.any_schema()

    def _stub_class(n):
        return type(n, (_Dummy,), {"__repr__": lambda self, _n=n: f"<stub {_n}>"})

    class _StubModule(types.ModuleType):
        def __getattr__(self, n):
            if n.startswith("__"):
                raise AttributeError(n)
            cls = _stub_class(n)
            setattr(self, n, cls)
            return cls

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            root = name.split(".")[0]
            if name in force_stub or any(name.startswith(s + ".") for s in force_stub):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            if root in ("sglang", "org", "java") or root.startswith("_") or root in sys.stdlib_module_names:
                return None
            f = sys._getframe(1)
            while f is not None and f.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
                f = f.f_back
            if f is None or not str(f.f_globals.get("__name__", "")).startswith("sglang"):
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            except Exception:
                spec = None
            finally:
                sys.meta_path.insert(0, self)
            return None if spec is not None else importlib.machinery.ModuleSpec(name, self, is_package=True)

        def create_module(self, spec):
            stubbed.add(spec.name.split(".")[0])
            m = _StubModule(spec.name)
            m.__path__ = []
            return m

        def exec_module(self, module):
            pass

    def _tolerant_transformers():
        try:
            import transformers
        except Exception:
            return
        lazy = type(transformers)
        real = lazy.__getattr__

        def getattr_(self, name):
            try:
                return real(self, name)
            except (ImportError, RuntimeError, importlib.metadata.PackageNotFoundError):
                if name.startswith("__"):
                    raise AttributeError(name)
                return _stub_class(name)

        lazy.__getattr__ = getattr_

        # A release registers its own config / processor classes with transformers' Auto* mappings; a
        # newer transformers already ships a class of that name (qwen3_asr, Qwen2_5_VLConfig) and refuses.
        # The parser never uses the mapping: keep transformers' class and go on.
        mappings = []
        try:
            from transformers.models.auto import auto_factory, configuration_auto

            mappings = [configuration_auto._LazyConfigMapping, auto_factory._LazyAutoMapping]
        except Exception:
            pass
        for cls in mappings:
            real_register = cls.register

            def register(self, key, value, *a, _real=real_register, **k):
                try:
                    return _real(self, key, value, *a, **k)
                except ValueError as e:
                    if "already used" not in str(e):
                        raise
                    name = str(getattr(key, "__name__", key))
                    if name not in kept:
                        kept.append(name)

            cls.register = register

    def _tolerant_metadata():
        """A module stubbed for sglang is then found by a library's availability check (it is in
        sys.modules), which next asks for its version (transformers' audio_utils and torchcodec, from
        0.5.12 on): the stub's distribution answers 0.0.0."""
        real = importlib.metadata.version

        def version(name):
            try:
                return real(name)
            except importlib.metadata.PackageNotFoundError:
                if name.split(".")[0] in stubbed:
                    if f"stub version {name}" not in patches:
                        patches.append(f"stub version {name}")
                    return "0.0.0"
                raise

        importlib.metadata.version = version

    stubbed: set[str] = set()
    kept: list[str] = []  # transformers' registrations kept over the release's own
    sys.meta_path.insert(0, _Finder())
    _tolerant_transformers()
    _tolerant_metadata()

    cannot = re.compile(r"cannot import name '([^']+)' from '([^']+)'")
    missing = re.compile(r"No module named '([^']+)'")
    module = None
    for _ in range(60):
        try:
            for target in TARGETS[system]:
                try:
                    module = importlib.import_module(target)
                except ModuleNotFoundError as e:
                    if e.name and target.startswith(e.name):
                        continue
                    raise
                if hasattr(module, "ServerArgs"):
                    break
                module = None
            break
        except ImportError as e:
            msg = str(e)
            m = cannot.search(msg)
            if m and not m.group(2).startswith("sglang"):
                name, owner = m.groups()
                mod = importlib.import_module(owner)
                setattr(mod, name, _stub_class(name))
                patches.append(f"stub attribute {owner}.{name}")
            else:
                m = missing.search(msg)
                if not m or m.group(1).startswith("sglang") or m.group(1) in force_stub:
                    raise
                force_stub.add(m.group(1))
                patches.append(f"stub module {m.group(1)}")
            print(f"dump_parser: {patches[-1]} after: {msg}", file=sys.stderr)
            for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
                del sys.modules[k]
    if module is None:
        raise SystemExit(f"no {system} ServerArgs in this release")

    def make_parser():
        parser = None
        if system == "diffusion":
            try:
                from sglang.multimodal_gen.runtime.utils.argparse import FlexibleArgumentParser

                parser = FlexibleArgumentParser(prog="sglang serve")
            except ImportError:
                parser = None
        if parser is None:
            parser = argparse.ArgumentParser(prog="sglang serve")  # as the release's prepare_server_args
        module.ServerArgs.add_cli_args(parser)
        return parser

    release = importlib.metadata.version("sglang")
    if kept:
        patches.append(f"keep transformers' own Auto registrations of {', '.join(kept)}")
    if cases_file:
        print(json.dumps({"release": release, "results": _parse_cases(make_parser, cases_file), "patches": patches}))
        return
    flags = []
    for a in make_parser()._actions:
        if not a.option_strings or a.dest == "help":
            continue
        flags.append(
            {
                "options": list(a.option_strings),
                "dest": a.dest,
                "default": plain(a.default),
                "choices": plain(list(a.choices)) if a.choices is not None else None,
                "nargs": plain(a.nargs),
                "type": getattr(a.type, "__name__", None) if a.type else None,
                "action": type(a).__name__,
            }
        )
    print(json.dumps({"release": release, "flags": flags, "patches": patches}, indent=1))


def _parse_cases(make_parser, cases_file: str) -> list[dict]:
    """Parse each case's argv with a fresh parser of the release: accepted (with the values that differ
    from the parser's defaults) or refused (argparse's own message)."""
    import contextlib
    import io

    results = []
    for case in json.loads(Path(cases_file).read_text()):
        parser = make_parser()
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                ns = parser.parse_args([str(a) for a in case["argv"]])
        except SystemExit as e:
            text = err.getvalue().strip()
            message = text.splitlines()[-1] if text else f"exit {e.code}"
            results.append({"id": case.get("id"), "accepted": False, "message": message})
            continue
        except Exception as e:  # noqa: BLE001 - a type converter raising something argparse does not catch
            results.append({"id": case.get("id"), "accepted": False, "message": f"{type(e).__name__}: {e}"})
            continue
        defaults = {a.dest: a.default for a in parser._actions}
        values = {k: plain(v) for k, v in sorted(vars(ns).items())
                  if not k.startswith("_") and (k not in defaults or v != defaults[k])}  # "_": parser bookkeeping
        results.append({"id": case.get("id"), "accepted": True, "values": values})
    return results


def install(version: str) -> Path:
    """The release's wheel, without dependencies, under <tmp>/accord-sglang-releases (downloads once)."""
    pkg = RELEASES / f"sglang-{version}"
    if not (pkg / "sglang").is_dir():
        if not (VENV / "bin" / "python").exists():
            subprocess.run([str(ORACLE / "setup")], check=True, stdout=sys.stderr)
        subprocess.run(
            [str(VENV / "bin" / "pip"), "install", "-q", "--no-deps", "--target", str(pkg), f"sglang=={version}"],
            check=True,
            stdout=sys.stderr,
        )
    return pkg


def dump(version: str, system: str = "llm", timeout: float = 600, cases_file: str | None = None) -> dict:
    """Build release `version`'s parser in a subprocess of the oracle venv and return its JSON (with
    `cases_file`, a JSON list of {"id", "argv"}: the result of parsing each argv instead)."""
    pkg = install(version)
    env = dict(os.environ, PYTHONPATH=f"{pkg}{os.pathsep}{ORACLE / 'stubs'}", PYTHONHASHSEED="0")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    proc = subprocess.run(
        [str(VENV / "bin" / "python"), str(Path(__file__).resolve()), "--inner", "--system", system,
         *(["--cases", str(Path(cases_file).resolve())] if cases_file else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(TMP),
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"sglang {version} ({system}): the parser could not be built:\n{tail}")
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=sorted(TARGETS), default="llm")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", help="a JSON list of {id, argv}: parse each with the release's parser")
    ap.add_argument("version", nargs="?")
    args = ap.parse_args(argv)
    if args.inner:
        _inner(args.system, args.cases)
        return 0
    if not args.version:
        ap.error("VERSION is required")
    try:
        print(json.dumps(dump(args.version, args.system, cases_file=args.cases), indent=1))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
