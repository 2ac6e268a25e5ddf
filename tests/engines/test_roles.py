"""Prefill and decode roles (REFERENCE-engine §5.2 role overrides, §6), and example (d)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simclock
from engines import (
    BlockKeyer,
    Engine,
    EngineConfig,
    EngineError,
    EventKind,
    FixedTiming,
    InvalidRequestError,
    Journal,
    LifecycleEvent,
    Reservation,
    Tentative,
)
from loadgen import Request

from .sim import MS, req

KV_BYTES_PER_TOKEN = 2 * 64 * 8 * 128 * 2  # §9d: 64 layers, 8 KV heads, head dim 128, bf16


def transfer_ns(tokens: int, bandwidth_gbps: float = 50.0) -> int:
    return round(tokens * KV_BYTES_PER_TOKEN / (bandwidth_gbps * 1e9) * 1000 * MS)


def pair(
    decode_ms: float = 10, num_blocks: int = 1000, keyer: BlockKeyer | None = None
) -> tuple[Engine, Engine]:
    keyer = keyer or BlockKeyer()
    journal = Journal()
    prefill = Engine(
        0,
        EngineConfig(num_blocks=num_blocks, role="prefill"),
        FixedTiming(prefill_ms=50, decode_ms=10),
        keyer=keyer,
        journal=journal,
    )
    decode = Engine(
        1,
        EngineConfig(num_blocks=num_blocks, role="decode"),
        FixedTiming(prefill_ms=50, decode_ms=decode_ms),
        keyer=keyer,
        journal=journal,
    )
    return prefill, decode


def test_prefill_role_finishes_at_prompt_end_hides_the_token_and_holds_blocks() -> None:
    prefill, _ = pair()
    state: dict[str, object] = {}

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(prefill.run())
        prefill.submit(req("a", 1000, 10))
        await simclock.sleep_until_ns(50 * MS, waiter="test")
        await asyncio.sleep(0)
        v = prefill.view
        state["at50"] = (v.running_count, v.kv_blocks_used, prefill.held())
        prefill.release_held("a")
        state["released"] = (v.kv_blocks_used, v.kv_blocks_free)
        prefill.close()
        await task

    simclock.run(main())
    trace = prefill.journal.traces["a"]
    assert trace.prefill_done_ns == 50 * MS
    assert trace.token_times_ns == [] and trace.terminal_status is None
    assert trace.prefill_worker == 0 and trace.prefill_admit_ns == 0
    assert state["at50"] == (0, 16, ("a",))
    assert state["released"] == (0, 1000)


def test_prefill_role_never_charges_decode_ms() -> None:
    prefill, _ = pair()
    done: list[int] = []
    prefill.journal.subscribe(
        lambda e: done.append(e.time_ns) if e.kind is EventKind.PREFILL_DONE else None
    )

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(prefill.run())
        prefill.submit(req("a", 100, 10))
        await simclock.sleep_until_ns(10 * MS, waiter="test")
        prefill.submit(req("b", 100, 10))
        prefill.close()
        await task

    simclock.run(main())
    assert done == [50 * MS, 100 * MS]


def test_release_held_of_an_unknown_request_raises() -> None:
    prefill, _ = pair()
    with pytest.raises(InvalidRequestError, match=r"^engine 0 holds no blocks for request 'x'$"):
        prefill.release_held("x")


async def decode_request(
    decode: Engine, request: Request, *, transfer: bool = True
) -> tuple[Reservation, int]:
    """Offer, commit, wait for the reservation, sleep the transfer, activate."""
    tentative = decode.offer(request)
    assert isinstance(tentative, Tentative)
    decode.commit(tentative)
    reservation = await decode.reserved(request.id)
    tokens = reservation.missing_blocks * reservation.block_size
    wait = transfer_ns(tokens) if transfer else 0
    await simclock.sleep_until_ns(reservation.at_ns + wait, waiter="transfer")
    decode.activate(request.id, transfer_tokens=tokens, transfer_ms=wait / MS)
    return reservation, tokens


@pytest.mark.parametrize(
    ("decode_ms", "ttft_ns", "e2e_ns"),
    [(10, 65_368_709, 155_368_709), (20, 75_368_709, 255_368_709)],
)
def test_d_decode_activation_and_token_times(decode_ms: float, ttft_ns: int, e2e_ns: int) -> None:
    _, decode = pair(decode_ms=decode_ms)
    got: dict[str, tuple[Reservation, int]] = {}

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(decode.run())
        await simclock.sleep_until_ns(50 * MS, waiter="test")  # prefill done at 50
        got["res"] = await decode_request(decode, req("a", 1000, 10))
        decode.close()
        await task

    simclock.run(main())
    reservation, tokens = got["res"]
    assert reservation.at_ns == 50 * MS and reservation.hit_blocks == 0
    assert tokens == 1024
    assert transfer_ns(1024) == 5_368_709  # 5.3687 ms
    trace = decode.journal.traces["a"]
    assert trace.destination_reserved_ns == 50 * MS
    assert trace.transfer_done_ns == 55_368_709
    assert trace.decode_admit_ns == 55_368_709
    assert trace.decode_worker == 1 and trace.decode_reused_tokens == 0
    assert trace.transfer_tokens == 1024
    assert trace.token_times_ns[0] == ttft_ns
    assert trace.token_times_ns[-1] == e2e_ns and len(trace.token_times_ns) == 10
    assert trace.terminal_status == "completed"


def test_d_full_prompt_and_tp2_transfer_sizes() -> None:
    assert transfer_ns(1000) / MS == pytest.approx(5.2429, abs=1e-4)
    tp2 = round(1024 * KV_BYTES_PER_TOKEN / 2 / 50e9 * 1000, 2)
    assert tp2 == 2.68


def test_d_later_identical_request_finds_15_blocks_resident() -> None:
    _, decode = pair()
    got: list[tuple[Reservation, int]] = []

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(decode.run())
        got.append(await decode_request(decode, req("a", 1000, 10, hash_ids=[1, 2])))
        await simclock.sleep_until_ns(500 * MS, waiter="test")
        got.append(await decode_request(decode, req("b", 1000, 10, hash_ids=[1, 2])))
        decode.close()
        await task

    simclock.run(main())
    reservation, tokens = got[1]
    assert (reservation.hit_blocks, reservation.missing_blocks, tokens) == (15, 1, 64)
    assert transfer_ns(64) == 335_544  # 0.3355 ms
    assert decode.journal.traces["b"].decode_reused_tokens == 960


def test_d_prefill_and_decode_engines_wired_by_the_journal() -> None:
    keyer = BlockKeyer()
    prefill, decode = pair(keyer=keyer)
    tasks: list[asyncio.Task[object]] = []

    async def hand_over(rid: str, request: Request) -> None:
        await decode_request(decode, request)
        prefill.release_held(rid)

    requests = {"a": req("a", 1000, 10)}

    def on_event(event: LifecycleEvent) -> None:
        if event.kind is EventKind.PREFILL_DONE:
            loop = asyncio.get_running_loop()
            tasks.append(loop.create_task(hand_over(event.request_id, requests[event.request_id])))

    prefill.journal.subscribe(on_event)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        runs = [loop.create_task(prefill.run()), loop.create_task(decode.run())]
        prefill.submit(requests["a"])
        await simclock.sleep_until_ns(60 * MS, waiter="test")
        await asyncio.gather(*tasks)
        prefill.close()
        decode.close()
        await asyncio.gather(*runs)

    simclock.run(main())
    trace = prefill.journal.traces["a"]
    assert (trace.prefill_done_ns, trace.token_times_ns[0]) == (50 * MS, 65_368_709)
    assert trace.token_times_ns[-1] == 155_368_709
    assert (trace.prefill_worker, trace.decode_worker) == (0, 1)
    assert prefill.view.kv_blocks_used == 0 and decode.view.kv_blocks_used == 0


def test_decode_reservation_waits_in_fifo_queue_until_blocks_free() -> None:
    _, decode = pair(num_blocks=20)
    order: list[tuple[str, int]] = []

    async def one(request: Request) -> None:
        reservation, _ = await decode_request(decode, request, transfer=False)
        order.append((request.id, reservation.at_ns))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(decode.run())
        jobs = [loop.create_task(one(req(r, 600, 3))) for r in ("a", "b", "c")]
        await asyncio.gather(*jobs)
        decode.close()
        await task

    simclock.run(main())
    # a takes 10 blocks; b 10 more (each holds ceil(602/64) = 10 at most); c waits until a ends
    assert order[:2] == [("a", 0), ("b", 0)]
    assert order[2] == ("c", decode.journal.traces["a"].terminal_ns)
    assert decode.view.kv_blocks_used == 0


def test_decode_role_charges_decode_ms_only() -> None:
    _, decode = pair(decode_ms=7)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(decode.run())
        await decode_request(decode, req("a", 100, 3), transfer=False)
        decode.close()
        await task

    simclock.run(main())
    assert decode.journal.traces["a"].token_times_ns == [7 * MS, 14 * MS, 21 * MS]


def test_cancel_reservation_frees_the_blocks() -> None:
    _, decode = pair(num_blocks=20)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(decode.run())
        t = decode.offer(req("a", 600, 3))
        assert isinstance(t, Tentative)
        decode.commit(t)
        await decode.reserved("a")
        assert decode.view.kv_blocks_used == 10
        decode.cancel_reservation("a")
        assert decode.view.kv_blocks_used == 0
        with pytest.raises(
            InvalidRequestError, match=r"^request 'a' has no reservation on engine 1$"
        ):
            decode.activate("a")
        decode.close()
        await task

    simclock.run(main())


def test_closed_decode_engine_waits_for_reserved_requests_to_arrive_and_finish() -> None:
    _, decode = pair()

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(decode.run())
        t = decode.offer(req("a", 100, 3))
        assert isinstance(t, Tentative)
        decode.commit(t)
        await decode.reserved("a")
        assert decode.view.outstanding_prefill_tokens == 0
        assert decode.view.outstanding_decode_tokens == 3
        decode.close()
        await simclock.sleep_until_ns(40 * MS, waiter="transfer")
        assert not task.done()
        decode.activate("a")
        await task

    simclock.run(main())
    assert decode.journal.traces["a"].token_times_ns == [50 * MS, 60 * MS, 70 * MS]


def test_cancelling_a_queued_reservation_fails_its_waiter() -> None:
    _, decode = pair(num_blocks=10)
    got: dict[str, str] = {}

    async def wait_for(rid: str) -> None:
        try:
            await decode.reserved(rid)
        except EngineError as error:
            got[rid] = str(error)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(decode.run())
        for rid in ("a", "b"):
            t = decode.offer(req(rid, 600, 3))
            assert isinstance(t, Tentative)
            decode.commit(t)
        waiter = loop.create_task(wait_for("b"))
        await decode.reserved("a")
        await asyncio.sleep(0)
        decode.cancel_reservation("b")  # still queued: a holds 10 of 10 blocks
        await waiter
        decode.cancel_reservation("a")
        decode.close()
        await task

    simclock.run(main())
    assert got == {"b": "the reservation of request 'b' on engine 1 was cancelled"}
    assert decode.view.kv_blocks_used == 0


@st.composite
def pd_workloads(draw: st.DrawFn) -> tuple[int, int, list[Request]]:
    # The decode engine can hold every request for its whole life: activated requests keep
    # their transferred blocks while they wait, so an overcommitted decode engine can stall
    # (see test_decode_engine_with_resident_waiters_can_stall_behind_a_preempted_request).
    prefill_blocks = draw(st.integers(8, 30))
    decode_blocks = draw(st.integers(8, 30))
    requests = []
    budget_positions = 4 * decode_blocks
    for i in range(draw(st.integers(1, 10))):
        if budget_positions < 8:
            break
        prompt = draw(st.integers(1, min(4 * prefill_blocks, budget_positions // 2)))
        output = draw(st.integers(1, budget_positions // 2))
        budget_positions -= 4 * -(-(prompt + output) // 4)
        ids = draw(st.lists(st.integers(0, 2), min_size=-(-prompt // 8), max_size=-(-prompt // 8)))
        requests.append(
            req(
                f"r{i}",
                prompt,
                output,
                hash_ids=ids,
                trace_block=8,
                arrival_ms=draw(st.integers(0, 50)),
            )
        )
    return prefill_blocks, decode_blocks, requests


def run_pd(
    workload: tuple[int, int, list[Request]],
) -> tuple[Journal, Engine, Engine]:
    """Run a prefill engine and a decode engine over ``workload``, handing every request
    over through a reservation and a 2 ms transfer; return the journal and both engines."""
    prefill_blocks, decode_blocks, requests = workload
    keyer, journal = BlockKeyer(), Journal()
    timing = FixedTiming(prefill_ms=5, decode_ms=1)
    prefill = Engine(
        0,
        EngineConfig(
            num_blocks=prefill_blocks, block_size=4, max_num_batched_tokens=32, role="prefill"
        ),
        timing,
        keyer=keyer,
        journal=journal,
    )
    decode = Engine(
        1,
        EngineConfig(num_blocks=decode_blocks, block_size=4, max_num_seqs=3, role="decode"),
        timing,
        keyer=keyer,
        journal=journal,
    )
    by_id = {r.id: r for r in requests}
    handoffs: list[asyncio.Task[None]] = []

    async def hand_over(rid: str) -> None:
        tentative = decode.offer(by_id[rid])
        assert isinstance(tentative, Tentative)
        decode.commit(tentative)
        reservation = await decode.reserved(rid)
        await simclock.sleep_until_ns(reservation.at_ns + 2 * MS, waiter="transfer")
        prefill.release_held(rid)
        decode.activate(rid)

    def on_event(event: LifecycleEvent) -> None:
        if event.kind is EventKind.PREFILL_DONE:
            handoffs.append(asyncio.get_running_loop().create_task(hand_over(event.request_id)))

    journal.subscribe(on_event)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        runs = [loop.create_task(prefill.run()), loop.create_task(decode.run())]
        for r in sorted(requests, key=lambda r: r.arrival_ms):
            when = round(r.arrival_ms * MS)
            if when > simclock.now_ns():
                await simclock.sleep_until_ns(when, waiter="driver")
            prefill.submit(r)
        while len(handoffs) < len(requests):
            await simclock.sleep_ns(MS, waiter="driver")
        await asyncio.gather(*handoffs)
        prefill.close()
        decode.close()
        await asyncio.gather(*runs)

    simclock.run(main())
    return journal, prefill, decode


@settings(max_examples=40, deadline=None)
@given(workload=pd_workloads())
def test_random_pd_flows_complete_and_release_every_block(
    workload: tuple[int, int, list[Request]],
) -> None:
    requests = workload[2]
    journal, prefill, decode = run_pd(workload)
    for engine in (prefill, decode):
        snap = engine.snapshot()
        assert all(r == 0 for r in snap.ref_counts)
        assert len(snap.free_queue) == engine.config.num_blocks
        assert snap.prefill_outstanding == 0 and snap.decode_outstanding == 0
    for r in requests:
        t = journal.traces[r.id]
        assert t.terminal_status == "completed"
        assert len(t.token_times_ns) == r.output_length
        assert t.prefill_done_ns is not None and t.transfer_done_ns is not None
        assert t.prefill_done_ns <= (t.destination_reserved_ns or 0) < t.transfer_done_ns
        assert t.transfer_done_ns <= (t.decode_admit_ns or 0) < t.token_times_ns[0]


def small_decode(num_blocks: int) -> Engine:
    return Engine(
        1,
        EngineConfig(num_blocks=num_blocks, block_size=4, role="decode"),
        FixedTiming(prefill_ms=5, decode_ms=1),
        keyer=BlockKeyer(),
        journal=Journal(),
    )


async def reserve_then_activate(decode: Engine, request: Request, transfer_ms: int) -> None:
    tentative = decode.offer(request)
    assert isinstance(tentative, Tentative)
    decode.commit(tentative)
    reservation = await decode.reserved(request.id)
    await simclock.sleep_until_ns(reservation.at_ns + transfer_ms * MS, waiter="transfer")
    decode.activate(request.id)


def test_decode_role_preempts_and_recomputes_at_decode_cost() -> None:
    decode = small_decode(10)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(decode.run())
        jobs = [loop.create_task(reserve_then_activate(decode, req(r, 4, 20), 0)) for r in "ab"]
        await asyncio.gather(*jobs)
        decode.close()
        await task

    simclock.run(main())
    a, b = decode.journal.traces["a"], decode.journal.traces["b"]
    assert b.num_preemptions == 1 and b.terminal_status == "completed"
    assert len(a.token_times_ns) == len(b.token_times_ns) == 20
    # b is readmitted when a finishes; its recompute pass costs decode_ms (1 ms) only
    readmitted = b.admissions[-1]
    assert readmitted.is_readmission and readmitted.at_ns == a.terminal_ns
    assert readmitted.at_ns + 1 * MS in b.token_times_ns


def test_decode_engine_with_resident_waiters_can_stall_behind_a_preempted_request() -> None:
    """A known hazard of the reference semantics, pinned: the activated r0 holds 11 blocks
    while it waits behind the preempted r2, which needs them; nothing can change any more,
    and the clock reports the deadlock."""
    decode = small_decode(20)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        runner = loop.create_task(decode.run())
        await simclock.sleep_until_ns(6 * MS, waiter="test")
        await reserve_then_activate(decode, req("r2", 3, 35), 0)
        await simclock.sleep_until_ns(39 * MS, waiter="test")
        await reserve_then_activate(decode, req("r0", 41, 1), 2)
        decode.close()
        await runner

    with pytest.raises(simclock.DeadlockError):
        simclock.run(main())
    assert decode.journal.traces["r2"].num_preemptions == 1
    assert decode.snapshot().waiting == ("r2", "r0")
