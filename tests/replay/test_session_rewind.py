"""Going back in a session, focused steps, compact reprs, engine state, timelines, close."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines import EngineConfig, EventKind, FixedTiming
from loadgen import Workload, read_trace
from policies import KVAware, RoundRobin
from replay import Aggregated, ReplaySession, TimelineFilter
from replay._cli_debug import DebugOptions, run_observed
from tests.datasets import MOONCAKE, head_lines
from tests.replay.test_session import ONE_ENGINE, preemption_workload

MS = 1_000_000
TWO = Aggregated(
    workers=2,
    engine=EngineConfig(num_blocks=1024),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)
_OPEN: list[ReplaySession] = []


@pytest.fixture(autouse=True)
def close_sessions() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def small() -> ReplaySession:
    s = ReplaySession.build(preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin())
    _OPEN.append(s)
    return s


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    path = tmp_path_factory.mktemp("trace") / "m.jsonl"
    path.write_text(head_lines(MOONCAKE, 60))
    return read_trace(path, source="mooncake")


def big(workload: Workload, **options: object) -> ReplaySession:
    s = ReplaySession.build(workload, topology=TWO, policy=KVAware(), **options)  # type: ignore[arg-type]
    _OPEN.append(s)
    return s


def state(s: ReplaySession, workload: Workload) -> str:
    requests = "\n".join(s.request(r.id).describe() for r in workload.requests)
    return f"{s.describe()}\n{requests}\n{s.now_ns} {s.loop.instant_events()}"


def test_back_returns_to_each_earlier_stop_exactly(mooncake: Workload) -> None:
    s = big(mooncake)
    seen = [state(s, mooncake)]
    moves = [
        lambda: s.run_until(time_s=2.5),
        s.step,
        lambda: s.step(engine=1),
        s.step_callback,
        lambda: s.run_until_request("mooncake:20", "admitted"),
        s.step,
        lambda: s.run_until(time_s=9.0),
        lambda: s.step(engine=0),
    ]
    for move in moves:
        move()
        seen.append(state(s, mooncake))
    assert len(s.stops) == len(moves)
    for n in (1, 2, 1, 3):
        stop = s.back(n)
        del seen[len(seen) - n :]
        assert stop.reason == "rewind"
        assert state(s, mooncake) == seen[-1]
        assert len(s.stops) == len(seen) - 1
    s.back(len(s.stops))
    assert s.now_ns == 0 and s.stops == ()


def test_back_after_the_end_and_the_report_is_unchanged(mooncake: Workload) -> None:
    s = big(mooncake)
    s.run_until(time_s=4.0)
    at_4 = state(s, mooncake)
    first = s.run()
    s.back(1)
    assert state(s, mooncake) == at_4 and not s.finished
    again = s.run()
    assert again.summary == first.summary and again.requests == first.requests


def test_goto_goes_forward_and_back_to_an_instant(mooncake: Workload) -> None:
    s = big(mooncake)
    fresh = big(mooncake)
    fresh.run_until(time_s=3.0)
    s.break_at(time_s=1.0)
    forward = s.goto(time_s=6.0)  # ignores breakpoints
    assert (forward.reason, forward.now_ns) == ("time", 6_000 * MS)
    back = s.goto(time_s=3.0)
    assert back.reason == "rewind" and back.description == (
        "stopped at 3.000000000 s: went back to 3.000000000 s"
    )
    assert state(s, mooncake) == state(fresh, mooncake)
    s.back(1)
    assert s.now_ns == 6_000 * MS


def test_going_back_refuses_what_it_cannot_do() -> None:
    s = small()
    cases = [
        (lambda: s.back(1), "cannot go back 1 stops: the session has made 0"),
        (lambda: s.back(0), "back needs a number of stops >= 1, got 0"),
        (lambda: s.goto(), "give goto exactly one of time_ns and time_s"),
        (lambda: s.goto(-1), "goto needs an instant >= 0 ns, got -1"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == message


def test_step_focused_on_an_engine_stops_at_its_next_pass(mooncake: Workload) -> None:
    s = big(mooncake)
    s.run_until(time_s=3.0)  # engine 1's pass ends at 3 s, nothing at 3 s run yet
    commit = s.step(engine=1)
    assert [(e.kind, e.engine) for e in commit.events] == [(EventKind.TOKEN, 1)] * 4
    assert s.engine(1).current_pass is None and s.engine(1).passes == 271
    stops = 0
    while s.engine(1).passes == 271:
        stop = s.step(engine=1)
        assert stop.now_ns == 3_000 * MS and all(e.engine == 1 for e in stop.events)
        stops += 1
    engine = s.engine(1)
    flight = engine.current_pass
    assert flight is not None and flight.start_ns == 3_000 * MS and flight.end_ns > flight.start_ns
    assert flight.request_ids == engine.running
    assert stop.description.startswith("stopped at 3.000000000 s: engine 1 started pass 272: ")


def test_step_focused_on_a_request_stops_at_its_next_event() -> None:
    s = small()
    steps = [[e.kind for e in s.step(request="B").events] for _ in range(3)]
    assert steps == [
        [EventKind.ARRIVED],
        [EventKind.OFFERED, EventKind.COMMITTED, EventKind.QUEUED],
        [EventKind.ADMITTED, EventKind.PREFILL_CHUNK],
    ]
    assert all(e.request_id == "B" for e in s.step(request="B").events)
    with pytest.raises(ValueError) as info:
        s.step(engine=0, request="B")
    assert str(info.value) == "give step at most one of engine and request"


def test_engine_state_shows_outstanding_tokens_and_the_pass_in_flight() -> None:
    s = small()
    s.break_on("preemption")
    s.resume()
    e = s.engine(0)
    assert (e.prefill_outstanding, e.decode_outstanding) == (640, 319)
    assert e.current_pass is not None
    assert (e.current_pass.start_ns, e.current_pass.end_ns) == (500 * MS, 510 * MS)
    assert e.current_pass.request_ids == ("A",)
    assert (e.current_pass.prefill_tokens, e.current_pass.decode_tokens) == (0, 1)


def test_reprs_are_one_short_line() -> None:
    s = small()
    s.break_on_request("B", "preempted")
    stop = s.resume()
    assert repr(stop) == (
        "<Stop stopped at 0.500000000 s: breakpoint 1 (request 'B': preempted) [1 event]>"
    )
    assert repr(s.engine(0)) == (
        "<EngineState 0 (aggregated) 1 waiting, 1 running, KV 11/20, "
        "pass to 0.510000000 s (1 request, 0+1 tokens)>"
    )
    assert repr(s.request("B")) == "<RequestState 'B' waiting on engine 0, 8 events>"
    assert repr(s.policy()) == ("<PolicyState 'round_robin' holds 0, 0 not yet taken, 0 unsettled>")
    assert repr(s.breakpoints[0]) == "<Breakpoint 1: request 'B': preempted>"
    assert repr(s) == "<ReplaySession ready at 0.500000000 s>"
    assert repr(s.run()).startswith("<ReplayResult ")
    assert len(repr(s.result)) < 200


def test_a_timeline_at_any_stop_and_after_going_back(mooncake: Workload, tmp_path: Path) -> None:
    s = big(mooncake, timeline=True)
    s.break_on_request("mooncake:20", "admitted")
    s.resume()
    path = tmp_path / "out" / "t.json"
    written = s.write_timeline(path)
    events = json.loads(path.read_bytes())["traceEvents"]
    assert len(events) == len(written.events)
    assert max(e.get("ts", 0) for e in events) <= s.now_ns / 1000
    at_stop = written.to_bytes()
    s.run_until(time_s=20.0)
    assert s.timeline().to_bytes() != at_stop
    s.back(1)
    assert s.timeline().to_bytes() == at_stop
    with pytest.raises(ValueError) as info:
        big(mooncake).timeline()
    assert str(info.value) == (
        "this session records no timeline; build it with timeline=True (or a TimelineFilter)"
    )


def test_a_filtered_session_timeline_matches_the_recorder_it_replaces(
    mooncake: Workload,
) -> None:
    window = TimelineFilter(request_ids=["mooncake:20"])
    s = big(mooncake, timeline=window)
    s.run()
    names = {e["name"] for e in json.loads(s.timeline().to_bytes())["traceEvents"]}
    assert {"pass", "queued", "prefill", "decode"} <= names


def test_close_inside_a_running_loop_unwinds_the_run() -> None:
    async def main() -> list[bool]:
        with ReplaySession.build(
            preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin()
        ) as s:
            await s.arun_until_request("B", "queued")
            loop = s.loop
        return [t.done() for t in asyncio.all_tasks(loop)]

    assert asyncio.run(main()) == []


def test_async_with_closes_the_session() -> None:
    async def main() -> tuple[bool, str]:
        async with ReplaySession.build(
            preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin()
        ) as s:
            await s.astep(request="A")
            await s.aback(1)
        with pytest.raises(RuntimeError) as info:
            s.step()
        return s.loop.is_closed(), str(info.value)

    closed, message = asyncio.run(main())
    assert closed
    assert message.startswith("the replay session failed and cannot go on: RuntimeError")


def test_a_request_timeline_keeps_the_passes_that_ran_while_it_waited(
    mooncake: Workload, tmp_path: Path
) -> None:
    rid = "mooncake:26"  # queued 5.74 s on engine 0 behind others
    path = tmp_path / "t.json"
    run_observed(
        mooncake,
        options=DebugOptions(timeline_path=path, timeline_filter=TimelineFilter(request_ids=[rid])),
        topology=TWO,
        policy=KVAware(),
    )
    events = json.loads(path.read_bytes())["traceEvents"]
    queued = [
        (b["ts"], e["ts"])
        for b, e in zip(
            [x for x in events if x.get("name") == "queued" and x["ph"] == "b"],
            [x for x in events if x.get("name") == "queued" and x["ph"] == "e"],
            strict=True,
        )
    ]
    passes = [e for e in events if e.get("name") == "pass"]
    others = [p for p in passes if rid not in p["args"]["request_ids"]]
    assert others, "the passes of the engine while the request waited are kept"
    for p in others:
        start, end = p["ts"], p["ts"] + p["dur"]
        assert p["pid"] == 1 and any(lo < end and start < hi for lo, hi in queued)
    session = big(mooncake, timeline=TimelineFilter(request_ids=[rid]))
    session.run()
    assert session.timeline().to_bytes() == path.read_bytes()
