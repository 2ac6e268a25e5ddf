"""The replay session: build without running, step, break, inspect, finish identically."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import simclock
from engines import EngineConfig, EventKind, FixedTiming, TokenizerStage
from loadgen import ArrivalRule, Request, Workload, read_trace
from policies import LeastLoaded, PolicyContext, RequestStream, RoundRobin
from policies._pd import PDPolicy
from replay import Disaggregated, KVLink, run
from replay._exceptions import ReplayFailedError
from replay._metrics import SLO
from replay._output import write_outputs
from replay._report import ReplayResult
from replay._session import ReplaySession, describe_event
from replay._topology import Aggregated
from simclock import get_logger, log_context
from simclock.testing import capture_logs
from tests.datasets import MOONCAKE, head_lines

MS = 1_000_000
ONE_ENGINE = Aggregated(
    workers=1,
    engine=EngineConfig(num_blocks=20),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)


def preemption_workload() -> Workload:
    """REFERENCE-engine §9(e): B is preempted at 500 ms and readmitted at 2090 ms."""
    requests = (
        Request("A", 600, 200, 64, list(range(1, 11)), ArrivalRule(not_before_ms=0)),
        Request("B", 600, 200, 64, list(range(11, 21)), ArrivalRule(not_before_ms=1)),
    )
    return Workload(requests=requests, source="ex", format="test")


def session(**options: object) -> ReplaySession:
    s = ReplaySession.build(
        preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin(), **options
    )
    _OPEN.append(s)
    return s


_OPEN: list[ReplaySession] = []


def session_with(policy: object) -> ReplaySession:
    s = ReplaySession.build(preemption_workload(), topology=ONE_ENGINE, policy=policy)
    _OPEN.append(s)
    return s


@pytest.fixture(autouse=True)
def close_sessions() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def output_bytes(result: ReplayResult, directory: Path) -> dict[str, bytes]:
    write_outputs(result, directory)
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_built_session_has_run_nothing() -> None:
    s = session()
    assert s.now_ns == 0
    assert s.request("A").state == "pending"
    assert s.request("A").history == ()
    assert s.engine(0).waiting == () and s.engine(0).passes == 0
    assert not s.finished
    assert repr(s) == "<ReplaySession ready at 0.000000000 s>"


def test_step_runs_until_the_next_lifecycle_events() -> None:
    s = session()
    first = s.step()
    assert first.reason == "step"
    assert [(e.kind, e.request_id) for e in first.events] == [(EventKind.ARRIVED, "A")]
    second = s.step()
    assert [e.kind for e in second.events] == [
        EventKind.OFFERED,
        EventKind.COMMITTED,
        EventKind.QUEUED,
    ]
    assert s.request("A").state == "waiting"


def test_a_preemption_breakpoint_stops_right_after_the_preemption() -> None:
    s = session()
    bp = s.break_on("preemption")
    stop = s.resume()
    assert stop.reason == "breakpoint" and stop.breakpoint == bp
    assert stop.now_ns == 500 * MS
    assert str(stop) == (
        "stopped at 0.500000000 s: breakpoint 1 (preempted)\n"
        "  0.500000000 s  request 'B'  preempted on engine 0 (num_output=40)"
    )
    engine = s.engine(0)
    assert (engine.waiting, engine.running) == (("B",), ("A",))
    assert engine.in_pass and engine.pass_end_ns == 510 * MS
    assert engine.kv_blocks_used + engine.kv_blocks_free == engine.kv_blocks_total == 20
    assert s.request("B").state == "waiting"
    assert s.request("B").history[-1].kind is EventKind.PREEMPTED
    assert [r.request_id for r in s.in_flight()] == ["A", "B"]


def test_run_until_an_instant_stops_before_anything_at_that_instant() -> None:
    s = session()
    stop = s.run_until(time_s=2.09)
    assert stop.reason == "time" and s.now_ns == 2090 * MS
    assert s.request("A").state == "running"
    assert s.engine(0).pass_end_ns == 2090 * MS
    s.step()
    assert s.request("A").state == "completed"


def test_run_until_request_reaches_the_readmission_with_its_prefix_hit() -> None:
    s = session()
    s.break_on("preemption")
    s.resume()
    stop = s.run_until_request("B", "admitted")
    assert stop.reason == "request" and stop.now_ns == 2090 * MS
    assert [(e.get("reused_tokens"), e.get("is_readmission")) for e in stop.events] == [(448, True)]
    done = s.run_until_request("B", "finished")
    assert done.now_ns == 3740 * MS
    again = s.run_until_request("B", "admitted")
    assert again.now_ns == 3740 * MS and again.events == stop.events
    assert str(again).startswith("stopped at 3.740000000 s: request 'B' has ended (finished)")


def test_time_request_and_predicate_breakpoints() -> None:
    s = session()
    at = s.break_at(time_ns=100 * MS)
    on_b = s.break_on_request("B", "first_token")
    busy = s.break_when(lambda x: "B" in x.engine(0).waiting, description="B waits")
    stops = [s.resume() for _ in range(3)]
    assert [(x.breakpoint, x.now_ns) for x in stops] == [
        (busy, 1 * MS),
        (at, 100 * MS),
        (on_b, 110 * MS),
    ]
    s.delete(busy)
    assert s.breakpoints == (on_b,)
    s.clear_breakpoints()
    assert s.resume().reason == "finished"


def test_run_until_a_predicate() -> None:
    s = session()
    stop = s.run_until(lambda x: x.engine(0).kv_blocks_used == 20)
    assert stop.reason == "predicate" and stop.now_ns == 50 * MS


def test_a_finished_session_reports_and_further_steps_say_finished() -> None:
    s = session()
    result = s.run()
    assert s.finished and s.result is result
    assert s.step().reason == "finished"
    assert s.resume().reason == "finished"


def test_stepped_session_gives_the_same_report_bytes_as_run(tmp_path: Path) -> None:
    expected = run(
        preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin(), keep_events=True
    )
    s = session(keep_events=True)
    s.step()
    s.break_on("preemption")
    s.break_at(time_ns=1234 * MS)
    s.resume()
    s.run_until_request("B", "admitted")
    s.run_until(time_s=3.0)
    for _ in range(5):
        s.step_callback()
    got = s.run()
    assert output_bytes(got, tmp_path / "session") == output_bytes(expected, tmp_path / "run")


def test_a_session_stepped_on_a_real_trace_matches_run(tmp_path: Path) -> None:
    sample = tmp_path / "sample.jsonl"
    sample.write_text(head_lines(MOONCAKE, 80), encoding="utf-8")
    workload = read_trace(sample)
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=2000, max_num_batched_tokens=4096),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    expected = run(workload, topology=topology, policy=LeastLoaded(), seed=3, keep_events=True)
    s = ReplaySession.build(
        workload, topology=topology, policy=LeastLoaded(), seed=3, keep_events=True
    )
    _OPEN.append(s)
    s.break_on("preemption", "rejection")
    s.run_until(time_s=30.0)
    s.resume()
    for _ in range(20):
        s.step()
    got = s.run()
    assert output_bytes(got, tmp_path / "session") == output_bytes(expected, tmp_path / "run")


def test_a_session_with_history_off_or_on_matches_a_plain_run(tmp_path: Path) -> None:
    want = output_bytes(
        run(preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin()), tmp_path / "run"
    )
    watched = session()
    watched.run_until(time_s=1.0)
    assert output_bytes(watched.run(), tmp_path / "watched") == want
    quiet = session(history=False)
    quiet.run_until(time_s=1.0)
    assert output_bytes(quiet.run(), tmp_path / "quiet") == want


@pytest.mark.asyncio
async def test_awaitable_variants_work_inside_a_running_loop() -> None:
    s = session()
    first = await s.astep()
    assert first.events[0].kind is EventKind.ARRIVED
    s.break_on("preemption")
    stop = await s.aresume()
    assert stop.now_ns == 500 * MS
    assert (await s.arun_until(time_s=0.6)).now_ns == 600 * MS
    assert (await s.arun_until_request("A", "finished")).now_ns == 2090 * MS
    result = await s.arun()
    assert result is s.result


def test_bad_arguments_are_refused_with_exact_messages() -> None:
    s = session()
    s.run_until(time_ns=10 * MS)
    cases = [
        (
            lambda: s.run_until(5 * MS),
            "cannot run back in time: 5000000 ns is before now (10000000 ns)",
        ),
        (lambda: s.run_until_request("Z"), "no request 'Z' in the workload"),
        (lambda: s.request("Z"), "no request 'Z' in the workload"),
        (
            lambda: s.break_at(time_ns=1),
            "cannot break in the past: 1 ns is before now (10000000 ns)",
        ),
        (lambda: s.break_at(), "give break_at exactly one of time_ns and time_s"),
        (lambda: s.run_until(), "run_until needs an instant (ns or time_s=) or a predicate"),
        (lambda: s.delete(7), "no breakpoint 7"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        s.break_on("explosion")
    assert str(info.value).startswith("unknown event kind 'explosion'; expected one of: abort, ")
    with pytest.raises(RuntimeError) as error:
        _ = s.result
    assert str(error.value) == "the replay is not finished; call run() or resume() first"


def test_describe_lists_engines_policy_and_requests_in_flight() -> None:
    s = session()
    s.break_on("preemption")
    s.resume()
    assert s.describe() == (
        "virtual time 0.500000000 s\n"
        "engine 0 (aggregated): 42 passes, pass in flight until 0.510000000 s\n"
        "  waiting (1): B\n"
        "  running (1): A\n"
        "  KV blocks: 11 used, 9 free of 20; 19 hold cached prefixes\n"
        "  outstanding: 640 prefill, 319 decode tokens\n"
        "  pass 0.500000000 s -> 0.510000000 s: 1 request, 0 prefill + 1 decode tokens\n"
        "policy 'round_robin': holds 0 (-), 0 not yet taken, 0 unsettled; next wakeup: none\n"
        "in flight: 2 (1 running, 1 waiting)"
    )
    assert s.prefix_hits("B") == (576,)
    assert describe_event(s.request("A").history[0]) == (
        "0.000000000 s  request 'A'  arrived (input_length=600, output_length=200)"
    )


def test_a_prefill_decode_session_steps_through_the_handoff(tmp_path: Path) -> None:
    topology = Disaggregated(
        prefill_engine=EngineConfig(num_blocks=10_000),
        decode_engine=EngineConfig(num_blocks=10_000),
        link=KVLink(kv_bytes_per_token=262_144, bandwidth_gbps=50.0),
    )
    requests = (Request("a", 1000, 10, 512, [1, 2], ArrivalRule(not_before_ms=0)),)
    workload = Workload(requests=requests, source="ex", format="python")
    s = ReplaySession.build(workload, topology=topology, policy=PDPolicy())
    _OPEN.append(s)
    stop = s.run_until_request("a", "transfer_done")
    assert stop.now_ns == 55_368_709
    assert (s.engine(0).role, s.engine(1).role) == ("prefill", "decode")
    assert s.engine(1).waiting == ("a",) and s.request("a").state == "waiting"
    assert s.run_until_request("a", "first_token").now_ns == 65_368_709
    expected = run(workload, topology=topology, policy=PDPolicy())
    assert output_bytes(s.run(), tmp_path / "session") == output_bytes(expected, tmp_path / "run")


class LoggingPolicy:
    """Round robin that logs each placement (library code logs like this)."""

    name = "logging"

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        log = get_logger("policies.example")
        async for request in requests:
            with log_context(request_id=request.id):
                await ctx.dispatch(request, 0)
                log.info("placed", engine=0)


def test_log_events_carry_the_run_id_the_request_and_the_virtual_time() -> None:
    s = ReplaySession.build(
        preemption_workload(), topology=ONE_ENGINE, policy=LoggingPolicy(), seed=4
    )
    with capture_logs(level="info") as events:
        s.run()
    placed = [
        (e["run_id"], e["request_id"], e["virtual_time_ns"])
        for e in events
        if e["event"] == "placed"
    ]
    assert placed == [("ex#4", "A", 0), ("ex#4", "B", 1 * MS)]


def test_awaitable_variants_work_inside_a_virtual_loop_too() -> None:
    s = session()

    async def main() -> int:
        await asyncio.sleep(5.0)  # the outer virtual clock moves; the session's does not
        stop = await s.arun_until(time_s=0.25)
        return stop.now_ns

    assert simclock.run(main()) == 250 * MS
    assert s.now_ns == 250 * MS


def test_every_run_option_reaches_the_report_as_run_gives_it(tmp_path: Path) -> None:
    options: dict[str, object] = {
        "topology": ONE_ENGINE,
        "seed": 9,
        "tokenizer": TokenizerStage(workers=1, base_ms=5.0, per_input_token_us=10.0),
        "max_virtual_time_s": 1.0,
        "config": {"note": "echoed"},
        "slo": SLO(ttft_ms=100.0),
    }
    expected = run(preemption_workload(), policy=RoundRobin(), **options)
    s = ReplaySession.build(preemption_workload(), policy=RoundRobin(), **options)
    _OPEN.append(s)
    s.run_until(time_s=0.5)
    assert output_bytes(s.run(), tmp_path / "session") == output_bytes(expected, tmp_path / "run")


class FailingPolicy:
    """Places the first request, then fails."""

    name = "failing"

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async for request in requests:
            await ctx.dispatch(request, 0)
            raise RuntimeError("policy broke")


def test_a_failed_run_says_so_when_it_stops_and_run_raises_like_replay_run() -> None:
    s = session_with(FailingPolicy())
    stop = s.resume()
    assert stop.reason == "finished"
    assert str(stop) == "finished at 2.040000000 s: the run failed: RuntimeError: policy broke"
    with pytest.raises(ReplayFailedError) as info:
        s.run()
    assert str(info.value).startswith("replay failed: ")
    assert info.value.result is s.result
