"""The synthetic-workload replay example under docs/examples runs and prints what the docs show."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "replay_synthetic.py": """\
python: 40 requests, first syn:0 (7068 in, 30 out)
python: statuses {'completed': 40}
cli: exit status 0
cli: workload {'source': 'syn', 'format': 'synthetic', 'requests': 40}
cli: statuses {'completed': 30, 'never_issued': 10}
cli: [workload] echoed {'synthetic': 'count=40 arrivals=poisson(4) \
input=lognormal(3000,2000) output=uniform(10,60)', 'speedup': 2.0, 'max_requests': 30}
""",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]
