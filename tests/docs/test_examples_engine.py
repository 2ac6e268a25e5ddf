"""The engine examples under docs/examples run and print what the docs show."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "engine_worked_examples.py": """\
(a) a: TTFT 50 ms, E2E 140 ms, reused 0
(b) a: TTFT 100 ms, E2E 190 ms, reused 0
(c) a: TTFT 50 ms, E2E 190 ms, reused 0 | b: TTFT 109 ms, E2E 199 ms, reused 960
(e) a: TTFT 50 ms, E2E 2090 ms, reused 0 | b: TTFT 109 ms, E2E 3739 ms, reused 0
    B admissions: [(50.0, 0), (2090.0, 448)] preemptions: 1
""",
    "engine_handshake.py": """\
offer big: prompt_too_long - prompt of 5000 tokens does not fit context_length 4096
pending offers: 2
after abort the engine is as before: True
waiting: 1 outstanding prefill tokens: 1000
at 1 ms: running 1 KV blocks used 16 overlap 0
  kv event at 50 ms: stored 15 keys
at 60 ms: overlap 15 blocks
done at 80.0 ms; KV blocks used 0
""",
    "engine_pd_roles.py": """\
prefill on engine 0, done at 50 ms
decode on engine 1: reserved at 50 ms, 1024 tokens in 5.3687 ms
activated at 55.3687 ms
TTFT 65.3687 ms, E2E 155.3687 ms
tokens: 10; KV blocks used: 0, 0
""",
    "engine_scheduler.py": """\
vllm: long TTFT 160 ms, mid TTFT 254 ms, short TTFT 253 ms
shortest_prompt_first: long TTFT 160 ms, mid TTFT 259 ms, short TTFT 183 ms
""",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]
