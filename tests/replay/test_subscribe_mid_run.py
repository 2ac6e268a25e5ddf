"""A subscriber that comes while a run is in flight sees, from then on, exactly the events
the per-pass engine records: macro-stepped runs in flight end at their next pass start and
commit their pass in flight with its events. Journal subscribers (from a stop, from inside
another subscriber, widened and narrowed again with ``resubscribe``) and KV-event
subscribers alike; the run's results do not change."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from engines import EventKind, KVEvent, LifecycleEvent
from replay._session import ReplaySession

from .observed_runs import MS, SCENARIOS, options

KINDS: dict[str, list[EventKind] | None] = {
    "all": None,
    "tokens": [EventKind.TOKEN],
    "chunks": [EventKind.PREFILL_CHUNK],
    "tokens_and_finishes": [EventKind.TOKEN, EventKind.FINISHED],
}

Row = tuple[int, str, str, int | None, tuple[tuple[str, object], ...]]


def _row(e: LifecycleEvent) -> Row:
    return (e.time_ns, e.kind.value, e.request_id, e.engine, e.detail)


def _session(scenario: str, stepping: str) -> ReplaySession:
    return ReplaySession.build(**options(scenario), history=False, stepping=stepping)


def _running(session: ReplaySession) -> bool:
    """Whether an engine is in the middle of a macro-stepped run."""
    return any(engine._run is not None for engine in session.engines)


def _stop_in_a_run(scenario: str, rng: np.random.Generator) -> int:
    """An instant at which the macro-stepped run has a run in flight."""
    for _ in range(50):
        at = int(rng.integers(1, 2_500 * MS))
        with _session(scenario, "macro") as probe:
            probe.run_until(time_ns=at)
            if _running(probe):
                return at
    raise AssertionError("no instant with a run in flight")  # pragma: no cover


def _both(
    scenario: str, watch: Callable[[ReplaySession, list[object]], None]
) -> dict[str, list[object]]:
    """Run the scenario macro-stepped and pass by pass with the same watcher; what each saw."""
    seen: dict[str, list[object]] = {}
    results = []
    for stepping in ("macro", "pass"):
        rows: list[object] = []
        with _session(scenario, stepping) as session:
            watch(session, rows)
            session.run()
            results.append(session.result.summary)
        seen[stepping] = rows
    assert results[0] == results[1]
    return seen


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kinds", sorted(KINDS))
def test_a_subscriber_from_a_stop_sees_what_the_per_pass_engine_records(
    scenario: str, kinds: str
) -> None:
    rng = np.random.default_rng([7, SCENARIOS.index(scenario), sorted(KINDS).index(kinds)])
    at = _stop_in_a_run(scenario, rng)

    def watch(session: ReplaySession, rows: list[object]) -> None:
        session.run_until(time_ns=at)
        session.journal.subscribe(lambda e: rows.append(_row(e)), kinds=KINDS[kinds])

    seen = _both(scenario, watch)
    assert seen["macro"] == seen["pass"]
    watched = {row[1] for row in seen["pass"]}  # type: ignore[index]
    assert watched & {"token", "prefill_chunk"}  # the per-pass kinds were seen


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_widening_and_narrowing_a_subscription_sees_what_the_per_pass_engine_records(
    scenario: str,
) -> None:
    rng = np.random.default_rng([8, SCENARIOS.index(scenario)])
    first = _stop_in_a_run(scenario, rng)
    widen, narrow = first + int(rng.integers(1, 300 * MS)), first + int(rng.integers(300, 900) * MS)
    finishes = [EventKind.FINISHED]

    def watch(session: ReplaySession, rows: list[object]) -> None:
        def on_event(e: LifecycleEvent) -> None:
            rows.append(_row(e))

        session.run_until(time_ns=first)
        session.journal.subscribe(on_event, kinds=finishes)
        session.run_until(time_ns=widen)
        session.journal.resubscribe(on_event)
        session.run_until(time_ns=narrow)
        session.journal.resubscribe(on_event, kinds=finishes)
        rows.append(("macro-stepping again", not session.journal.wants_token_events))

    seen = _both(scenario, watch)
    assert seen["macro"] == seen["pass"]
    assert ("macro-stepping again", True) in seen["macro"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_subscriber_added_inside_another_sees_what_the_per_pass_engine_records(
    scenario: str,
) -> None:
    # a subscriber for finishes subscribes one for every kind when the n-th request
    # finishes: in the middle of a pass's commit, at whatever instant that is
    n = int(np.random.default_rng([9, SCENARIOS.index(scenario)]).integers(5, 40))

    def watch(session: ReplaySession, rows: list[object]) -> None:
        finished = []

        def on_finish(e: LifecycleEvent) -> None:
            finished.append(e)
            if len(finished) == n:
                session.journal.subscribe(lambda e: rows.append(_row(e)))

        session.journal.subscribe(on_finish, kinds=[EventKind.FINISHED])

    seen = _both(scenario, watch)
    assert seen["macro"] == seen["pass"]
    assert any(row[1] == "token" for row in seen["pass"])  # type: ignore[index]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_kv_event_subscriber_from_a_stop_sees_what_the_per_pass_engine_publishes(
    scenario: str,
) -> None:
    at = _stop_in_a_run(scenario, np.random.default_rng([10, SCENARIOS.index(scenario)]))

    def watch(session: ReplaySession, rows: list[object]) -> None:
        session.run_until(time_ns=at)

        def on_kv(e: KVEvent) -> None:
            rows.append(e)

        for engine in session.engines:
            engine.subscribe_kv(on_kv)

    seen = _both(scenario, watch)
    assert seen["macro"] == seen["pass"]
    assert seen["pass"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_kv_event_subscriber_added_inside_a_journal_subscriber_sees_the_same_events(
    scenario: str,
) -> None:
    n = int(np.random.default_rng([11, SCENARIOS.index(scenario)]).integers(5, 40))

    def watch(session: ReplaySession, rows: list[object]) -> None:
        finished = []

        def on_kv(e: KVEvent) -> None:
            rows.append(e)

        def on_finish(e: LifecycleEvent) -> None:
            finished.append(e)
            if len(finished) == n:
                for engine in session.engines:
                    engine.subscribe_kv(on_kv)

        session.journal.subscribe(on_finish, kinds=[EventKind.FINISHED])

    seen = _both(scenario, watch)
    assert seen["macro"] == seen["pass"]
    assert seen["pass"]
