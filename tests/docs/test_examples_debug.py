# ruff: noqa: E501  (the lines the example prints, verbatim)
"""The debugging examples under docs/examples run and print what the docs show."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "debug_slow_ttft.py": [
        "TTFT p50 3090 ms, p90 8432 ms, max 13260 ms",
        "mooncake:26: TTFT 8540 ms, queued 5740 ms, 4 preemptions, prompt 45922 tokens",
        "stopped at 3.000000000 s: request 'mooncake:26' reached queued",
        "  3.000000000 s  request 'mooncake:26'  queued on engine 0 (role='aggregated')",
        "engine 0 (aggregated): 261 passes",
        "  waiting (10): mooncake:13, mooncake:14, mooncake:15, mooncake:17, mooncake:18, mooncake:20, mooncake:22, mooncake:23, ... (+2)",
        "  running (4): mooncake:1, mooncake:3, mooncake:8, mooncake:10",
        "  KV blocks: 906 used, 118 free of 1024; 972 hold cached prefixes",
        "  outstanding: 115304 prefill, 5425 decode tokens",
        "stopped at 8.800000000 s: breakpoint 1 (request 'mooncake:26': preempted)",
        "  8.800000000 s  request 'mooncake:26'  preempted on engine 0 (num_output=0)",
        "engine 0 (aggregated): 797 passes, pass in flight until 8.810000000 s",
        "  waiting (1): mooncake:26",
        "  running (7): mooncake:13, mooncake:17, mooncake:18, mooncake:20, mooncake:22, mooncake:23, mooncake:24",
        "  KV blocks: 923 used, 101 free of 1024; 1016 hold cached prefixes",
        "  outstanding: 45922 prefill, 1873 decode tokens",
        "  pass 8.800000000 s -> 8.810000000 s: 7 requests, 0 prefill + 7 decode tokens",
        "preempted again at 8.99 s",
        "preempted again at 9.50 s",
        "preempted again at 10.36 s",
        "stopped at 11.540000000 s: request 'mooncake:26' reached first_token",
        "  11.540000000 s  request 'mooncake:26'  first_token on engine 0",
        "request 'mooncake:26': running on engine 0",
        "  tokens: 1, first at 11.540000000 s",
        "  3.000000000 s  request 'mooncake:26'  arrived (input_length=45922, output_length=265)",
        "  3.000000000 s  request 'mooncake:26'  offered on engine 0 (outcome='tentative')",
        "  3.000000000 s  request 'mooncake:26'  committed on engine 0",
        "  3.000000000 s  request 'mooncake:26'  queued on engine 0 (role='aggregated')",
        "  8.740000000 s  request 'mooncake:26'  admitted on engine 0 (reused_tokens=512, is_readmission=False, role='aggregated')",
        "  8.740000000 s  request 'mooncake:26'  prefill_chunk on engine 0 (tokens=2735, computed=512, end_ns=8800000000)",
        "  8.800000000 s  request 'mooncake:26'  preempted on engine 0 (num_output=0)",
        "  8.930000000 s  request 'mooncake:26'  admitted on engine 0 (reused_tokens=3200, is_readmission=True, role='aggregated')",
        "  8.930000000 s  request 'mooncake:26'  prefill_chunk on engine 0 (tokens=8186, computed=3200, end_ns=8990000000)",
        "  8.990000000 s  request 'mooncake:26'  preempted on engine 0 (num_output=0)",
        "  9.380000000 s  request 'mooncake:26'  admitted on engine 0 (reused_tokens=11328, is_readmission=True, role='aggregated')",
        "  9.380000000 s  request 'mooncake:26'  prefill_chunk on engine 0 (tokens=8188, computed=11328, end_ns=9440000000)",
        "  9.440000000 s  request 'mooncake:26'  prefill_chunk on engine 0 (tokens=8188, computed=19516, end_ns=9500000000)",
        "  9.500000000 s  request 'mooncake:26'  preempted on engine 0 (num_output=0)",
        "  10.300000000 s  request 'mooncake:26'  admitted on engine 0 (reused_tokens=27648, is_readmission=True, role='aggregated')",
        "  10.300000000 s  request 'mooncake:26'  prefill_chunk on engine 0 (tokens=8189, computed=27648, end_ns=10360000000)",
        "  10.360000000 s  request 'mooncake:26'  preempted on engine 0 (num_output=0)",
        "  11.420000000 s  request 'mooncake:26'  admitted on engine 0 (reused_tokens=35776, is_readmission=True, role='aggregated')",
        "  11.420000000 s  request 'mooncake:26'  prefill_chunk on engine 0 (tokens=8190, computed=35776, end_ns=11480000000)",
        "  11.480000000 s  request 'mooncake:26'  prefill_chunk on engine 0 (tokens=1956, computed=43966, end_ns=11540000000)",
        "  11.540000000 s  request 'mooncake:26'  first_token on engine 0",
        "1023 trace events, 779 passes (772 while it waited)",
        "phases of mooncake:26:",
        "    3.000 s  queued",
        "    8.740 s  prefill",
        "    8.800 s  queued",
        "    8.930 s  prefill",
        "    8.990 s  queued",
        "    9.380 s  prefill",
        "    9.500 s  queued",
        "   10.300 s  prefill",
        "   10.360 s  queued",
        "   11.420 s  prefill",
        "   11.540 s  decode",
        "<Stop back at 10.360000000 s (1 stop back: stopped at 10.360000000 s: breakpoint 1 (request 'mooncake:26': preempted)) [1 event]>",
        "<Stop stopped at 8.740000000 s: went back to 8.740000000 s>",
        "<EngineState 0 (aggregated) 2 waiting, 7 running, KV 871/1024, pass to 8.740000000 s (7 requests, 0+7 tokens)>",
        "<Stop stopped at 8.740000000 s: engine 0: its next events [8 events]>",
        "<Stop stopped at 8.740000000 s: engine 0 started pass 796: pass 8.740000000 s -> 8.800000000 s: 8 requests, 8186 prefill + 6 decode tokens [4 events]>",
        "<PassInFlight pass 8.740000000 s -> 8.800000000 s: 8 requests, 8186 prefill + 6 decode tokens>",
    ],
}


def test_every_debug_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("debug_*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == EXPECTED[name]
