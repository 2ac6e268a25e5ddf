"""The explore example under docs/examples runs and prints what the how-to shows."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "explore_drained_engine.py"
DOC = ROOT / "docs" / "how-to" / "test-a-policy-against-failures.md"


def test_the_explore_example_prints_what_the_how_to_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert out.startswith("plain replay: {'completed': 80} failure: None\n")
    assert "RememberedRoundRobin: 5 of 5 runs failed\n" in out
    assert "RoundRobin: 0 of 5 runs failed\n" in out
    assert out.endswith("explore: 3 of 3 runs failed\n")
    assert f"```\n{out}```" in DOC.read_text()
