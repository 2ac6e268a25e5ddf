"""A timeline recorder attached to a run (``Run.timeline_recorder``) gives up per-token and
prefill-chunk events once its window is past, so the engines macro-step the rest of the run;
its timeline stays byte-identical, at every stop, to a recorder that took every event."""

from __future__ import annotations

import numpy as np
import pytest

from engines import EventKind, Journal, LifecycleEvent
from replay._session import ReplaySession
from replay._timeline import TimelineFilter, TimelineRecorder

from .observed_runs import MS, SCENARIOS
from .observed_runs import options as _options


def _oracle(scenario: str, f: TimelineFilter) -> tuple[ReplaySession, TimelineRecorder]:
    """A session with a recorder that takes every event (subscribed, not attached)."""
    session = ReplaySession.build(**_options(scenario), history=False)
    recorder = TimelineRecorder(views=tuple(e.view for e in session.engines), filter=f)
    session.journal.subscribe(recorder.on_event)
    return session, recorder


def _compare(scenario: str, f: TimelineFilter, stops: list[int]) -> ReplaySession:
    """Run both to each stop and to the end; the timelines must be the same bytes at each."""
    oracle, everything = _oracle(scenario, f)
    session = ReplaySession.build(**_options(scenario), history=False, timeline=f)
    for stop in stops:
        if stop <= session.now_ns:
            continue
        oracle.run_until(time_ns=stop)
        session.run_until(time_ns=stop)
        assert session.now_ns == oracle.now_ns
        assert session.timeline().to_bytes() == everything.timeline().to_bytes(), stop
    oracle.run()
    session.run()
    assert session.timeline().to_bytes() == everything.timeline().to_bytes()
    assert session.result.summary == oracle.result.summary
    return session


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("seed", range(6))
def test_a_narrowed_recorder_gives_every_timeline_of_one_that_took_every_event(
    scenario: str, seed: int
) -> None:
    rng = np.random.default_rng([2026, seed, SCENARIOS.index(scenario)])
    end = int(rng.integers(50 * MS, 2_500 * MS))
    start = None if seed % 2 else int(rng.integers(0, end))
    requests = None if seed < 4 else frozenset(f"syn:{i}" for i in rng.integers(0, 90, 3))
    f = TimelineFilter(start_ns=start, end_ns=end, request_ids=requests)
    # stops before the window, around its start, just after its end (while the window's
    # last passes finish) and later on
    early = (
        [] if start is None else [int(start * 0.5), start, start + int(rng.integers(1, 20 * MS))]
    )
    stops = sorted(
        {*early, *(end + int(d) for d in rng.integers(1, 200 * MS, 6)), end + 3_000 * MS}
    )
    session = _compare(scenario, f, stops)
    # the recorder gave the per-pass kinds up: nobody wants them any more
    assert not session.journal.wants(EventKind.TOKEN)
    assert not session.journal.wants(EventKind.PREFILL_CHUNK)


_TOKENS = (EventKind.TOKEN, EventKind.FIRST_TOKEN)


def _events(scenario: str) -> list[LifecycleEvent]:
    session = ReplaySession.build(**_options(scenario), history=False)
    events: list[LifecycleEvent] = []
    session.journal.subscribe(events.append)
    session.run()
    return events


