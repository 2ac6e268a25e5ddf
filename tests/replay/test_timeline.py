"""The Chrome trace-event timeline: structure, content, filters and determinism."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

import simclock
from engines import (
    BlockKeyer,
    Engine,
    EngineConfig,
    EventKind,
    FixedTiming,
    Journal,
    LifecycleEvent,
)
from loadgen import ArrivalRule, Request, Workload
from policies._pd import PDPolicy
from replay import Disaggregated, KVLink
from replay._session import ReplaySession
from replay._timeline import Timeline, TimelineFilter, TimelineRecorder, timeline_from_events

from .timeline_checks import check_timeline

MS = 1_000_000
K = EventKind


def ev(
    t_ms: float, kind: EventKind, rid: str, engine: int | None = 0, **detail: object
) -> LifecycleEvent:
    return LifecycleEvent(round(t_ms * MS), kind, rid, engine, tuple(detail.items()))


def aggregated_events() -> list[LifecycleEvent]:
    """Two requests on one engine in the order the engine records them; b is preempted."""
    return [
        ev(0, K.ARRIVED, "a", None),
        ev(0, K.COMMITTED, "a"),
        ev(0, K.QUEUED, "a"),
        ev(0, K.ADMITTED, "a", reused_tokens=0, is_readmission=False, role="aggregated"),
        ev(0, K.PREFILL_CHUNK, "a", tokens=600, computed=0, end_ns=50 * MS),
        ev(1, K.ARRIVED, "b", None),
        ev(1, K.OFFERED, "b"),
        ev(1, K.COMMITTED, "b"),
        ev(1, K.QUEUED, "b"),
        ev(50, K.FIRST_TOKEN, "a"),
        ev(50, K.ADMITTED, "b", reused_tokens=0, is_readmission=False, role="aggregated"),
        ev(50, K.PREFILL_CHUNK, "b", tokens=600, computed=0, end_ns=110 * MS),
        ev(110, K.TOKEN, "a"),
        ev(110, K.FIRST_TOKEN, "b"),
        ev(120, K.TOKEN, "a"),
        ev(120, K.TOKEN, "b"),
        ev(120, K.PREEMPTED, "b", num_output=2),
        ev(130, K.TOKEN, "a"),
        ev(130, K.FINISHED, "a", truncated=False),
        ev(130, K.ADMITTED, "b", reused_tokens=448, is_readmission=True, role="aggregated"),
        ev(130, K.PREFILL_CHUNK, "b", tokens=154, computed=448, end_ns=190 * MS),
        ev(190, K.TOKEN, "b"),
        ev(190, K.FINISHED, "b", truncated=False),
        ev(200, K.ARRIVED, "c", None),
        ev(200, K.ABORTED, "c", reason="engine full"),
        ev(200, K.REJECTED, "c", reason="too long"),
    ]


def pd_events() -> list[LifecycleEvent]:
    """One request through a prefill engine (0), the KV link and a decode engine (1)."""
    return [
        ev(0, K.ARRIVED, "r", None),
        ev(0, K.COMMITTED, "r", 0),
        ev(0, K.QUEUED, "r", 0, role="prefill"),
        ev(0, K.ADMITTED, "r", 0, reused_tokens=0, is_readmission=False, role="prefill"),
        ev(0, K.PREFILL_CHUNK, "r", 0, tokens=1000, computed=0, end_ns=50 * MS),
        ev(50, K.PREFILL_DONE, "r", 0),
        ev(50, K.COMMITTED, "r", 1),
        ev(50, K.QUEUED, "r", 1, role="decode"),
        ev(52, K.RESERVED, "r", 1, reused_tokens=0),
        ev(57.3687, K.TRANSFER_DONE, "r", 1, transfer_tokens=1024, transfer_ms=5.3687),
        ev(57.3687, K.ADMITTED, "r", 1, reused_tokens=0, is_readmission=False, role="decode"),
        ev(67.3687, K.FIRST_TOKEN, "r", 1),
        ev(77.3687, K.TOKEN, "r", 1),
        ev(77.3687, K.FINISHED, "r", 1, truncated=False),
    ]


def of(doc: dict[str, Any], ph: str, name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == ph and (name is None or e["name"] == name)]


def test_aggregated_timeline_is_well_formed() -> None:
    check_timeline(timeline_from_events(aggregated_events()).to_bytes())


def test_each_pass_is_one_slice_with_its_batch_in_args() -> None:
    doc = check_timeline(timeline_from_events(aggregated_events()).to_bytes())
    passes = [(e["ts"], e["dur"], e["args"]) for e in of(doc, "X", "pass")]
    assert passes == [
        (
            0,
            50_000,
            {"batch_size": 1, "prefill_tokens": 600, "decode_tokens": 0, "request_ids": ["a"]},
        ),
        (
            50_000,
            60_000,
            {"batch_size": 2, "prefill_tokens": 600, "decode_tokens": 1, "request_ids": ["a", "b"]},
        ),
        (
            110_000,
            10_000,
            {"batch_size": 2, "prefill_tokens": 0, "decode_tokens": 2, "request_ids": ["a", "b"]},
        ),
        (
            120_000,
            10_000,
            {"batch_size": 1, "prefill_tokens": 0, "decode_tokens": 1, "request_ids": ["a"]},
        ),
        (
            130_000,
            60_000,
            {"batch_size": 1, "prefill_tokens": 154, "decode_tokens": 0, "request_ids": ["b"]},
        ),
    ]


def test_request_phases_are_async_spans_keyed_by_request_id() -> None:
    doc = check_timeline(timeline_from_events(aggregated_events()).to_bytes())
    spans = [(e["name"], e["ts"], e["pid"]) for e in of(doc, "b") if e["id2"] == {"local": "b"}]
    assert spans == [
        ("queued", 1000, 1),
        ("prefill", 50_000, 1),
        ("decode", 110_000, 1),
        ("queued", 120_000, 1),
        ("prefill", 130_000, 1),
    ]
    readmitted = [e for e in of(doc, "b", "prefill") if e["args"].get("readmission")]
    assert [e["args"] for e in readmitted] == [
        {"request_id": "b", "reused_tokens": 448, "readmission": True}
    ]


def test_preemption_rejection_and_abort_are_instants() -> None:
    doc = check_timeline(timeline_from_events(aggregated_events()).to_bytes())
    instants = [(e["name"], e["ts"], e["pid"], e["args"]) for e in of(doc, "i")]
    assert instants == [
        ("preempted", 120_000, 1, {"request_id": "b", "engine": 0, "num_output": 2}),
        ("dispatch aborted", 200_000, 0, {"request_id": "c", "engine": 0, "reason": "engine full"}),
        ("rejected", 200_000, 1, {"request_id": "c", "engine": 0, "reason": "too long"}),
    ]


def test_flows_go_from_dispatch_to_the_pass_that_admits_the_request() -> None:
    doc = check_timeline(timeline_from_events(aggregated_events()).to_bytes())
    flows = [(e["ph"], e["ts"], e["pid"]) for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert flows == [("s", 0, 0), ("f", 0, 1), ("s", 1000, 0), ("f", 50_000, 1)]


def test_prefill_decode_timeline_has_a_kv_link_and_a_handoff_flow() -> None:
    doc = check_timeline(timeline_from_events(pd_events()).to_bytes())
    names = {e["pid"]: e["args"]["name"] for e in of(doc, "M", "process_name")}
    assert names == {0: "router", 1: "engine 0 (prefill)", 2: "engine 1 (decode)", 3: "KV link"}
    phases = [(e["name"], e["pid"], e["ts"]) for e in of(doc, "b")]
    assert phases == [
        ("prefill", 1, 0),
        ("reserve", 2, 50_000),
        ("transfer", 3, 52_000),
        ("decode", 2, 57_368.7),
    ]
    handoffs = [
        (e["ph"], e["pid"], e["ts"]) for e in doc["traceEvents"] if e.get("name") == "handoff"
    ]
    assert handoffs == [("s", 1, 0), ("f", 2, 57_368.7)]
    decode_passes = [(e["ts"], e["dur"]) for e in of(doc, "X", "pass") if e["pid"] == 2]
    assert decode_passes == [(57_368.7, 10_000), (67_368.7, 10_000)]


@attrs.define
class FakeView:
    waiting_count: int = 0
    running_count: int = 0
    kv_blocks_used: int = 0


def test_counters_sample_the_engine_views_once_per_instant_and_change() -> None:
    view = FakeView()
    recorder = TimelineRecorder(views=[view])
    script = [(0, 1, 0, 0), (0, 0, 1, 10), (1, 1, 1, 10), (50, 0, 2, 20), (110, 0, 2, 20)]
    for t_ms, waiting, running, used in script:
        view.waiting_count, view.running_count, view.kv_blocks_used = waiting, running, used
        recorder.on_event(ev(t_ms, K.QUEUED, "a"))
    doc = check_timeline(recorder.timeline().to_bytes())
    requests = [(e["ts"], e["args"]) for e in of(doc, "C", "requests")]
    assert requests == [
        (0, {"waiting": 0, "running": 1}),
        (1000, {"waiting": 1, "running": 1}),
        (50_000, {"waiting": 0, "running": 2}),
    ]
    kv = [(e["ts"], e["args"]) for e in of(doc, "C", "kv_blocks")]
    assert kv == [(0, {"used": 10}), (50_000, {"used": 20})]


def test_open_phases_are_closed_at_the_last_event_and_marked_incomplete() -> None:
    events = aggregated_events()[:12]
    doc = check_timeline(timeline_from_events(events).to_bytes())
    open_spans = [
        (e["name"], e["id2"]["local"]) for e in of(doc, "b") if e["args"].get("incomplete")
    ]
    assert open_spans == [("decode", "a"), ("prefill", "b")]
    ends = [e["ts"] for e in of(doc, "e") if e["id2"]["local"] == "b"]
    assert ends[-1] == 50_000


def test_window_filter_clips_spans_and_keeps_overlapping_passes() -> None:
    f = TimelineFilter(start_ns=100 * MS, end_ns=125 * MS)
    doc = check_timeline(timeline_from_events(aggregated_events(), filter=f).to_bytes())
    assert [e["ts"] for e in of(doc, "X", "pass")] == [50_000, 110_000, 120_000]
    times = [e["ts"] for e in doc["traceEvents"] if e["ph"] in "be"]
    assert min(times) == 100_000 and max(times) == 125_000
    assert [e["name"] for e in of(doc, "i")] == ["preempted"]


def test_request_filter_keeps_only_that_requests_spans_and_passes() -> None:
    f = TimelineFilter(request_ids=["a"])
    doc = check_timeline(timeline_from_events(aggregated_events(), filter=f).to_bytes())
    assert {e["id2"]["local"] for e in of(doc, "b")} == {"a"}
    assert [e["ts"] for e in of(doc, "X", "pass")] == [0, 50_000, 110_000, 120_000]
    assert of(doc, "i") == []


def test_window_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError) as info:
        TimelineFilter(start_ns=10, end_ns=5)
    assert str(info.value) == "timeline window ends (5 ns) before it starts (10 ns)"


def test_times_are_microseconds_from_integer_nanoseconds() -> None:
    events = [
        LifecycleEvent(1, K.ARRIVED, "x", None),
        LifecycleEvent(1_234_567, K.FAILED, "x", None, (("reason", "boom"),)),
    ]
    doc = check_timeline(timeline_from_events(events).to_bytes())
    assert [e["ts"] for e in doc["traceEvents"] if e["ph"] != "M"] == [0.001, 1234.567, 1234.567]


def test_same_events_give_the_same_bytes(tmp_path: Path) -> None:
    first = timeline_from_events(aggregated_events())
    second = timeline_from_events(aggregated_events())
    assert first.to_bytes() == second.to_bytes()
    path = tmp_path / "timeline.json"
    first.write(path)
    assert path.read_bytes() == first.to_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.json"]


def test_output_is_one_json_object_with_one_event_per_line() -> None:
    data = timeline_from_events(pd_events()).to_bytes()
    lines = data.decode().splitlines()
    assert lines[0] == '{"displayTimeUnit":"ms","traceEvents":['
    assert lines[-1] == "]}"
    assert len(lines) == len(json.loads(data)["traceEvents"]) + 2
    assert isinstance(Timeline(()).to_bytes(), bytes)


def preemption_run(recorder: TimelineRecorder | None = None) -> tuple[list[LifecycleEvent], int]:
    """REFERENCE-engine §9(e) on a real engine: B is preempted at 500 ms, readmitted at 2090."""
    journal = Journal()
    engine = Engine(
        0,
        EngineConfig(num_blocks=20),
        FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        keyer=BlockKeyer(),
        journal=journal,
    )
    if recorder is not None:
        recorder.views = (engine.view,)
        journal.subscribe(recorder.on_event)

    def request(rid: str, ids: list[int], at_ms: float) -> Request:
        return Request(rid, 600, 200, 64, ids, ArrivalRule(not_before_ms=at_ms))

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(engine.run())
        engine.submit(request("A", list(range(1, 11)), 0))
        await simclock.sleep_ns(MS, waiter="test")
        engine.submit(request("B", list(range(11, 21)), 1))
        engine.close()
        await task

    simclock.run(main())
    return journal.events, engine.passes


def test_a_real_engine_run_gives_a_well_formed_timeline_with_the_preemption() -> None:
    recorder = TimelineRecorder()
    preemption_run(recorder)
    doc = check_timeline(recorder.timeline().to_bytes())
    assert [(e["ts"], e["args"]["request_id"]) for e in of(doc, "i", "preempted")] == [
        (500_000, "B")
    ]
    passes = of(doc, "X", "pass")
    assert passes[0]["ts"] == 0 and passes[0]["dur"] == 50_000
    assert passes[1]["args"]["request_ids"] == ["A", "B"]
    readmit = [e["ts"] for e in of(doc, "b", "prefill") if e["args"].get("readmission")]
    assert readmit == [2_090_000]
    kv = [e["args"]["used"] for e in of(doc, "C", "kv_blocks")]
    assert max(kv) == 20


def test_rebuilt_passes_match_the_engines_passes() -> None:
    events, pass_count = preemption_run()
    doc = check_timeline(timeline_from_events(events).to_bytes())
    passes = of(doc, "X", "pass")
    assert len(passes) == pass_count
    for before, after in itertools.pairwise(passes):
        assert before["ts"] + before["dur"] <= after["ts"]
    a_passes = [p for p in passes if "A" in p["args"]["request_ids"]]
    assert len(a_passes) == 200
    assert [p["ts"] for p in passes if p["args"]["batch_size"] == 2][:2] == [50_000, 110_000]


def test_a_real_prefill_decode_run_has_transfers_on_the_kv_link() -> None:
    topology = Disaggregated(
        prefill_engine=EngineConfig(num_blocks=10_000),
        decode_engine=EngineConfig(num_blocks=10_000),
        link=KVLink(kv_bytes_per_token=262_144, bandwidth_gbps=50.0),
    )
    requests = tuple(
        Request(rid, 1000, 10, 512, [1, 2], ArrivalRule(not_before_ms=at_ms))
        for rid, at_ms in (("a", 0.0), ("b", 500.0))
    )
    workload = Workload(requests=requests, source="ex", format="python")
    with ReplaySession.build(workload, topology=topology, policy=PDPolicy()) as s:
        recorder = TimelineRecorder(views=[e.view for e in s.engines])
        s.journal.subscribe(recorder.on_event)
        s.run()
    doc = check_timeline(recorder.timeline().to_bytes())
    names = {e["pid"]: e["args"]["name"] for e in of(doc, "M", "process_name")}
    assert names == {0: "router", 1: "engine 0 (prefill)", 2: "engine 1 (decode)", 3: "KV link"}
    transfers = [e for e in doc["traceEvents"] if e["ph"] in "be" and e["name"] == "transfer"]
    assert [(e["ph"], e["ts"], e["id2"]["local"]) for e in transfers] == [
        ("b", 50_000, "a"),
        ("e", 55_368.709, "a"),
        ("b", 550_000, "b"),
        ("e", 550_335.544, "b"),
    ]
    handoffs = [e["ts"] for e in doc["traceEvents"] if e.get("name") == "handoff"]
    assert handoffs == [0, 55_368.709, 500_000, 550_335.544]
