"""The engine coroutine on the virtual clock: handshake, rollback, view, KV events."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import simclock
from engines import (
    BlockKeyer,
    Engine,
    EngineClosedError,
    EngineConfig,
    EngineError,
    EventKind,
    FixedTiming,
    HandshakeError,
    InvalidRequestError,
    Journal,
    KVEvent,
    LifecycleEvent,
    PassShape,
    PassTimingError,
    Rejection,
    Tentative,
)

from .asim import drive, run_engines
from .sim import MS, core, req, simulate

FIXED = FixedTiming(prefill_ms=50, decode_ms=10)
T = TypeVar("T")


def engine(index: int = 0, **options: object) -> Engine:
    config = EngineConfig(**{"num_blocks": 1000, **options})  # type: ignore[arg-type]
    return Engine(index, config, FIXED, keyer=BlockKeyer(), journal=Journal())


def at_time_zero(fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await fn()

    return simclock.run(main())


def kinds(journal: Journal, rid: str) -> list[str]:
    return [e.kind.value for e in journal.events if e.request_id == rid]


# -- the coroutine ----------------------------------------------------------------------------


def test_engine_on_the_loop_matches_the_synchronous_reference() -> None:
    requests = [
        req("a", 600, 200),
        req("b", 600, 200, arrival_ms=1),
        req("c", 100, 5, arrival_ms=1995),
        req("d", 3000, 3, arrival_ms=2000.5),
    ]
    e = engine(num_blocks=20, max_num_batched_tokens=512)
    run_engines([e], requests)
    c = core(EngineConfig(num_blocks=20, max_num_batched_tokens=512), FIXED)
    simulate(c, requests)
    for rid in "abcd":
        got, want = e.journal.traces[rid], c.journal.traces[rid]
        assert got.token_times_ns == want.token_times_ns
        assert got.admissions == want.admissions
        assert got.terminal_ns == want.terminal_ns
    assert e.journal.traces["d"].terminal_status == "rejected"


def test_arrival_mid_pass_joins_at_the_next_boundary() -> None:
    e = engine()
    run_engines([e], [req("a", 100, 3), req("b", 100, 1, arrival_ms=20)])
    tb = e.journal.traces["b"]
    assert tb.engine_arrival_ns == 20 * MS
    assert tb.first_admit_ns == 50 * MS
    assert tb.token_times_ns == [110 * MS]  # mixed pass [50, 110)


def test_a_lone_engine_starts_its_next_pass_without_waiting_for_the_instant_end() -> None:
    e = engine()
    loop = simclock.new_event_loop()
    try:
        loop.run_until_complete(drive([e], [req("a", 100, 5)]))
        stats = loop.stats()
    finally:
        loop.close()
    assert e.passes == 5
    assert e.journal.traces["a"].token_times_ns == [50 * MS, 60 * MS, 70 * MS, 80 * MS, 90 * MS]
    # only the first pass (after idling on the inbox) waited for an instant's end
    assert stats.instant_end_wakeups == 1


def test_an_arrival_due_with_a_pass_end_joins_the_next_pass_whatever_runs_first() -> None:
    # the driver wakes at 55 ms, so its 60 ms wakeup is queued after engine 0's deadline
    e0, e1 = engine(0), engine(1)
    run_engines(
        [e0, e1],
        [req("a", 100, 3), req("c", 100, 1, arrival_ms=55), req("b", 100, 1, arrival_ms=60)],
        route=lambda r: 1 if r.id == "c" else 0,
    )
    assert e0.journal.traces["a"].token_times_ns == [50 * MS, 60 * MS, 120 * MS]
    assert e0.journal.traces["b"].first_admit_ns == 60 * MS  # the mixed pass [60, 120)


def test_same_instant_arrivals_all_land_before_the_pass_starts() -> None:
    e = engine()
    run_engines([e], [req(f"r{i}", 64, 1, arrival_ms=5) for i in range(4)])
    assert {t.first_admit_ns for t in e.journal.traces.values()} == {5 * MS}
    assert e.passes == 1


def test_engine_stays_idle_without_work_and_run_returns_after_close() -> None:
    e = engine()

    async def main() -> int:
        task = asyncio.get_running_loop().create_task(e.run())
        await simclock.sleep_until_ns(10 * MS, waiter="test")
        e.close()
        await task
        return simclock.now_ns()

    assert simclock.run(main()) == 10 * MS
    assert e.passes == 0


def test_engine_run_twice_raises() -> None:
    e = engine()

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(e.run())
        await asyncio.sleep(0)
        with pytest.raises(EngineError, match=r"^engine 0 is already running$"):
            await e.run()
        e.close()
        await task

    simclock.run(main())


def test_bad_pass_duration_raises_pass_timing_error() -> None:
    class Broken:
        def pass_time_ms(self, shape: PassShape) -> float:
            return float("nan")

    e = Engine(0, EngineConfig(num_blocks=10), Broken(), keyer=BlockKeyer(), journal=Journal())
    with pytest.raises(
        PassTimingError,
        match=r"^Broken\.pass_time_ms returned nan; a pass duration must be a finite number "
        r"of ms >= 0$",
    ):
        run_engines([e], [req("a", 10, 1)])


def test_passes_see_numpy_pass_shapes_in_scheduling_order() -> None:
    seen: list[PassShape] = []

    class Recording:
        def pass_time_ms(self, shape: PassShape) -> float:
            seen.append(shape)
            return FIXED.pass_time_ms(shape)

    e = Engine(0, EngineConfig(num_blocks=100), Recording(), keyer=BlockKeyer(), journal=Journal())
    run_engines([e], [req("a", 100, 2), req("b", 70, 1, arrival_ms=1)])
    second = seen[1]
    assert second.scheduled.tolist() == [1, 70]
    assert second.computed.tolist() == [100, 0]
    assert second.prompt_length.tolist() == [100, 70]
    assert second.output_before.tolist() == [1, 0]
    assert second.samples.tolist() == [True, True]
    assert second.kv_capacity_tokens == 6400


# -- handshake --------------------------------------------------------------------------------


def test_offer_then_commit_queues_the_request_and_records_the_handshake() -> None:
    e = engine()

    async def main() -> None:
        t = e.offer(req("a", 100, 1))
        assert isinstance(t, Tentative) and e.view.pending_offers == 1
        assert e.view.waiting_count == 0
        e.commit(t)
        assert e.view.pending_offers == 0 and e.view.waiting_count == 1

    at_time_zero(main)
    assert kinds(e.journal, "a") == ["offered", "committed", "queued"]
    assert e.journal.traces["a"].engine == 0


def test_abort_leaves_the_engine_exactly_as_before_the_offer() -> None:
    e = engine(num_blocks=20)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(e.run())
        e.submit(req("a", 600, 5))
        await simclock.sleep_until_ns(20 * MS, waiter="test")  # mid-pass
        before = e.snapshot()
        t = e.offer(req("b", 600, 5))
        assert isinstance(t, Tentative)
        e.abort(t, "policy changed its mind")
        assert e.snapshot() == before
        e.close()
        await task

    at_time_zero(main)
    aborted = [ev for ev in e.journal.events if ev.kind is EventKind.ABORTED]
    assert [(ev.request_id, ev.get("reason")) for ev in aborted] == [
        ("b", "policy changed its mind")
    ]
    assert "b" not in [s for s in e.journal.traces if e.journal.traces[s].engine is not None]


def test_failed_commit_rolls_back_and_raises() -> None:
    e = engine()

    def explode(event: LifecycleEvent) -> None:
        if event.kind is EventKind.QUEUED and event.request_id == "b":
            raise RuntimeError("subscriber failed")

    e.journal.subscribe(explode)

    async def main() -> None:
        e.submit(req("a", 100, 1))
        before = e.snapshot()
        t = e.offer(req("b", 100, 1))
        assert isinstance(t, Tentative)
        with pytest.raises(RuntimeError, match=r"^subscriber failed$"):
            e.commit(t)
        assert e.snapshot() == before
        with pytest.raises(HandshakeError):
            e.commit(t)

    at_time_zero(main)


def test_commit_after_close_rolls_back_the_offer() -> None:
    e = engine()

    async def main() -> None:
        before = e.snapshot()
        t = e.offer(req("a", 100, 1))
        assert isinstance(t, Tentative)
        e.close()
        with pytest.raises(EngineClosedError, match=r"^engine 0 is closed$"):
            e.commit(t)
        assert e.snapshot() == before
        with pytest.raises(EngineClosedError, match=r"^engine 0 is closed$"):
            e.offer(req("b", 100, 1))

    at_time_zero(main)


def test_commit_twice_or_on_another_engine_raises_handshake_error() -> None:
    e0, e1 = engine(0), engine(1)

    async def main() -> None:
        t = e0.offer(req("a", 100, 1))
        assert isinstance(t, Tentative)
        with pytest.raises(HandshakeError, match=r"^no open offer #1 of request 'a' on engine 1$"):
            e1.commit(t)
        e0.commit(t)
        with pytest.raises(HandshakeError, match=r"^no open offer #1 of request 'a' on engine 0$"):
            e0.commit(t)
        with pytest.raises(HandshakeError):
            e0.abort(t, "late")

    at_time_zero(main)


def test_offering_a_request_already_on_the_engine_raises() -> None:
    e = engine()

    async def main() -> None:
        e.submit(req("a", 100, 1))
        with pytest.raises(
            InvalidRequestError, match=r"^request 'a' is already placed on engine 0$"
        ):
            e.offer(req("a", 100, 1))

    at_time_zero(main)


def test_offer_rejects_hash_ids_that_do_not_cover_the_prompt() -> None:
    e = engine()

    async def main() -> None:
        with pytest.raises(
            InvalidRequestError,
            match=r"^request 'a': 1 hash_ids of 512 tokens do not cover a prompt of 600 "
            r"tokens$",
        ):
            e.offer(req("a", 600, 1, hash_ids=[1]))

    at_time_zero(main)


@pytest.mark.parametrize(
    ("options", "prompt", "output", "reason", "message"),
    [
        (
            {"context_length": 1000},
            1000,
            1,
            "prompt_too_long",
            "prompt of 1000 tokens does not fit context_length 1000",
        ),
        ({"num_blocks": 10}, 640, 2, "exceeds_kv_capacity", "needs 11 KV blocks, engine has 10"),
        (
            {"enable_chunked_prefill": False, "max_num_batched_tokens": 512},
            513,
            1,
            "exceeds_batch_budget",
            "prompt of 513 tokens exceeds max_num_batched_tokens 512 with chunked prefill disabled",
        ),
    ],
)
def test_rejection_rules_at_engine_arrival(
    options: dict[str, Any], prompt: int, output: int, reason: str, message: str
) -> None:
    e = engine(**options)
    run_engines([e], [req("a", prompt, output, arrival_ms=3)])
    trace = e.journal.traces["a"]
    assert trace.terminal_status == "rejected"
    assert trace.rejection_reason == reason
    assert trace.terminal_ns == trace.engine_arrival_ns == 3 * MS
    rejected = [ev for ev in e.journal.events if ev.kind is EventKind.REJECTED]
    assert [ev.get("message") for ev in rejected] == [message]


def test_capacity_rule_counts_the_last_token_without_a_kv_slot() -> None:
    e = engine(num_blocks=10)

    async def main() -> None:
        assert isinstance(e.offer(req("a", 640, 1)), Tentative)  # 640 positions: 10 blocks
        assert isinstance(e.offer(req("b", 600, 41)), Tentative)  # 640 positions
        assert isinstance(e.offer(req("c", 600, 42)), Rejection)
        # truncated by the context: 600 + min(100, 1000 - 600) - 1 = 999 positions
        big = engine(num_blocks=16, context_length=1000)
        assert isinstance(big.offer(req("d", 600, 5000)), Tentative)

    at_time_zero(main)


def test_context_length_truncates_the_output_and_still_completes() -> None:
    e = engine(context_length=105)
    run_engines([e], [req("a", 100, 50)])
    trace = e.journal.traces["a"]
    assert len(trace.token_times_ns) == 5
    assert trace.terminal_status == "completed" and trace.truncated


# -- view and KV events -----------------------------------------------------------------------


def test_view_counts_and_outstanding_tokens() -> None:
    e = engine(num_blocks=100, max_num_batched_tokens=256)
    seen: dict[str, object] = {}

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(e.run())
        e.submit(req("a", 300, 4))
        e.submit(req("b", 100, 2))
        v = e.view
        assert (v.waiting_count, v.running_count) == (2, 0)
        assert v.outstanding_prefill_tokens == 400 and v.outstanding_decode_tokens == 6
        await simclock.sleep_until_ns(1, waiter="test")  # inside pass 1: a's first 256
        seen["p1"] = (v.waiting_count, v.running_count, v.outstanding_prefill_tokens)
        seen["kv1"] = (v.kv_blocks_used, v.kv_blocks_free)
        await simclock.sleep_until_ns(51 * MS, waiter="test")  # pass 2: a's 44 + b's 100
        seen["p2"] = (v.waiting_count, v.running_count, v.outstanding_prefill_tokens)
        e.close()
        await task
        seen["end"] = (v.kv_blocks_used, v.outstanding_prefill_tokens, v.outstanding_decode_tokens)

    at_time_zero(main)
    assert seen["p1"] == (1, 1, 144)
    assert seen["kv1"] == (4, 96)
    assert seen["p2"] == (0, 2, 0)
    assert seen["end"] == (0, 0, 0)


def test_kv_events_and_prefix_overlap_are_published_at_commit_time() -> None:
    e = engine(num_blocks=4, block_size=64)
    events: list[KVEvent] = []
    e.subscribe_kv(events.append)
    keys = e.keyer.block_keys(req("a", 200, 1, hash_ids=[1]), 64)
    overlap: dict[str, int] = {}

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(e.run())
        e.submit(req("a", 200, 1, hash_ids=[1]))
        await simclock.sleep_until_ns(1, waiter="test")  # schedule phase cached 3 blocks
        overlap["mid"] = e.view.prefix_overlap(keys)
        await simclock.sleep_until_ns(50 * MS, waiter="test")
        await asyncio.sleep(0)
        overlap["end"] = e.view.prefix_overlap(keys)
        e.submit(req("b", 256, 1, hash_ids=[2]))  # 4 fresh blocks evict all of a's
        e.close()
        await task
        overlap["evicted"] = e.view.prefix_overlap(keys)

    at_time_zero(main)
    assert overlap == {"mid": 0, "end": 3, "evicted": 0}
    assert events[0] == KVEvent(50 * MS, 0, "stored", keys)
    removed = [ev for ev in events if ev.kind == "removed"]
    assert removed[0].time_ns == 100 * MS and set(removed[0].block_keys) == set(keys)


def test_zero_duration_passes_commit_at_the_same_instant() -> None:
    class Free:
        def pass_time_ms(self, shape: PassShape) -> float:
            return 0.0

    e = Engine(0, EngineConfig(num_blocks=100), Free(), keyer=BlockKeyer(), journal=Journal())
    assert run_engines([e], [req("a", 100, 1500)]) == 0
    assert e.journal.traces["a"].token_times_ns == [0] * 1500


def test_engines_start_same_instant_passes_in_index_order() -> None:
    journal = Journal()
    keyer = BlockKeyer()
    engines = [
        Engine(i, EngineConfig(num_blocks=100), FIXED, keyer=keyer, journal=journal)
        for i in range(3)
    ]
    # requests land on engines 2, 1, 0 in that order at the same instant
    run_engines(
        engines,
        [req("x2", 10, 1), req("x1", 10, 1), req("x0", 10, 1)],
        route=lambda r: int(r.id[1]),
    )
    admitted = [e.engine for e in journal.events if e.kind is EventKind.ADMITTED]
    queued = [e.engine for e in journal.events if e.kind is EventKind.QUEUED]
    assert queued == [2, 1, 0]
    assert admitted == [0, 1, 2]


DETERMINISM_SCRIPT = """
import json
from tests.engines.asim import run_engines
from tests.engines.sim import req
from engines import BlockKeyer, Engine, EngineConfig, FixedTiming, Journal
journal = Journal()
keyer = BlockKeyer()
engines = [Engine(i, EngineConfig(num_blocks=40, block_size=16), FixedTiming(prefill_ms=7,
           decode_ms=3), keyer=keyer, journal=journal) for i in range(2)]
requests = [req(f"r{i}", 50 + 37 * i % 200, 5 + i % 17, hash_ids=[i % 3, i % 5],
                arrival_ms=i * 3.5, trace_block=128) for i in range(60)]
run_engines(engines, requests, route=lambda r: int(r.id[1:]) % 2)
print(json.dumps([[t.request_id, list(t.token_times_ns), t.reused_input_tokens, t.num_preemptions]
                  for t in journal.traces.values()]))
print(json.dumps([[e.time_ns, e.kind.value, e.request_id, e.engine] for e in journal.events]))
"""


def test_results_do_not_depend_on_the_hash_seed() -> None:
    root = Path(__file__).resolve().parents[2]
    outputs = []
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", DETERMINISM_SCRIPT],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    assert '"first_token"' in outputs[0]
