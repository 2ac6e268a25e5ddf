"""finalize: per-request records and summary metrics from hand-built journals (§8)."""

from __future__ import annotations

import math

import pytest

import simclock
from replay import SLO, TERMINAL_STATUSES, EngineUsage, EventCounter, Handoff, RunMeta, finalize

from .fakes import (
    MS,
    FakeAdmission,
    FakeEvent,
    FakeKind,
    FakeTrace,
    completed,
    journal_of,
    workload_of,
)


def _run(*traces: FakeTrace, ids: list[str] | None = None, slo: SLO | None = None, **meta: object):
    ids = [t.request_id for t in traces] if ids is None else ids
    return finalize(
        journal_of(*traces),
        workload=workload_of(ids),
        meta=RunMeta(seed=0, **meta),  # type: ignore[arg-type]
        slo=slo,
    )


def test_naming_trap_mean_tpot_20_and_mean_itl_25() -> None:
    # One request with a single 10 ms gap, one with three 30 ms gaps (REFERENCE-engine §8).
    result = _run(
        completed("a", arrival_ms=0, tokens_ms=[50, 60]),
        completed("b", arrival_ms=0, tokens_ms=[50, 80, 110, 140]),
    )
    s = result.summary
    assert s.tpot_ms.mean == 20.0
    assert s.itl_ms.mean == 25.0
    assert s.itl_ms.count == 4
    assert s.tpot_ms.count == 2
    assert [r.tpot_ms for r in result.requests] == [10.0, 30.0]


def test_worked_example_a_shape_gives_ttft_50_e2e_140_tpot_ttst_10() -> None:
    # §9(a): tokens at 50, 60, ..., 140 for a request arriving at 0.
    result = _run(completed("a", arrival_ms=0, tokens_ms=[50 + 10 * i for i in range(10)]))
    record = result.requests[0]
    assert (record.ttft_ms, record.e2e_ms, record.tpot_ms, record.ttst_ms) == (50, 140, 10, 10)
    assert result.summary.itl_ms.count == 9
    assert result.summary.itl_ms.min == result.summary.itl_ms.max == 10.0
    assert record.token_times_ms == tuple(50.0 + 10 * i for i in range(10))
    assert result.summary.output_tokens_per_s_per_user.mean == 100.0  # 1000 / 10 ms


def test_ttft_and_e2e_start_at_arrival_and_queueing_at_engine_arrival() -> None:
    trace = completed("b", arrival_ms=1, tokens_ms=[110, 120, 200], admit_ms=50)
    result = _run(trace)
    record = result.requests[0]
    assert record.ttft_ms == 109.0
    assert record.e2e_ms == 199.0
    assert record.queueing_delay_ms == 49.0
    assert record.ttst_ms == 10.0
    assert record.tpot_ms == 45.0
    assert result.summary.queueing_delay_ms.mean == 49.0


def test_tokenization_and_routing_delay_are_reported_separately_from_queueing() -> None:
    trace = completed("a", arrival_ms=0, tokens_ms=[100, 110], admit_ms=30)
    trace.tokenize_start_ns = 0
    trace.tokenized_ns = 7 * MS
    trace.engine_arrival_ns = 10 * MS
    result = _run(trace)
    s = result.summary
    assert s.tokenization_ms.mean == 7.0
    assert s.routing_delay_ms.mean == 3.0
    assert s.queueing_delay_ms.mean == 20.0
    assert result.requests[0].ttft_ms == 100.0  # still from arrival


def test_duration_and_throughputs_use_completed_requests_only() -> None:
    result = _run(
        completed("a", arrival_ms=0, tokens_ms=[500, 1000], input_length=300),
        completed("b", arrival_ms=1000, tokens_ms=[1500, 1750, 2000], input_length=700),
        FakeTrace(
            "c",
            arrival_ns=100 * MS,
            engine_arrival_ns=100 * MS,
            terminal_ns=100 * MS,
            terminal_status="rejected",
            rejection_reason="too long",
        ),
    )
    s = result.summary
    assert s.duration_s == 2.0  # max completed terminal 2000 ms - min arrival 0
    assert s.completed == 2
    assert s.total_input_tokens == 1000
    assert s.total_output_tokens == 5
    assert s.request_throughput == 1.0
    assert s.input_throughput == 500.0
    assert s.output_throughput == 2.5
    assert s.total_token_throughput == 502.5
    assert s.status_counts["rejected"] == 1
    assert result.requests[2].rejection_reason == "too long"
    assert result.requests[2].ttft_ms is None


def test_goodput_counts_requests_meeting_every_inclusive_bound() -> None:
    result = _run(
        completed("ok", arrival_ms=0, tokens_ms=[200, 250, 300]),  # ttft 200, tpot 50
        completed("slow_first", arrival_ms=0, tokens_ms=[201, 210]),
        completed("slow_decode", arrival_ms=0, tokens_ms=[100, 160, 210]),  # tpot 55
        completed("one_token", arrival_ms=0, tokens_ms=[150]),  # tpot skipped
        slo=SLO(ttft_ms=200, tpot_ms=50),
    )
    goodput = result.summary.goodput
    assert goodput is not None
    assert goodput.count == 2
    assert [r.meets_slo for r in result.requests] == [True, False, False, True]
    assert result.summary.duration_s == 0.3
    assert goodput.request_goodput == pytest.approx(2 / 0.3)
    assert goodput.output_throughput == pytest.approx(4 / 0.3)
    assert goodput.attainment == 0.5
    assert goodput.attainment_of_all == 0.5


