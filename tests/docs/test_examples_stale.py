"""The stale-information example under docs/examples runs and prints what
docs/reference/faults.md shows."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "stale_views.py"
DOC = ROOT / "docs" / "reference" / "faults.md"

EXPECTED = """\
LeastLoaded live                  engines [16, 16, 16, 16]  p50 TTFT 146.3 ms  cached 0
LeastLoaded view_delay_ms=200     engines [40, 24, 0, 0]  p50 TTFT 455.6 ms  cached 0
LeastLoaded view_period_ms=200    engines [40, 24, 0, 0]  p50 TTFT 455.6 ms  cached 0
KVAware     live                  engines [16, 0, 0, 0]  p50 TTFT  11.4 ms  cached 15360
KVAware     kv_event_delay_ms=150 engines [6, 5, 5, 0]  p50 TTFT   8.8 ms  cached 13312
"""


def test_the_stale_views_example_prints_what_the_docs_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert out == EXPECTED
    assert out in DOC.read_text()
