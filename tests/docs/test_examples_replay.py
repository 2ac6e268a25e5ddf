"""The replay examples under docs/examples run and print what the docs show."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from .test_examples_replay_workload import EXPECTED as WORKLOAD_EXAMPLES

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "replay_metrics_by_hand.py": """\
per-request TPOT: [10.0, 30.0]
mean TPOT 20.0 ms, mean ITL 25.0 ms over 4 gaps
TTFT p50 50.0 ms, E2E max 140.0 ms
events: {'admitted': 2, 'arrived': 2, 'finished': 2, 'first_token': 2, 'queued': 2, 'token': 4}
statuses: {'completed': 2}
""",
    "replay_python_api.py": """\
A: completed, TTFT 50.0 ms, E2E 190.0 ms, reused 0 tokens, meets SLO True
B: completed, TTFT 109.0 ms, E2E 199.0 ms, reused 960 tokens, meets SLO False
prefix reuse ratio 0.48, goodput 1 of 2
wrote summary.json, requests.jsonl, config.json
mean_ttft_ms = 79.5
B token_times_ms = [110.0, 120.0, 130.0, 140.0, 150.0, 160.0, 170.0, 180.0, 190.0, 200.0]
""",
    "replay_cli.py": """\
exit status 0
files: ['config.json', 'requests.jsonl', 'summary.json']
policy: kv_aware | workers: 2
completed: 20
mean_ttft_ms: 280.00
p99_ttft_ms: 660.00
mean_tpot_ms: 15.11
request_goodput: 1.55
""",
}


def test_every_replay_example_is_checked() -> None:
    checked = [*EXPECTED, *WORKLOAD_EXAMPLES]  # the workload examples have their own test
    assert sorted(p.name for p in EXAMPLES.glob("replay_*.py")) == sorted(checked)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]
