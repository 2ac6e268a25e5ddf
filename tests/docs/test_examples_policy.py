"""The policy examples under docs/examples run and print what the docs show."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "policy_choice_function.py": """\
r0:   100 tokens -> engine 0, TTFT 50.0 ms
r1:  2000 tokens -> engine 1, TTFT 50.0 ms
r2:   300 tokens -> engine 0, TTFT 100.0 ms
r3:  1500 tokens -> engine 2, TTFT 50.0 ms
r4:  1800 tokens -> engine 1, TTFT 95.0 ms
r5:    50 tokens -> engine 0, TTFT 85.0 ms
""",
    "policy_capped_queue.py": """\
r0: arrived   0.0 ms, engine 0 from   0.0 ms, done 140.0 ms
r1: arrived   1.0 ms, engine 0 from   1.0 ms, done 200.0 ms
r2: arrived   2.0 ms, engine 1 from   2.0 ms, done 142.0 ms
r3: arrived   3.0 ms, engine 1 from   3.0 ms, done 152.0 ms
r4: arrived   4.0 ms, engine 0 from 140.0 ms, done 240.0 ms
r5: rejected (engine 1: prompt_too_long)
5 completed, 1 rejected
""",
    "policy_estimate_before_placing.py": """\
    0 ms a: engine 0 idle, cached    0, first token ~50 ms
    0 ms a: engine 1 idle, cached    0, first token ~50 ms
      -> engine 0: hit 0 (pinned), queue 0, admit ~0 ms, first token ~50 ms
    1 ms b: engine 0 busy until 50 ms, cached  960, first token ~110 ms
    1 ms b: engine 1 idle, cached    0, first token ~51 ms
      -> engine 1: hit 0 (pinned), queue 0, admit ~1 ms, first token ~51 ms
    2 ms c: engine 0 busy until 50 ms, cached    0, first token ~110 ms
    2 ms c: engine 1 busy until 51 ms, cached    0, first token ~111 ms
      -> engine 0: hit 0 (pinned), queue 0, admit ~50 ms, first token ~110 ms
    3 ms d: engine 0 busy until 50 ms, cached  960, first token ~110 ms
    3 ms d: engine 1 busy until 51 ms, cached  960, first token ~111 ms
      -> engine 0: hit 960 (pinned), queue 1, admit ~50 ms, first token ~110 ms
a: engine 0, first token 50 ms
b: engine 1, first token 51 ms
c: engine 0, first token 110 ms
d: engine 0, first token 110 ms
""",
    "policy_compare_builtins.py": """\
round_robin       prefix reuse 0.667, mean TTFT   25.4 ms
random            prefix reuse 0.630, mean TTFT   34.1 ms
least_loaded      prefix reuse 0.593, mean TTFT   29.8 ms
kv_aware          prefix reuse 0.778, mean TTFT   20.5 ms
session_affinity  prefix reuse 0.815, mean TTFT   20.0 ms
""",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]