def test_a_readmitted_prompt_computing_past_the_window_keeps_the_token_events() -> None:
    # A readmission's prefill phase ends at a TOKEN (not a FIRST_TOKEN): when it began in
    # the window and its recompute takes several passes, the recorder must keep the token
    # events until that token, though no pass of the window is running any more.
    events = _events("chunked")
    found = None
    for i, admitted in enumerate(events):
        if admitted.kind is not EventKind.ADMITTED or not admitted.get("is_readmission"):
            continue
        later = [e for e in events[i + 1 :] if e.request_id == admitted.request_id]
        token = next(e for e in later if e.kind in (EventKind.TOKEN, EventKind.FIRST_TOKEN))
        t = token.time_ns
        chunks = {e.time_ns for e in later if e.kind is EventKind.PREFILL_CHUNK and e.time_ns < t}
        phase_end = next(e for e in later if e.time_ns > t and e.kind not in _TOKENS)
        if token.kind is EventKind.TOKEN and len(chunks) > 1 and phase_end.time_ns > t + 1:
            found = admitted, token
            break
    assert found is not None, "the scenario has no readmission recomputed over several passes"
    admitted, token = found
    f = TimelineFilter(end_ns=admitted.time_ns)
    # stop between the token that ends the phase and the request's next event: the phase
    # is closed (not incomplete) only if the recorder saw that token
    session = _compare("chunked", f, [token.time_ns + 1])
    assert not session.journal.wants(EventKind.TOKEN)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_window_start_lets_the_engines_macro_step_up_to_it(scenario: str) -> None:
    start = int(np.random.default_rng([2027, SCENARIOS.index(scenario)]).integers(500, 2_000)) * MS
    f = TimelineFilter(start_ns=start)
    stops = [start // 4, start // 2, start - 1, start, start + 7 * MS, start + 900 * MS]
    # before the window the recorder is owed nothing: engines take runs
    with ReplaySession.build(**_options(scenario), history=False, timeline=f) as probe:
        assert probe.journal.token_events_from_ns == start
        assert probe.journal.chunk_events_from_ns == start
        if scenario != "pd":  # (the P/D example's decode engines hold reservations)
            assert any(_in_a_run(probe, stop) for stop in stops[:3])
    session = _compare(scenario, f, stops)
    assert session.journal.wants(EventKind.TOKEN)  # no window end: kept to the end


def _in_a_run(session: ReplaySession, stop: int) -> bool:
    session.run_until(time_ns=stop)
    return any(engine._run is not None for engine in session.engines)


def test_a_recorder_without_engine_views_keeps_every_event() -> None:
    class Counters:
        waiting_count = 0
        running_count = 0
        kv_blocks_used = 0

    journal = Journal(keep_events=False)
    recorder = TimelineRecorder(views=[Counters()], filter=TimelineFilter(end_ns=10))
    recorder.attach(journal)
    assert journal.wants(EventKind.TOKEN)
    journal.record(LifecycleEvent(5, EventKind.ARRIVED, "a"))
    journal.record(LifecycleEvent(20, EventKind.ARRIVED, "b"))
    # past the window, but what the views run cannot be asked: nothing is given up
    assert journal.wants(EventKind.TOKEN)
    assert journal.wants(EventKind.PREFILL_CHUNK)


def test_a_recorder_without_a_window_end_keeps_every_event() -> None:
    session = ReplaySession.build(
        **_options("preempting"), history=False, timeline=TimelineFilter(start_ns=100 * MS)
    )
    session.run()
    assert session.journal.wants(EventKind.TOKEN)


@pytest.mark.parametrize("history", [False, True])
def test_going_back_past_a_narrowed_window_finds_the_same_timelines(history: bool) -> None:
    f = TimelineFilter(start_ns=200 * MS, end_ns=900 * MS)
    oracle, everything = _oracle("preempting", f)
    with ReplaySession.build(**_options("preempting"), history=history, timeline=f) as session:
        seen = []
        for stop in (800 * MS, 950 * MS, 1_500 * MS, 3_000 * MS):
            session.run_until(time_ns=stop)
            oracle.run_until(time_ns=stop)
            seen.append((session.now_ns, session.timeline().to_bytes()))
            assert seen[-1][1] == everything.timeline().to_bytes()
        for back in range(1, 4):
            session.back(1)
            assert (session.now_ns, session.timeline().to_bytes()) == seen[-1 - back]
        session.run_until(time_ns=3_000 * MS)
        assert (session.now_ns, session.timeline().to_bytes()) == seen[-1]
        # the recorder gave the per-token events up; a session with history still watches them
        assert session.journal.wants(EventKind.TOKEN) is history
    oracle.close()
