"""The journal folds lifecycle events into per-request traces and tells subscribers."""

from __future__ import annotations

import attrs
import pytest

from engines import (
    NEVER_NS,
    Admission,
    EngineConfig,
    EventKind,
    FixedTiming,
    Journal,
    LifecycleEvent,
)
from replay._runner import RunJournal
from simclock import InternalError

from .sim import core, req, simulate


def ev(
    t: int, kind: EventKind, rid: str = "a", engine: int | None = 0, **detail: object
) -> LifecycleEvent:
    return LifecycleEvent(t, kind, rid, engine, tuple(detail.items()))


def test_traces_follow_first_event_order_and_fold_every_kind() -> None:
    j = Journal()
    j.record(ev(5, EventKind.ARRIVED, "b", None, input_length=10, output_length=3))
    j.record(ev(6, EventKind.ARRIVED, "a", None, input_length=20, output_length=2))
    j.record(ev(7, EventKind.TOKENIZED, "a", None, start_ns=6))
    j.record(ev(8, EventKind.QUEUED, "a"))
    j.record(ev(9, EventKind.ADMITTED, "a", reused_tokens=16, is_readmission=False))
    j.record(ev(10, EventKind.FIRST_TOKEN, "a"))
    j.record(ev(11, EventKind.PREEMPTED, "a"))
    j.record(ev(12, EventKind.ADMITTED, "a", reused_tokens=8, is_readmission=True))
    j.record(ev(13, EventKind.TOKEN, "a"))
    j.record(ev(13, EventKind.FINISHED, "a", truncated=True))
    j.record(ev(14, EventKind.REJECTED, "b", reason="prompt_too_long"))
    assert list(j.traces) == ["b", "a"]
    a = j.traces["a"]
    assert (a.input_length, a.output_length, a.arrival_ns) == (20, 2, 6)
    assert (a.tokenize_start_ns, a.tokenized_ns, a.engine_arrival_ns, a.engine) == (6, 7, 8, 0)
    assert a.admissions == [Admission(9, 16, False), Admission(12, 8, True)]
    assert (a.first_admit_ns, a.reused_input_tokens, a.num_preemptions) == (9, 16, 1)
    assert a.token_times_ns == [10, 13] and (a.first_token_ns, a.last_token_ns) == (10, 13)
    assert (a.terminal_ns, a.terminal_status, a.truncated) == (13, "completed", True)
    b = j.traces["b"]
    assert (b.terminal_ns, b.terminal_status, b.rejection_reason) == (
        14,
        "rejected",
        "prompt_too_long",
    )
    assert b.engine_arrival_ns == 14 and b.engine == 0
    assert len(j.events) == 11


def test_pd_events_fill_the_pd_fields() -> None:
    j = Journal()
    j.record(ev(1, EventKind.QUEUED, engine=0, role="prefill"))
    j.record(
        ev(1, EventKind.ADMITTED, engine=0, reused_tokens=0, is_readmission=False, role="prefill")
    )
    j.record(ev(50, EventKind.PREFILL_DONE, engine=0))
    j.record(ev(50, EventKind.RESERVED, engine=3, reused_tokens=960))
    j.record(ev(55, EventKind.TRANSFER_DONE, engine=3, transfer_tokens=64, transfer_ms=0.3355))
    j.record(
        ev(55, EventKind.ADMITTED, engine=3, reused_tokens=0, is_readmission=False, role="decode")
    )
    t = j.traces["a"]
    assert (t.prefill_worker, t.prefill_admit_ns, t.prefill_done_ns) == (0, 1, 50)
    assert (t.decode_worker, t.destination_reserved_ns, t.decode_reused_tokens) == (3, 50, 960)
    assert (t.transfer_done_ns, t.transfer_tokens, t.transfer_ms) == (55, 64, 0.3355)
    assert t.decode_admit_ns == 55
    assert t.admissions == [Admission(1, 0, False)]  # the activation is not a cache admission
    j.record(ev(60, EventKind.FAILED, engine=None, reason="no decode capacity"))
    assert (t.terminal_status, t.failure_reason) == ("failed", "no decode capacity")


def test_subscribers_run_in_order_after_the_trace_is_updated() -> None:
    j = Journal(keep_events=False)
    seen: list[tuple[str, int]] = []
    j.subscribe(lambda e: seen.append(("first", len(j.traces[e.request_id].token_times_ns))))
    j.subscribe(lambda e: seen.append(("second", e.time_ns)))
    j.record(ev(3, EventKind.FIRST_TOKEN))
    assert seen == [("first", 1), ("second", 3)]
    assert j.events == []


