"""Progress and timeline in a replay: lines written, results unchanged, flags parsed."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from engines import EngineConfig, FixedTiming
from loadgen import Workload, read_trace
from policies import LeastLoaded
from replay import run
from replay._cli_debug import (
    DebugOptions,
    add_debug_flags,
    debug_options_from_args,
    run_observed,
)
from replay._output import write_outputs
from replay._report import ReplayResult
from replay._timeline import TimelineFilter
from replay._topology import Aggregated
from tests.datasets import MOONCAKE, head_lines

TOPOLOGY = Aggregated(
    workers=2,
    engine=EngineConfig(num_blocks=1500, max_num_batched_tokens=4096),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)


@pytest.fixture
def workload(tmp_path: Path) -> Workload:
    sample = tmp_path / "sample.jsonl"
    sample.write_text(head_lines(MOONCAKE, 60), encoding="utf-8")
    return read_trace(sample)


def outputs(result: ReplayResult, directory: Path) -> dict[str, bytes]:
    write_outputs(result, directory)
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_progress_never_changes_the_report(workload: Workload, tmp_path: Path) -> None:
    expected = run(workload, topology=TOPOLOGY, policy=LeastLoaded(), seed=1)
    stream = io.StringIO()
    got = run_observed(
        workload,
        options=DebugOptions(progress="plain"),
        topology=TOPOLOGY,
        policy=LeastLoaded(),
        seed=1,
        progress_stream=stream,
    )
    assert outputs(got, tmp_path / "progress") == outputs(expected, tmp_path / "plain")
    last = stream.getvalue().splitlines()[-1]
    completed = sum(1 for r in expected.requests if r.status == "completed")
    assert last.startswith("virtual ") and f" done 60/60 (completed {completed})" in last


def test_debug_flags_parse_into_options() -> None:
    parser = argparse.ArgumentParser()
    add_debug_flags(parser)
    args = parser.parse_args(
        [
            "--timeline",
            "out/t.json",
            "--timeline-start-s",
            "1.5",
            "--timeline-request",
            "a",
            "--timeline-request",
            "b",
            "--progress",
            "plain",
            "--log-level",
            "info",
        ]
    )
    options = debug_options_from_args(args)
    assert options == DebugOptions(
        timeline_path=Path("out/t.json"),
        timeline_filter=TimelineFilter(start_ns=1_500_000_000, request_ids=["a", "b"]),
        progress="plain",
    )
    assert (args.log_format, args.log_level) == ("auto", "info")


def test_bad_timeline_bounds_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="simclock replay")
    add_debug_flags(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--timeline-end-s", "-1"])
    assert capsys.readouterr().err.endswith(
        "argument --timeline-end-s: must be a finite number of seconds >= 0, got '-1'\n"
    )
    args = parser.parse_args(["--timeline-start-s", "2", "--timeline-end-s", "1"])
    with pytest.raises(SystemExit):
        debug_options_from_args(args, parser=parser)
    assert capsys.readouterr().err.endswith(
        "error: timeline window ends (1000000000 ns) before it starts (2000000000 ns)\n"
    )
