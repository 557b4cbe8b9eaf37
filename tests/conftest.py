"""Shared fixtures: where the seed reference lives (../shared, beside the checkout; optional)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(scope="session")
def reference_flags():
    """Load ../shared/reference/flags_<system>.json, or skip when the checkout has no shared/ beside it."""

    def load(system: str) -> dict:
        path = SHARED / "reference" / f"flags_{system}.json"
        if not path.is_file():
            pytest.skip(f"{path} is not present (CI checks shared/ out beside the repo)")
        return json.loads(path.read_text(encoding="utf-8"))

    return load
