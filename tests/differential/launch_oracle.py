"""Ask upstream SGLang 0.5.23 (the shared oracle) for *every* field an emitted launch command decides.

Why: the shared oracle (`../shared/oracle/run`) reports a fixed list of fields, chosen for the
resolution differential tests; `accord launch` promises that upstream holds Accord's value for every
field it writes, so its fixture needs upstream's answer for each of those. This dev tool drives the
oracle's own harness modules (`oracle_llm.py`, `oracle_diffusion.py`: the simulated GPU, the model
folders, upstream's parsing and resolution) with the list of fields widened to what the caller asks
for, one process per fact set as `run` does. It changes nothing in the shared oracle.

Used by tests/differential/run_launch.py; never by a test (the tests replay the stored answers).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import tempfile
from pathlib import Path

ORACLE_DIR = Path(os.environ.get("ACCORD_ORACLE", "/work/shared/oracle"))
ORACLE_VENV = Path(os.environ.get("ACCORD_ORACLE_VENV",
                                  os.path.join(os.environ.get("TMPDIR", "/tmp"), "accord-oracle-venv")))

# Runs under the oracle venv: widen the harness's field list, then run its main() on one fact set.
_WRAPPER = r"""
import json, sys
system, fields_path, cases_path, oracle_dir = sys.argv[1:5]
sys.path.insert(0, oracle_dir)
fields = json.load(open(fields_path))
if system == "llm":
    import oracle_llm as harness
    harness.WANT[:] = list(dict.fromkeys(harness.WANT + fields))
else:
    import oracle_diffusion as harness
    harness.FIELDS[:] = list(dict.fromkeys(harness.FIELDS + fields))
sys.argv = [harness.__file__, cases_path]
harness.main()
"""


def run(system: str, cases: list[dict], fields: list[str]) -> dict[str, dict]:
    """{case id: the oracle's answer} for `cases` ({"id", "argv", "facts"}), with `resolved`
    holding every field of `fields` upstream has (besides the harness's own list)."""
    python = ORACLE_VENV / "bin" / "python"
    if not python.is_file():
        raise SystemExit(f"no oracle venv at {ORACLE_VENV}: build it with {ORACLE_DIR}/setup")
    groups: dict[str, list[dict]] = collections.OrderedDict()
    for case in cases:  # one process per fact set: upstream caches its device probes
        groups.setdefault(json.dumps(case["facts"], sort_keys=True), []).append(case)
    env = dict(os.environ, PYTHONPATH=str(ORACLE_DIR / "stubs"),
               SGL_ORACLE_MODEL_ROOT=str(ORACLE_DIR / "models"))
    env.setdefault("SGL_DIFF_MODEL_ROOT", os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                       "accord-oracle-diffusion-models"))
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fields_path = Path(tmp) / "fields.json"
        fields_path.write_text(json.dumps(sorted(fields)))
        for index, group in enumerate(groups.values()):
            part = Path(tmp) / f"part{index}.json"
            part.write_text(json.dumps([{k: c[k] for k in ("id", "argv", "facts")} for c in group]))
            proc = subprocess.run([str(python), "-c", _WRAPPER, system, str(fields_path), str(part),
                                   str(ORACLE_DIR)], capture_output=True, text=True, env=env, cwd=tmp)
            for line in proc.stdout.splitlines():
                if line.startswith("{"):
                    answer = json.loads(line)
                    results[answer["id"]] = answer
            for case in group:
                results.setdefault(case["id"], {"id": case["id"], "status": "harness-crash",
                                                "stderr": proc.stderr[-1500:]})
    return results
