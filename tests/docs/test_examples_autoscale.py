"""The autoscaling example under docs/examples runs and prints what the how-to shows."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "autoscale_hpa.py"
DOC = ROOT / "docs" / "how-to" / "autoscale-a-pool.md"

EXPECTED = """\
   70 s: 30.40 running per engine on 1 ready -> desired 4, scale 1 -> 4
  100 s: 19.10 running per engine on 4 ready -> desired 10, scale 4 -> 6
  150 s:  1.33 running per engine on 6 ready -> desired 1, scale 6 -> 2
  160 s:  3.60 running per engine on 2 ready -> desired 1, scale 2 -> 1
from     0 s: 1 engines (0 starting, 1 active, 0 draining)
from    70 s: 4 engines (3 starting, 1 active, 0 draining)
from    90 s: 4 engines (0 starting, 4 active, 0 draining)
from   100 s: 6 engines (2 starting, 4 active, 0 draining)
from   120 s: 6 engines (0 starting, 6 active, 0 draining)
from   150 s: 6 engines (0 starting, 2 active, 4 draining)
from   152 s: 5 engines (0 starting, 2 active, 3 draining)
from   152 s: 4 engines (0 starting, 2 active, 2 draining)
from   153 s: 3 engines (0 starting, 2 active, 1 draining)
from   153 s: 2 engines (0 starting, 2 active, 0 draining)
from   160 s: 2 engines (0 starting, 1 active, 1 draining)
from   163 s: 1 engines (0 starting, 1 active, 0 draining)
autoscaled:    606 engine-s,  6419 requests per engine-hour, SLO attainment  69.4 %
fixed 4   :    974 engine-s,  3991 requests per engine-hour, SLO attainment 100.0 %
"""


def test_the_autoscaling_example_prints_what_the_how_to_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert out == EXPECTED
    assert out in DOC.read_text()
