"""Records streamed as requests settle: the same bytes as records kept to the end; the summary
from compact columns; the reorder buffer and its spill file; the request log's cleanup."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simclock
from engines import EngineConfig, FixedTiming, TokenizerStage, TokenTimes
from loadgen import (
    LoadMode,
    Profile,
    SyntheticSpec,
    Workload,
    generate_synthetic,
    parse_synthetic,
    read_weka,
)
from policies import LeastLoaded, PDPolicy, RoundRobin
from replay import (
    OUTPUT_FILES,
    SLO,
    Aggregated,
    Distribution,
    ReplayResult,
    RequestLog,
    RequestRecord,
    run,
    write_outputs,
)
from replay._records import Settled, request_line
from replay._stream import RecordStream

from .pd_helpers import example_d

Scenario = Callable[[], dict[str, Any]]


def _synthetic(text: str, seed: int = 3) -> Workload:
    spec: SyntheticSpec = parse_synthetic(text)
    return generate_synthetic(spec, seed=seed)


def _small_engines(workers: int = 2, blocks: int = 400) -> Aggregated:
    return Aggregated(
        workers=workers,
        engine=EngineConfig(num_blocks=blocks),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )


def _open_loop() -> dict[str, Any]:
    return {
        "workload": _synthetic(
            "count=300 arrivals=poisson(60) input=lognormal(600,400) output=lognormal(40,30)"
        ),
        "topology": _small_engines(),
        "policy": RoundRobin(),
        "slo": SLO(ttft_ms=80, tpot_ms=6, e2e_ms=400),
    }


def _pressure_and_cutoff() -> dict[str, Any]:
    # few KV blocks: preemptions and rejections; the cutoff leaves requests incomplete
    # and never issued
    return {
        "workload": _synthetic(
            "count=200 arrivals=poisson(200) input=lognormal(900,700) output=lognormal(60,50)",
            seed=11,
        ),
        "topology": _small_engines(workers=2, blocks=90),
        "policy": LeastLoaded(),
        "max_virtual_time_s": 1.5,
    }


def _sessions_closed_loop() -> dict[str, Any]:
    return {
        "workload": _synthetic(
            "count=40 arrivals=poisson(20) input=200 output=20 turns=3 think_ms=100", seed=5
        ),
        "topology": _small_engines(),
        "policy": RoundRobin(),
        "load": LoadMode(concurrency=6),
        "tokenizer": TokenizerStage(workers=1, base_ms=1.0, per_input_token_us=20.0),
    }


def _disaggregated() -> dict[str, Any]:
    return {
        "workload": _synthetic(
            "count=60 arrivals=poisson(30) input=lognormal(800,500) output=30", seed=7
        ),
        "topology": example_d(prefill_workers=2, decode_workers=2),
        "policy": PDPolicy(),
    }


def _profile_cancel(tmp_path: Path) -> dict[str, Any]:
    def call(t: float, out: int) -> dict[str, Any]:
        return {"t": t, "type": "n", "model": "m", "in": 128, "out": out, "api_time": 1,
                "hash_ids": [1, 2]}  # fmt: skip

    play = {
        "id": "p1",
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": [call(10 * i, 2000 if i == 3 else 5) for i in range(5)],
    }
    path = tmp_path / "ex.json"
    path.write_text(json.dumps(play))
    return {
        "workload": read_weka(path),
        "topology": Aggregated(
            workers=1,
            engine=EngineConfig(num_blocks=100),
            timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        ),
        "policy": RoundRobin(),
        "load": LoadMode(
            lanes=1,
            snapshots=True,
            snapshot_seed=42,
            profile=Profile(duration_s=5.0, grace_s=3.0),
        ),
    }


SCENARIOS: dict[str, Scenario] = {
    "open_loop_slo": _open_loop,
    "pressure_cutoff": _pressure_and_cutoff,
    "sessions_closed_loop_tokenizer": _sessions_closed_loop,
    "disaggregated": _disaggregated,
}


def _files(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in OUTPUT_FILES}


def _kept_and_streamed(
    options: dict[str, Any], tmp_path: Path, token_times: Any, stepping: Any = "macro"
) -> tuple[dict[str, bytes], dict[str, bytes], ReplayResult, ReplayResult]:
    kept = run(**options, stepping=stepping)
    write_outputs(kept, tmp_path / "kept", token_times=token_times)
    out = tmp_path / "streamed"
    with RequestLog.open(out, token_times=token_times) as log:
        streamed = run(**options, stepping=stepping, request_log=log)
        write_outputs(streamed, out, token_times=token_times, request_log=log)
    return _files(tmp_path / "kept"), _files(out), kept, streamed


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("token_times", ["full", "runs", "none"])
def test_streamed_report_is_the_kept_report_byte_for_byte(
    name: str, token_times: str, tmp_path: Path
) -> None:
    kept_files, streamed_files, kept, streamed = _kept_and_streamed(
        SCENARIOS[name](), tmp_path, token_times
    )
    assert streamed_files == kept_files
    assert streamed.requests == ()
    assert len(kept.requests) == kept.summary.requests
    assert streamed.summary == kept.summary
    lines = streamed_files["requests.jsonl"].splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == [
        r.request_id for r in kept.requests
    ]


def test_streamed_report_is_the_kept_report_with_per_pass_steps(tmp_path: Path) -> None:
    kept_files, streamed_files, _, _ = _kept_and_streamed(
        _pressure_and_cutoff(), tmp_path, "full", stepping="pass"
    )
    assert streamed_files == kept_files


def test_streamed_report_of_a_profile_with_cancellation_is_the_kept_one(tmp_path: Path) -> None:
    kept_files, streamed_files, kept, _ = _kept_and_streamed(
        _profile_cancel(tmp_path), tmp_path, "full"
    )
    assert streamed_files == kept_files
    assert {r.status for r in kept.requests} == {"cancelled", "never_issued"}


def test_a_streamed_run_keeps_no_trace_of_settled_requests(tmp_path: Path) -> None:
    from replay._session import ReplaySession

    options = _open_loop()
    with RequestLog.open(tmp_path, token_times="none") as log:
        session = ReplaySession.build(**options, history=False, request_log=log)
        session.run()
        assert session.journal.traces == {}


# --------------------------------------------------------------------------------------------
# The summary from columns, against a direct computation from the kept records


def _reference_summary(result: ReplayResult) -> dict[str, object]:
    """The summary figures recomputed from the records, as plain Python lists."""
    measured = [r for r in result.requests if r.phase == "measure"]
    completed = [r for r in measured if r.status == "completed"]
    population = [r for r in completed if r.output_tokens >= 1]
    gaps: list[int] = []
    for r in population:
        if r.output_tokens >= 2:
            gaps.extend(np.diff(TokenTimes(_expand(r)).array()).tolist())
    itl = np.array(gaps, dtype=np.int64) / 1_000_000
    return {
        "requests": len(result.requests),
        "completed": len(completed),
        "total_input_tokens": sum(r.input_length for r in completed),
        "total_output_tokens": sum(r.output_tokens for r in completed),
        "reused_input_tokens": sum(r.reused_input_tokens for r in completed),
        "reused_input_tokens_with_readmissions": sum(
            a.reused_tokens for r in completed for a in r.admissions
        ),
        "preemptions": sum(r.num_preemptions for r in result.requests),
        "ttft_ms": Distribution.of([r.ttft_ms for r in population if r.ttft_ms is not None]),
        "ttst_ms": Distribution.of([r.ttst_ms for r in population if r.ttst_ms is not None]),
        "tpot_ms": Distribution.of([r.tpot_ms for r in population if r.tpot_ms is not None]),
        "e2el_ms": Distribution.of([r.e2e_ms for r in population if r.e2e_ms is not None]),
        "queueing_delay_ms": Distribution.of(
            [r.queueing_delay_ms for r in population if r.queueing_delay_ms is not None]
        ),
        "itl_ms": Distribution.of(itl),
        "output_tokens_per_s_per_user": Distribution.of(1000.0 / itl[itl > 0]),
        "status_counts": {
            s: sum(1 for r in result.requests if r.status == s)
            for s in result.summary.status_counts
        },
    }


def _expand(record: RequestRecord) -> list[int]:
    out: list[int] = []
    for start, step, count in record.token_time_runs_ns:
        out.extend(start + step * k for k in range(count))
    return out


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_summary_from_columns_equals_a_direct_computation_from_records(name: str) -> None:
    result = run(**SCENARIOS[name]())
    summary = result.summary
    for key, expected in _reference_summary(result).items():
        assert getattr(summary, key) == expected, key
    if name == "disaggregated":
        assert summary.pd_phases is not None and summary.pd_phases.transfer_ms.count > 0
    else:
        assert summary.pd_phases is None


# --------------------------------------------------------------------------------------------
# The reorder buffer


def _records(n: int) -> list[Settled]:
    options = _open_loop()
    options["workload"] = _synthetic("count=12 arrivals=poisson(50) input=100 output=3")
    result = run(**options)
    return [Settled(r) for r in result.requests[:n]]


def test_records_put_in_any_order_come_out_in_position_order_and_spill_beyond_the_bound(
    tmp_path: Path,
) -> None:
    settled = _records(10)
    written: list[bytes] = []
    stream = RecordStream(
        [],
        keep=True,
        write=written.append,
        token_times="full",
        spill_bytes=1,  # every waiting line goes to the spill file
        spill_dir=str(tmp_path),
    )
    positions = [stream.next_extra() for _ in settled]
    order = [3, 1, 0, 9, 2, 8, 4, 7, 6, 5]
    for i in order:
        if i == 6:
            stream.skip(positions[i])
        else:
            stream.put(positions[i], settled[i])
    kept = stream.close()
    expected = [s.record for i, s in enumerate(settled) if i != 6]
    assert kept == tuple(expected)
    assert written == [request_line(r) for r in expected]
    assert len(stream.columns) == 9


def test_a_position_given_twice_or_left_waiting_is_an_internal_error() -> None:
    settled = _records(2)
    stream = RecordStream([], keep=False)
    first, second = stream.next_extra(), stream.next_extra()
    stream.put(second, settled[1])
    with pytest.raises(simclock.InternalError, match="given twice"):
        stream.put(second, settled[1])
    with pytest.raises(simclock.InternalError, match=f"position {second} waits for position"):
        stream.close()
    stream.put(first, settled[0])
    assert stream.close() == ()


# --------------------------------------------------------------------------------------------
# The request log


def test_a_request_log_never_written_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir"
    with RequestLog.open(out, token_times="runs") as log:
        log.write(b"{}\n")
        assert out.is_dir()
    assert not (tmp_path / "new").exists()


def test_a_run_that_raises_leaves_no_request_log_file(tmp_path: Path) -> None:
    options = _open_loop()
    with pytest.raises(ValueError, match="boom"), RequestLog.open(tmp_path) as log:
        run(**options, request_log=log)
        raise ValueError("boom")
    assert list(tmp_path.iterdir()) == []


def test_write_outputs_refuses_a_request_log_of_another_directory(tmp_path: Path) -> None:
    options = _open_loop()
    with RequestLog.open(tmp_path / "a") as log:
        result = run(**options, request_log=log)
        with pytest.raises(ValueError, match="request_log: opened on"):
            write_outputs(result, tmp_path / "b", request_log=log)
        with pytest.raises(ValueError, match="request_log: opened with token_times='full'"):
            write_outputs(result, tmp_path / "a", token_times="none", request_log=log)


def test_a_stream_uses_the_positions_it_is_given_and_builds_them_otherwise() -> None:
    requests = _synthetic("count=5 arrivals=poisson(50) input=100 output=3").requests
    given = {r.id: i for i, r in enumerate(requests)}
    stream = RecordStream(requests, keep=False, positions=given)
    assert stream.position(requests[3].id) == 3
    assert stream.position("elsewhere") is None
    assert stream.positions is given  # no table of its own
    built = RecordStream(requests, keep=False)
    assert built.positions is None
    assert [built.position(r.id) for r in requests] == [0, 1, 2, 3, 4]
    assert built.positions == given