def test_without_an_slo_there_is_no_goodput() -> None:
    result = _run(completed("a", arrival_ms=0, tokens_ms=[1]), slo=SLO())
    assert result.summary.goodput is None
    assert result.summary.slo is None
    assert result.requests[0].meets_slo is None


def test_goodput_attainment_of_all_counts_requests_that_did_not_complete() -> None:
    result = _run(
        completed("a", arrival_ms=0, tokens_ms=[10]),
        FakeTrace("b", terminal_ns=0, terminal_status="rejected"),
        slo=SLO(e2e_ms=100),
    )
    assert result.summary.goodput is not None
    assert result.summary.goodput.attainment == 1.0
    assert result.summary.goodput.attainment_of_all == 0.5


def test_prefix_reuse_ratio_uses_first_admission_and_a_readmission_variant() -> None:
    a = completed("a", arrival_ms=0, tokens_ms=[50], input_length=1000)
    b = completed("b", arrival_ms=1, tokens_ms=[110], input_length=1000, reused=960)
    # b was preempted and readmitted with a 448-token hit.
    b.admissions.append(FakeAdmission(2090 * MS, 448, True))
    b.num_preemptions = 1
    result = _run(a, b)
    s = result.summary
    assert s.reused_input_tokens == 960
    assert s.prefix_reuse_ratio == 0.48  # 960 / 2000, §9(c)
    assert s.reused_input_tokens_with_readmissions == 1408
    assert s.prefix_reuse_ratio_with_readmissions == 1408 / 2000
    assert s.preemptions == 1
    admissions = result.requests[1].admissions
    assert [(x.at_ms, x.reused_tokens, x.is_readmission) for x in admissions] == [
        (1.0, 960, False),
        (2090.0, 448, True),
    ]


def test_engine_utilisation_is_busy_time_over_duration_with_preemptions() -> None:
    a = completed("a", arrival_ms=0, tokens_ms=[500, 1000], engine=0)
    b = completed("b", arrival_ms=0, tokens_ms=[2000], engine=1)
    b.num_preemptions = 2
    result = _run(
        a,
        b,
        engines=(EngineUsage(0, 500 * MS, 3), EngineUsage(1, 1500 * MS, 7), EngineUsage(2, 0, 0)),
    )
    engines = result.summary.engines
    assert [e.index for e in engines] == [0, 1, 2]
    assert [e.utilisation for e in engines] == [0.25, 0.75, 0.0]
    assert [e.busy_ms for e in engines] == [500.0, 1500.0, 0.0]
    assert [e.passes for e in engines] == [3, 7, 0]
    assert [e.preemptions for e in engines] == [0, 2, 0]
    assert [e.completed for e in engines] == [1, 1, 0]


def test_every_request_ends_in_exactly_one_terminal_status() -> None:
    traces = [
        completed("done", arrival_ms=0, tokens_ms=[10]),
        FakeTrace("refused", terminal_ns=0, terminal_status="rejected"),
        FakeTrace("held", engine=None),  # released, never placed
        FakeTrace("running", engine=1, engine_arrival_ns=0, token_times_ns=[5 * MS]),
        FakeTrace("broken", terminal_ns=0, terminal_status="failed"),
        FakeTrace("late", terminal_ns=0, terminal_status="cancelled"),
        FakeTrace("orphan", engine=None, terminal_status="skipped"),
    ]
    ids = [t.request_id for t in traces] + ["never"]
    result = _run(*traces, ids=ids)
    assert [r.status for r in result.requests] == [
        "completed",
        "rejected",
        "unplaced",
        "incomplete",
        "failed",
        "cancelled",
        "skipped",
        "never_issued",
    ]
    assert list(result.summary.status_counts) == list(TERMINAL_STATUSES)
    assert set(result.summary.status_counts.values()) == {1}
    assert result.evidence.accounted == result.evidence.requests == 8
    # An incomplete request keeps its tokens but enters no metric.
    assert result.requests[3].output_tokens == 1
    assert result.summary.ttft_ms.count == 1


def test_requests_traced_outside_the_workload_follow_it_in_journal_order() -> None:
    result = _run(
        completed("x#1", arrival_ms=0, tokens_ms=[10]),
        completed("a", arrival_ms=0, tokens_ms=[10]),
        ids=["a"],
    )
    assert [r.request_id for r in result.requests] == ["a", "x#1"]
    assert result.summary.completed == 2


def test_completed_request_without_output_tokens_counts_in_throughput_not_latency() -> None:
    prefill_only = FakeTrace(
        "p",
        output_length=0,
        arrival_ns=0,
        engine_arrival_ns=0,
        terminal_ns=50 * MS,
        terminal_status="completed",
    )
    result = _run(prefill_only, completed("a", arrival_ms=0, tokens_ms=[100]))
    s = result.summary
    assert s.completed == 2
    assert s.ttft_ms.count == 1
    assert s.total_input_tokens == 200
    assert s.duration_s == 0.1


