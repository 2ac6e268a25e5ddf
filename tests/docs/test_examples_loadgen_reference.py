"""The loadgen reference example runs, and the reference page shows exactly what it prints."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def output() -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        runpy.run_path(str(DOCS / "examples" / "loadgen_reference.py"), run_name="__main__")
    return buffer.getvalue()


def test_page_shows_the_output_of_its_example(output: str) -> None:
    page = (DOCS / "reference" / "loadgen.md").read_text(encoding="utf-8")
    assert f"```text\n{output}```" in page


def test_the_driver_releases_the_later_turn_after_the_think_time(output: str) -> None:
    # s/0 completes at 50 + 2 x 10 ms = 70 ms; s/1 waits 200 ms more
    assert "  s/0  completed     released 0 ns  terminal 70000000 ns\n" in output
    assert "  s/1  completed     released 270000000 ns  terminal 330000000 ns\n" in output


def test_a_request_due_after_the_stop_is_never_issued(output: str) -> None:
    assert "  y    never_issued  released None ns  terminal 500000000 ns\n" in output
    assert "'completed': 3" in output
    assert "'never_issued': 1" in output


def test_statistics_count_the_shared_prefix(output: str) -> None:
    # s/1 hits the 2 blocks of 4 tokens it shares with s/0: 8 of 10 + 16 + 8 + 8 tokens
    assert f"prefix hit ratio {8 / 42:.2%}" in output
    assert "nominal releases: [0.0, 200.0, 100.0, 900.0]\n" in output


def test_lineage_and_snapshot_draw_match_the_workload_reference(output: str) -> None:
    assert "lineage of both: None\n" in output
    # REFERENCE-workloads §5.5: seed 42, lane 0 draws u = 0.916744...
    assert "snapshot u of seed 42, lane 0: 0.916744\n" in output
