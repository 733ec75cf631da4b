"""Shared fixtures: where ../shared/data is, and hypothesis profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=200)
settings.load_profile("ci")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (clone the project beside ../shared)")
    return SHARED_DATA
