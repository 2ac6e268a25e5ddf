"""Timing-aware views and informed offers, on REFERENCE-engine §9's numbers (fixed 50/10 ms,
E = 64, T = 512)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import simclock
from engines import (
    BlockKeyer,
    Engine,
    EngineConfig,
    EventKind,
    FixedTiming,
    Journal,
    PassInFlight,
    Tentative,
)

from .sim import MS, req


def make_engine(*, num_blocks: int = 400, budget: int = 8192, macro: bool = True) -> Engine:
    engine = Engine(
        0,
        EngineConfig(num_blocks=num_blocks, max_num_batched_tokens=budget),
        FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        keyer=BlockKeyer(),
        journal=Journal(),
    )
    engine.macro_stepping = macro
    return engine


def run_with(engine: Engine, body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        task = asyncio.get_running_loop().create_task(engine.run())
        await body()
        engine.close()
        await task

    simclock.run(main())


def commit(engine: Engine, request: object) -> Tentative:
    answer = engine.offer(request)  # type: ignore[arg-type]
    assert isinstance(answer, Tentative)
    engine.commit(answer)
    return answer


def test_an_idle_engine_estimates_the_isolated_request_of_9a() -> None:
    engine = make_engine()
    seen: list[object] = []

    async def body() -> None:
        view = engine.view
        seen.append(view.pass_in_flight)
        guess = view.estimate(1000, output_length=10)
        assert guess is not None
        seen.append((guess.queue_position, guess.admission_ns, guess.first_token_ns))
        seen.append(view.prefill_time_ms(1000))
        seen.append(view.queueing_delay_ms(1000))

    run_with(engine, body)
    assert seen == [None, (0, 0, 50 * MS), 50.0, 0.0]


def test_chunked_prefill_of_9b_takes_two_passes() -> None:
    engine = make_engine(budget=512)
    seen: list[object] = []

    async def body() -> None:
        seen.append(engine.view.prefill_time_ms(1000))

    run_with(engine, body)
    assert seen == [100.0]


def test_the_second_request_of_9c_is_told_its_hit_and_its_first_token() -> None:
    for macro in (True, False):
        engine = make_engine(macro=macro)
        seen: list[object] = []

        async def body(engine: Engine = engine, seen: list[object] = seen) -> None:
            commit(engine, req("A", 1000, 10, hash_ids=[1, 2]))
            await simclock.sleep_until_ns(1 * MS, waiter="test")
            seen.append(engine.view.pass_in_flight)
            answer = engine.offer(req("B", 1000, 10, hash_ids=[1, 2]), estimate=True)
            assert isinstance(answer, Tentative)
            seen.append((answer.hit_tokens, answer.queue_position))
            seen.append((answer.admission_ns, answer.first_token_ns))
            engine.commit(answer)

        run_with(engine, body)
        assert seen == [
            PassInFlight(0, 50 * MS, ("A",), 1000, 0),
            (960, 0),
            (50 * MS, 110 * MS),
        ]
        b = engine.journal.trace("B")
        assert b.first_token_ns == 110 * MS  # the estimate held: §9c, TTFT 109


def test_a_decode_pass_in_flight_is_described_in_a_macro_run() -> None:
    for macro in (True, False):
        engine = make_engine(macro=macro)
        seen: list[object] = []

        async def body(engine: Engine = engine, seen: list[object] = seen) -> None:
            commit(engine, req("A", 1000, 40, hash_ids=[1, 2]))
            await simclock.sleep_until_ns(125 * MS, waiter="test")
            seen.append(engine.view.pass_in_flight)
            # behind A's decodes: admitted at the next pass start, a mixed pass of 60 ms
            seen.append(engine.view.queueing_delay_ms(100))
            seen.append(engine.view.prefill_time_ms(100))

        run_with(engine, body)
        assert seen == [PassInFlight(120 * MS, 130 * MS, ("A",), 0, 1), 5.0, 60.0], macro


def test_views_see_placements_made_earlier_in_the_same_instant() -> None:
    engine = make_engine()
    seen: list[int] = []

    async def body() -> None:
        a = req("A", 1000, 4, hash_ids=[1, 2])
        b = req("B", 1000, 4, hash_ids=[1, 2])
        keys = engine.keyer.block_keys(b, 64)
        commit(engine, a)
        # A is queued, not computed: nothing published, but its prompt will be cached
        seen.extend([engine.view.prefix_overlap(keys), engine.view.expected_prefix_overlap(keys)])
        offered = engine.offer(req("C", 1000, 4, hash_ids=[7, 8]))
        assert isinstance(offered, Tentative)
        other = engine.keyer.block_keys(req("D", 1000, 4, hash_ids=[7, 9]), 64)
        seen.append(engine.view.expected_prefix_overlap(other))  # C's open offer: block 0..7
        engine.abort(offered, "test")
        seen.append(engine.view.expected_prefix_overlap(other))

    run_with(engine, body)
    assert seen == [0, 15, 8, 0]


def test_an_open_offer_pins_its_hits_so_eviction_cannot_break_the_promise() -> None:
    # 20 blocks: A's 16 blocks are cached and free once it finishes; C (19 blocks) would
    # evict 15 of them. While B's offer (hit 960 tokens) is open, they are pinned.
    for macro in (True, False):
        engine = make_engine(num_blocks=20, macro=macro)
        seen: list[object] = []

        async def body(engine: Engine = engine, seen: list[object] = seen) -> None:
            commit(engine, req("A", 1000, 1, hash_ids=[1, 2]))
            await simclock.sleep_until_ns(60 * MS, waiter="test")
            b = engine.offer(req("B", 1000, 2, hash_ids=[1, 2]))
            assert isinstance(b, Tentative)
            seen.append(b.hit_tokens)
            commit(engine, req("C", 1200, 2, hash_ids=[5, 6, 7]))
            await simclock.sleep_until_ns(200 * MS, waiter="test")
            seen.append((engine.view.waiting_count, len(engine.snapshot().pinned[0][1])))
            engine.commit(b)

        run_with(engine, body)
        admitted = [
            (e.request_id, dict(e.detail)["reused_tokens"])
            for e in engine.journal.events
            if e.kind == EventKind.ADMITTED
        ]
        assert seen == [960, (1, 15)], macro
        # the promise ends at commit: C, queued ahead, is admitted first and evicts all but
        # the root block (B then hits 64 tokens)
        assert admitted == [("A", 0), ("C", 0), ("B", 64)], macro


def test_an_aborted_offer_releases_its_pins_and_the_engine_moves_on() -> None:
    engine = make_engine(num_blocks=20)
    seen: list[object] = []

    async def body() -> None:
        commit(engine, req("A", 1000, 1, hash_ids=[1, 2]))
        await simclock.sleep_until_ns(60 * MS, waiter="test")
        b = engine.offer(req("B", 1000, 2, hash_ids=[1, 2]))
        assert isinstance(b, Tentative)
        commit(engine, req("C", 1200, 2, hash_ids=[5, 6, 7]))
        await simclock.sleep_until_ns(200 * MS, waiter="test")
        engine.abort(b, "changed my mind")
        seen.append(engine.snapshot().pinned)
        await simclock.sleep_until_ns(201 * MS, waiter="test")
        seen.append(engine.view.running_count)

    run_with(engine, body)
    assert seen == [(), 1]
    c = engine.journal.trace("C")
    assert c.first_admit_ns == 200 * MS
