"""Shared fixtures: where the seed reference lives (../shared, beside the checkout; optional).

Tests use no network, and what is in this machine's Hugging Face cache must not change what they
see: every test (and every command it starts, which inherits the environment) runs offline against
an empty cache of its own. A test that wants a cache or a hub sets HF_HUB_CACHE, or HF_ENDPOINT and
HF_HUB_OFFLINE=0 for a local stand-in, itself.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"

_EMPTY_HF_HOME = tempfile.mkdtemp(prefix="accord-tests-hf-home-")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = _EMPTY_HF_HOME
for _variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN"):
    os.environ.pop(_variable, None)


@pytest.fixture(scope="session")
def reference_flags():
    """Load ../shared/reference/flags_<system>.json, or skip when the checkout has no shared/ beside it."""

    def load(system: str) -> dict:
        path = SHARED / "reference" / f"flags_{system}.json"
        if not path.is_file():
            pytest.skip(f"{path} is not present (CI checks shared/ out beside the repo)")
        return json.loads(path.read_text(encoding="utf-8"))

    return load