def test_nothing_completed_leaves_duration_and_rates_empty() -> None:
    result = _run(FakeTrace("r", terminal_ns=0, terminal_status="rejected"))
    s = result.summary
    assert s.duration_s is None
    assert s.request_throughput is None
    assert s.prefix_reuse_ratio is None
    assert s.ttft_ms.count == 0


def test_event_counts_come_from_the_kept_events_sorted_by_kind() -> None:
    journal = journal_of(
        completed("a", arrival_ms=0, tokens_ms=[1]),
        events=["arrived", "queued", "admitted", "first_token", "finished", "arrived"],
    )
    result = finalize(journal, workload=workload_of(["a"]), meta=RunMeta(seed=3))
    assert list(result.evidence.event_counts.items()) == [
        ("admitted", 1),
        ("arrived", 2),
        ("finished", 1),
        ("first_token", 1),
        ("queued", 1),
    ]
    assert result.meta.seed == 3
    assert result.meta.simclock_version == simclock.__version__


def test_event_counts_from_run_meta_win_over_the_journal() -> None:
    journal = journal_of(completed("a", arrival_ms=0, tokens_ms=[1]), events=["arrived"])
    counter = EventCounter()
    for kind in ("queued", "arrived", "queued"):
        counter(FakeEvent(FakeKind(kind)))
    meta = RunMeta(seed=0, event_counts=counter.counts)
    result = finalize(journal, workload=workload_of(["a"]), meta=meta)
    assert result.evidence.event_counts == {"arrived": 1, "queued": 2}


def test_token_counts_come_from_the_records_and_prefill_chunks_are_left_out() -> None:
    # An unobserved run folds tokens into traces without TOKEN events; an observed one
    # records them and PREFILL_CHUNK too. Both give the same evidence.
    trace = completed("a", arrival_ms=0, tokens_ms=[10, 20, 30])
    quiet = finalize(
        journal_of(trace, events=["arrived", "first_token"]),
        workload=workload_of(["a"]),
        meta=RunMeta(seed=0),
    )
    watched = finalize(
        journal_of(trace, events=["prefill_chunk", "arrived", "first_token", "token", "token"]),
        workload=workload_of(["a"]),
        meta=RunMeta(seed=0),
    )
    expected = {"arrived": 1, "first_token": 1, "token": 2}
    assert quiet.evidence.event_counts == watched.evidence.event_counts == expected


def test_unknown_terminal_status_is_an_internal_error() -> None:
    with pytest.raises(simclock.InternalError) as info:
        _run(FakeTrace("a", terminal_status="exploded"))
    assert str(info.value) == "request 'a' has unknown terminal status 'exploded'"


def test_times_are_exact_milliseconds_of_integer_nanoseconds() -> None:
    trace = completed("a", arrival_ms=0, tokens_ms=[5.3687, 15.3687])
    result = _run(trace)
    assert result.requests[0].ttft_ms == 5.3687
    assert math.isclose(result.requests[0].tpot_ms or 0, 10.0)


def test_output_tokens_per_s_per_user_pools_positive_gaps_only() -> None:
    # Gaps 10 ms and 0 ms (two tokens in one pass) then 20 ms: 1000/10 and 1000/20 pooled.
    result = _run(completed("a", arrival_ms=0, tokens_ms=[10, 20, 20, 40]))
    d = result.summary.output_tokens_per_s_per_user
    assert d.count == 2
    assert (d.min, d.max, d.mean) == (50.0, 100.0, 75.0)
    assert result.summary.itl_ms.count == 3  # the zero gap is still an inter-token latency
    assert result.summary.itl_ms.min == 0.0


def test_disaggregated_fields_become_a_handoff_record() -> None:
    trace = completed("a", arrival_ms=0, tokens_ms=[65.3687, 75.3687])
    trace.prefill_worker = 0
    trace.decode_worker = 1
    trace.prefill_admit_ns = 0
    trace.prefill_done_ns = 50 * MS
    trace.destination_reserved_ns = 50 * MS
    trace.transfer_done_ns = 55_368_700
    trace.decode_admit_ns = 55_368_700
    trace.transfer_tokens = 1024
    trace.transfer_ms = 5.3687
    trace.decode_reused_tokens = 0
    (record,) = _run(trace).requests
    assert record.handoff == Handoff(
        prefill_worker=0,
        decode_worker=1,
        prefill_admit_ms=0.0,
        prefill_done_ms=50.0,
        destination_reserved_ms=50.0,
        transfer_done_ms=55.3687,
        decode_admit_ms=55.3687,
        transfer_tokens=1024,
        transfer_ms=5.3687,
        decode_reused_tokens=0,
    )
    assert record.ttft_ms == 65.3687


def test_aggregated_requests_have_no_handoff_record() -> None:
    (record,) = _run(completed("a", arrival_ms=0, tokens_ms=[1])).requests
    assert record.handoff is None
