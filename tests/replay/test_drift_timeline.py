"""A cancelled request's timeline ends where it was cancelled, with a ``cancelled`` instant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engines import EventKind, LifecycleEvent
from policies import RoundRobin
from replay import ReplaySession, TimelineRecorder, timeline_from_events

from .cancel_play import CALL_3, LOAD, cancel_workload
from .test_drift_session import TOPOLOGY
from .timeline_checks import check_timeline

MS = 1_000_000
K = EventKind


def ev(
    t_ms: float, kind: EventKind, rid: str, engine: int | None = 0, **detail: object
) -> LifecycleEvent:
    return LifecycleEvent(round(t_ms * MS), kind, rid, engine, tuple(detail.items()))


def of(doc: dict[str, Any], ph: str, rid: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in doc["traceEvents"]
        if e["ph"] == ph and (rid is None or e.get("id2") == {"local": rid})
    ]


def cancelled_events() -> list[LifecycleEvent]:
    """``a`` is cancelled while decoding on engine 0, ``b`` while with the router; ``c`` goes
    on to 300 ms (the latest event: where spans still open would be closed)."""
    return [
        ev(0, K.ARRIVED, "a", None),
        ev(0, K.COMMITTED, "a"),
        ev(0, K.QUEUED, "a"),
        ev(0, K.ADMITTED, "a", reused_tokens=0, is_readmission=False, role="aggregated"),
        ev(0, K.PREFILL_CHUNK, "a", tokens=600, computed=0, end_ns=50 * MS),
        ev(50, K.FIRST_TOKEN, "a"),
        ev(60, K.TOKEN, "a"),
        ev(60, K.ARRIVED, "b", None),
        ev(60, K.ARRIVED, "c", None),
        ev(60, K.COMMITTED, "c"),
        ev(60, K.QUEUED, "c"),
        ev(65, K.CANCELLED, "a"),
        ev(65, K.CANCELLED, "b", None),
        ev(65, K.ADMITTED, "c", reused_tokens=0, is_readmission=False, role="aggregated"),
        ev(65, K.PREFILL_CHUNK, "c", tokens=600, computed=0, end_ns=300 * MS),
        ev(300, K.FIRST_TOKEN, "c"),
        ev(300, K.FINISHED, "c", truncated=False),
    ]


def test_a_cancelled_request_closes_its_phase_and_gets_an_instant() -> None:
    doc = check_timeline(timeline_from_events(cancelled_events()).to_bytes())
    ends = {rid: [(e["ts"], e.get("args", {})) for e in of(doc, "e", rid)] for rid in "ab"}
    assert ends == {"a": [(50_000, {}), (65_000, {})], "b": [(65_000, {})]}
    begins = [(e["name"], e["args"]) for e in of(doc, "b", "a") + of(doc, "b", "b")]
    assert all("incomplete" not in args for _, args in begins)
    assert [(e["name"], e["ts"], e["pid"], e["args"]) for e in of(doc, "i")] == [
        ("cancelled", 65_000, 1, {"request_id": "a", "engine": 0}),
        ("cancelled", 65_000, 0, {"request_id": "b"}),
    ]


def test_a_profile_cancellation_ends_the_request_on_its_engine(tmp_path: Path) -> None:
    session = ReplaySession.build(
        cancel_workload(tmp_path), topology=TOPOLOGY, policy=RoundRobin(), load=LOAD
    )
    recorder = TimelineRecorder(views=[e.view for e in session.engines])
    session.journal.subscribe(recorder.on_event)
    session.run()
    doc = check_timeline(recorder.timeline().to_bytes())
    spans = [(e["name"], e["ts"], e["args"]) for e in of(doc, "b", CALL_3)]
    assert [name for name, _, _ in spans] == ["prefill", "decode"]  # placed on arrival
    assert all("incomplete" not in args for _, _, args in spans)
    assert [e["ts"] for e in of(doc, "e", CALL_3)][-1] == 8_000_000
    cancelled = [e for e in of(doc, "i") if e["name"] == "cancelled"]
    assert [(e["ts"], e["pid"], e["args"]) for e in cancelled] == [
        (8_000_000, 1, {"request_id": CALL_3, "engine": 0})
    ]
    assert json.loads(recorder.timeline().to_bytes()) == doc
