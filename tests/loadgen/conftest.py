"""Fixtures for the loadgen tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import loadgen
from loadgen import Workload
from tests import datasets

MOONCAKE = loadgen.dataset_path("mooncake-conversation")
AZURE = loadgen.dataset_path("azure-conv-2023")
WEKA = loadgen.dataset_path("weka-claude-code")

WriteLines = Callable[..., Path]


@pytest.fixture
def write_lines(tmp_path: Path) -> WriteLines:
    """Write rows (dicts are JSON-encoded, strings kept) one per line; return the path."""

    def write(name: str, *rows: object) -> Path:
        path = tmp_path / name
        text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows)
        path.write_text(text + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def weka_workload() -> Workload:
    """The bundled WEKA archive, all 498 plays, read once for the whole session (and shared
    with the other modules of the process that read it whole)."""
    return datasets.weka_workload()
