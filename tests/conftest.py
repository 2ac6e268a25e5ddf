"""Shared fixtures for the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real public traces beside the checkout (``../shared/data``)."""
    return SHARED_DATA