def test_event_get_reads_detail_by_name() -> None:
    e = ev(1, EventKind.ABORTED, reason="x")
    assert e.get("reason") == "x" and e.get("missing", 7) == 7


def test_wants_token_events_needs_an_observer() -> None:
    assert Journal().wants_token_events
    assert not Journal(keep_events=False).wants_token_events
    quiet = Journal(keep_events=False, token_events=False)
    quiet.subscribe(print)
    assert not quiet.wants_token_events
    watched = Journal(keep_events=False)
    watched.subscribe(print)
    assert watched.wants_token_events


def test_a_subscriber_with_kinds_sees_only_those_kinds_in_subscription_order() -> None:
    j = Journal(keep_events=False)
    seen: list[tuple[str, EventKind]] = []
    j.subscribe(lambda e: seen.append(("all", e.kind)))
    j.subscribe(lambda e: seen.append(("done", e.kind)), kinds=[EventKind.FINISHED])
    j.subscribe(lambda e: seen.append(("last", e.kind)))
    j.record(ev(1, EventKind.FIRST_TOKEN))
    j.record(ev(2, EventKind.FINISHED))
    assert seen == [
        ("all", EventKind.FIRST_TOKEN),
        ("last", EventKind.FIRST_TOKEN),
        ("all", EventKind.FINISHED),
        ("done", EventKind.FINISHED),
        ("last", EventKind.FINISHED),
    ]


def test_subscribers_that_skip_tokens_and_chunks_keep_the_fast_path() -> None:
    j = Journal(keep_events=False)
    j.subscribe(print, kinds=[EventKind.FINISHED, EventKind.PREFILL_DONE])
    assert not j.wants_token_events
    assert not j.wants(EventKind.PREFILL_CHUNK)
    assert j.wants(EventKind.FINISHED)
    j.subscribe(print, kinds=[EventKind.TOKEN])
    assert j.wants_token_events
    assert Journal().wants(EventKind.PREFILL_CHUNK)  # kept events


def test_resubscribing_changes_the_kinds_a_subscriber_sees_from_the_next_event() -> None:
    j = Journal(keep_events=False)
    seen: list[tuple[str, EventKind]] = []

    def everything(e: LifecycleEvent) -> None:
        seen.append(("all", e.kind))

    def finishes(e: LifecycleEvent) -> None:
        seen.append(("done", e.kind))

    j.subscribe(everything)
    j.subscribe(finishes, kinds=[EventKind.FINISHED])
    assert j.wants_token_events
    j.record(ev(1, EventKind.TOKEN))
    j.resubscribe(everything, kinds=[EventKind.FINISHED, EventKind.FIRST_TOKEN])
    assert not j.wants_token_events  # nobody watches tokens any more: the fast path
    assert not j.wants(EventKind.PREFILL_CHUNK)
    j.record(ev(2, EventKind.TOKEN))
    j.record(ev(3, EventKind.FIRST_TOKEN))
    j.resubscribe(finishes)  # every kind again
    assert j.wants_token_events
    j.record(ev(4, EventKind.TOKEN))
    j.record(ev(5, EventKind.FINISHED))
    assert seen == [
        ("all", EventKind.TOKEN),
        ("all", EventKind.FIRST_TOKEN),
        ("done", EventKind.TOKEN),
        ("all", EventKind.FINISHED),
        ("done", EventKind.FINISHED),
    ]


def test_resubscribing_a_callback_that_is_not_subscribed_is_refused() -> None:
    j = Journal(keep_events=False)
    j.subscribe(print, kinds=[EventKind.FINISHED])
    with pytest.raises(ValueError, match="is not subscribed to this journal"):
        j.resubscribe(repr, kinds=[EventKind.TOKEN])
    assert not j.wants_token_events  # nothing changed


