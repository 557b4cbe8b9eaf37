"""resolver/ is generic: SGLang's flags, backends and model families are data under rules/.

Why: the rules are the product; knowledge written in resolver/ code is invisible to `accord rules`,
to lint and to a reviewer reading rules/. The forbidden words are read from the data itself (every
catalog flag name with an underscore, every choice of a `*_backend` flag, every architecture named
in rules/models/config_spellings.yaml), so a new flag or backend is covered without editing this
test. A few words are also plain programming words (`file`, `none`, `auto`, `torch`) and are allowed.

KNOWN is a ratchet: mentions not yet moved out of resolver/ (mostly examples in docstrings and
error messages). A new mention anywhere fails; so does a listed one that has gone, so the list
only shrinks.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from accord.resolver.language.catalog import RULES_DIR, SYSTEMS, load_catalog

ROOT = Path(__file__).resolve().parents[1] / "resolver"
GENERIC = {"file", "none", "auto", "torch", "triton", "kernel", "compressed", "diffusers", "model_path",
           "model_id"}
KNOWN = {
    "commandline/configflags.py": {"tp_size"},
    "facts/model_sources.py": {"huggingface"},  # the Hugging Face cache's folder name, not a backend
    "commands/why.py": {"attention_backend", "chunked_prefill_size", "tp_size"},
    "exploring/matrix_axes.py": {"attention_backend", "kv_cache_dtype", "tp_size"},
    "exploring/testing.py": {"attention_backend", "fa3", "kv_cache_dtype"},
    "facts/machine.py": {"flashinfer"},
    "facts/probe.py": {"mnnvl", "page_size"},
    "facts/model.py": {"dsa"},
    "language/expr.py": {"chunked_prefill_size", "dp_size", "enable_dp_attention", "fa3", "tp_size"},
    "commands/rules_lint.py": {"attention_backend"},
}


def _forbidden() -> set[str]:
    words: set[str] = set()
    for system in SYSTEMS:
        for flag in load_catalog(system):
            if "_" in flag.name:
                words.add(flag.name)
            if flag.name.endswith("backend") and flag.finite_domain:
                words.update(v for v in flag.finite_domain if isinstance(v, str))
    spellings = yaml.safe_load((RULES_DIR / "models" / "config_spellings.yaml").read_text())
    for names in spellings["architectures"].values():
        words.update(names)
    return words - GENERIC


def _mentions() -> dict[str, set[str]]:
    words = _forbidden()
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        tokens = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text()))
        hits = tokens & words
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    return found


def test_the_forbidden_words_come_from_the_data():
    words = _forbidden()
    assert {"attention_backend", "DeepseekV3ForCausalLM"} <= words


def test_resolver_names_no_flag_backend_or_model_family():
    assert _mentions() == KNOWN
