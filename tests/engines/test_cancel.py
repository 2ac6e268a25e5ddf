"""Engine.cancel: a client cancellation drops a request at once and frees its blocks."""

from __future__ import annotations

import asyncio

import simclock
from engines import BlockKeyer, Engine, EngineConfig, EventKind, FixedTiming, Journal, Tentative

from .sim import MS, req

FIXED = FixedTiming(prefill_ms=50, decode_ms=10)


def _engine() -> Engine:
    config = EngineConfig(num_blocks=100, enable_prefix_caching=False)
    return Engine(0, config, FIXED, keyer=BlockKeyer(), journal=Journal(keep_events=True))


def test_cancel_mid_pass_frees_blocks_records_cancelled_and_the_pass_commits_without_it() -> None:
    e = _engine()

    async def main() -> tuple[int, int, int, int]:
        task = asyncio.get_running_loop().create_task(e.run())
        for request in (req("a", 200, 100), req("b", 200, 100)):
            offer = e.offer(request)
            assert isinstance(offer, Tentative)
            e.commit(offer)
        # passes: prefill [0, 50), then decode steps of 10 ms; 105 ms is inside a pass
        await simclock.sleep_until_ns(105 * MS, waiter="test")
        used_before = e.view.kv_blocks_used
        assert e.cancel("a") is True
        assert e.cancel("a") is False  # no longer on the engine
        used_after = e.view.kv_blocks_used
        running = e.view.running_count
        e.close()
        await task
        return used_before, used_after, running, simclock.now_ns()

    used_before, used_after, running, end_ns = simclock.run(main())
    assert (used_before, used_after, running) == (8, 4, 1)  # 4 blocks of 64 per request
    trace = e.journal.traces["a"]
    assert trace.terminal_status == "cancelled"
    assert trace.terminal_ns == 105 * MS
    assert trace.token_times_ns == [50 * MS, 60 * MS, 70 * MS, 80 * MS, 90 * MS, 100 * MS]
    kinds = [ev.kind for ev in e.journal.events if ev.request_id == "a"]
    assert kinds[-1] is EventKind.CANCELLED
    assert EventKind.FINISHED not in kinds
    other = e.journal.traces["b"]
    assert other.terminal_status == "completed"
    assert len(other.token_times_ns) == 100
    assert e.view.kv_blocks_used == 0
    assert end_ns == other.terminal_ns


def test_cancel_of_a_waiting_request_removes_it_from_the_queue() -> None:
    e = Engine(
        0,
        EngineConfig(num_blocks=100, max_num_seqs=1),
        FIXED,
        keyer=BlockKeyer(),
        journal=Journal(),
    )

    async def main() -> int:
        task = asyncio.get_running_loop().create_task(e.run())
        e.submit(req("a", 64, 3))
        e.submit(req("b", 64, 3))
        await simclock.sleep_until_ns(1 * MS, waiter="test")
        waiting = e.view.waiting_count
        assert e.cancel("b") is True
        assert e.view.waiting_count == 0
        e.close()
        await task
        return waiting

    assert simclock.run(main()) == 1
    assert e.journal.traces["b"].terminal_status == "cancelled"
    assert e.journal.traces["b"].first_admit_ns is None
    assert e.journal.traces["a"].terminal_status == "completed"
