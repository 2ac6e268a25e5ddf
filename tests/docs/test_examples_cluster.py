"""The cluster example under docs/examples runs and prints what docs/reference/cluster.md shows."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cluster.md"

EXPECTED = """\
engine 0: joined    0.0 ms, removed 3000.0, completed 8
engine 1: joined    0.0 ms, removed None, completed 19
engine 2: joined 1000.0 ms, removed None, completed 13
states: {0: 'removed', 1: 'active', 2: 'active'}
always_zero: 20 offers refused
first: r20 at 2000.0 ms, refused, engine_draining
status counts: {'completed': 20, 'rejected': 20, 'unplaced': 0, 'incomplete': 0, \
'failed': 0, 'cancelled': 0, 'skipped': 0, 'never_issued': 0}
"""


def test_the_cluster_example_prints_what_the_docs_show(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / "cluster_changes.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert out == EXPECTED
    assert out in DOC.read_text()