def test_per_pass_events_are_owed_from_the_earliest_instant_a_subscriber_asks_for() -> None:
    j = Journal(keep_events=False)
    assert (j.token_events_from_ns, j.chunk_events_from_ns) == (NEVER_NS, NEVER_NS)
    j.subscribe(print, kinds=[EventKind.FINISHED], passes_from_ns=5)  # no per-pass kind
    assert (j.token_events_from_ns, j.chunk_events_from_ns) == (NEVER_NS, NEVER_NS)
    j.subscribe(repr, passes_from_ns=70)
    assert (j.token_events_from_ns, j.chunk_events_from_ns) == (70, 70)
    j.subscribe(str, kinds=[EventKind.PREFILL_CHUNK], passes_from_ns=30)
    assert (j.token_events_from_ns, j.chunk_events_from_ns) == (70, 30)
    j.resubscribe(repr, kinds=[EventKind.TOKEN], passes_from_ns=10)
    assert (j.token_events_from_ns, j.chunk_events_from_ns) == (10, 30)
    j.resubscribe(repr, kinds=[EventKind.FINISHED])
    assert (j.token_events_from_ns, j.chunk_events_from_ns) == (NEVER_NS, 30)
    j.token_events = False
    j.subscribe(print)  # from the start, but this journal records no TOKEN events
    assert (j.token_events_from_ns, j.chunk_events_from_ns) == (NEVER_NS, 0)
    kept = Journal()  # every event is kept: owed from the start
    assert (kept.token_events_from_ns, kept.chunk_events_from_ns) == (0, 0)


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_a_subscription_owed_passes_from_a_bad_instant_is_refused(bad: object) -> None:
    j = Journal(keep_events=False)
    with pytest.raises(ValueError, match="passes_from_ns: must be an int >= 0, got"):
        j.subscribe(print, passes_from_ns=bad)  # type: ignore[arg-type]
    j.subscribe(print)
    with pytest.raises(ValueError, match="passes_from_ns: must be an int >= 0, got"):
        j.resubscribe(print, passes_from_ns=bad)  # type: ignore[arg-type]
    assert j.token_events_from_ns == 0  # nothing changed


def test_an_engine_watched_for_finishes_only_records_the_same_traces() -> None:
    requests = [req("a", 700, 5), req("b", 300, 3, arrival_ms=20.0)]
    plain = core(EngineConfig(num_blocks=64), FixedTiming(prefill_ms=50, decode_ms=10))
    plain.journal.keep_events = False
    simulate(plain, requests)
    watched_journal = Journal(keep_events=False)
    finished: list[tuple[str, int]] = []
    watched_journal.subscribe(
        lambda e: finished.append((e.request_id, e.time_ns)), kinds=[EventKind.FINISHED]
    )
    watched = core(
        EngineConfig(num_blocks=64),
        FixedTiming(prefill_ms=50, decode_ms=10),
        journal=watched_journal,
    )
    simulate(watched, requests)
    for rid in ("a", "b"):
        assert attrs.asdict(watched.journal.traces[rid]) == attrs.asdict(plain.journal.traces[rid])
    assert len(plain.journal.traces["a"].token_times_ns) == 5
    assert sorted(finished) == [(rid, plain.journal.traces[rid].terminal_ns) for rid in ("a", "b")]


def test_a_marked_event_is_made_only_when_kept_or_watched() -> None:
    quiet = Journal(keep_events=False)
    quiet.mark(5, EventKind.OFFERED, "a", 0, (("outcome", "tentative"),))
    assert quiet.events == []
    assert quiet.traces["a"].request_id == "a"  # made, as record makes it
    kept = Journal()
    kept.mark(5, EventKind.COMMITTED, "a", 1)
    assert kept.events == [LifecycleEvent(5, EventKind.COMMITTED, "a", 1)]
    seen: list[LifecycleEvent] = []
    watched = Journal(keep_events=False)
    watched.subscribe(seen.append, kinds=[EventKind.OFFERED])
    watched.mark(7, EventKind.OFFERED, "b", 2, (("outcome", "busy"),))
    watched.mark(7, EventKind.COMMITTED, "b", 2)  # not watched: not made
    assert seen == [LifecycleEvent(7, EventKind.OFFERED, "b", 2, (("outcome", "busy"),))]


def test_marking_a_kind_that_changes_traces_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match=r"^finished events change traces: record them$"):
        Journal(keep_events=False).mark(5, EventKind.FINISHED, "a", 0)


def test_the_run_journal_counts_marked_events() -> None:
    journal = RunJournal(keep_events=False)
    journal.mark(1, EventKind.OFFERED, "a", 0)
    journal.mark(1, EventKind.COMMITTED, "a", 0)
    journal.record(LifecycleEvent(1, EventKind.QUEUED, "a", 0))
    assert journal.event_counts() == {"committed": 1, "offered": 1, "queued": 1}
