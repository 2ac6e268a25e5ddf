"""The frontend tokenization stage (REFERENCE-engine §7)."""

from __future__ import annotations

import asyncio

import pytest

import simclock
from engines import TimingConfigError, Tokenization, TokenizerPool, TokenizerStage

STAGE = TokenizerStage(workers=1, base_ms=5.0, per_input_token_us=500.0)  # 5 ms + 0.5 ms/token
MS = 1_000_000


def test_lone_4_token_request_is_tokenized_at_7_ms() -> None:
    assert STAGE.tokenized_ms([(0.0, 4)]) == (7.0,)


def test_two_4_token_requests_at_zero_finish_at_7_and_14() -> None:
    assert STAGE.tokenized_ms([(0.0, 4), (0.0, 4)]) == (7.0, 14.0)


def test_100_token_request_arriving_at_1_ms_then_finishes_at_69() -> None:
    assert STAGE.tokenized_ms([(0.0, 4), (0.0, 4), (1.0, 100)]) == (7.0, 14.0, 69.0)


def test_nanosecond_variant_gives_the_same_times() -> None:
    assert STAGE.tokenized_ns([(0, 4), (0, 4), (1 * MS, 100)]) == (7 * MS, 14 * MS, 69 * MS)


def test_requests_enter_in_arrival_order_and_results_keep_input_order() -> None:
    # listed out of arrival order: the 10 ms one is served after the 0 ms one.
    assert STAGE.tokenized_ms([(10.0, 4), (0.0, 4)]) == (17.0, 7.0)


def test_arrival_ties_are_served_in_trace_order() -> None:
    assert STAGE.tokenized_ms([(0.0, 100), (0.0, 4)]) == (55.0, 62.0)
    assert STAGE.tokenized_ms([(0.0, 4), (0.0, 100)]) == (7.0, 62.0)


def test_several_workers_serve_in_parallel() -> None:
    two = TokenizerStage(workers=2, base_ms=5.0, per_input_token_us=500.0)
    assert two.tokenized_ms([(0.0, 4), (0.0, 4), (0.0, 4), (1.0, 100)]) == (
        7.0,
        7.0,
        14.0,
        62.0,
    )


def test_idle_gap_restarts_service_at_arrival() -> None:
    assert STAGE.tokenized_ms([(0.0, 4), (100.0, 4)]) == (7.0, 107.0)


def test_stage_is_off_by_default() -> None:
    off = TokenizerStage()
    assert not off.enabled
    assert (off.workers, off.base_ms, off.per_input_token_us) == (1, 0.0, 0.0)
    assert off.tokenized_ms([(0.0, 4), (0.0, 4000), (3.5, 9)]) == (0.0, 0.0, 3.5)
    assert STAGE.enabled


def test_empty_list_has_no_times() -> None:
    assert STAGE.tokenized_ms([]) == ()
    assert STAGE.tokenized_ns([]) == ()


def test_service_time_formula() -> None:
    assert STAGE.service_ms(100) == 55.0
    assert STAGE.service_ns(3) == 6_500_000


def test_pool_books_the_earliest_free_worker_lowest_index_first() -> None:
    pool = TokenizerStage(workers=2, base_ms=5.0, per_input_token_us=500.0).pool()
    assert pool.assign(0, 4) == Tokenization(worker=0, start_ns=0, done_ns=7 * MS)
    assert pool.assign(0, 4) == Tokenization(worker=1, start_ns=0, done_ns=7 * MS)
    assert pool.assign(0, 4) == Tokenization(worker=0, start_ns=7 * MS, done_ns=14 * MS)
    assert pool.assign(1 * MS, 100) == Tokenization(worker=1, start_ns=7 * MS, done_ns=62 * MS)


def test_pool_matches_the_pure_function() -> None:
    stage = TokenizerStage(workers=3, base_ms=1.25, per_input_token_us=7.0)
    requests = [(t * 400_000, (t * 37) % 900) for t in range(60)]
    pool = stage.pool()
    assert tuple(pool.assign(a, p).done_ns for a, p in requests) == stage.tokenized_ns(requests)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "TokenizerStage.workers must be an integer >= 1, got 0"),
        ({"workers": 1.0}, "TokenizerStage.workers must be an integer >= 1, got 1.0"),
        ({"base_ms": -1.0}, "TokenizerStage.base_ms must be a finite number >= 0, got -1.0"),
        (
            {"per_input_token_us": float("nan")},
            "TokenizerStage.per_input_token_us must be a finite number >= 0, got nan",
        ),
    ],
)
def test_bad_configuration_raises(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TimingConfigError) as info:
        TokenizerStage(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_negative_input_length_raises() -> None:
    with pytest.raises(TimingConfigError) as info:
        STAGE.tokenized_ms([(0.0, -1)])
    assert str(info.value) == "input_length must be an integer >= 0, got -1"


def test_non_finite_arrival_raises() -> None:
    with pytest.raises(TimingConfigError) as info:
        STAGE.tokenized_ms([(float("nan"), 4)])
    assert str(info.value) == "arrival_ms must be a finite number, got nan"


async def _replay(pool: TokenizerPool, requests: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Release each ``(arrival_ns, P)`` at its arrival; return (tokenized at, clock on return)."""
    results: list[tuple[int, int]] = [(-1, -1)] * len(requests)

    async def one(index: int, arrival_ns: int, input_length: int) -> None:
        await simclock.sleep_until_ns(arrival_ns, waiter=f"arrival-{index}")
        booking = await pool.tokenize(input_length, waiter=f"tokenize-{index}")
        results[index] = (booking.done_ns, simclock.now_ns())

    async with asyncio.TaskGroup() as group:
        for index, (arrival_ns, input_length) in enumerate(requests):
            group.create_task(one(index, arrival_ns, input_length))
    return results


def test_pool_coroutine_reproduces_the_reference_example_on_the_clock() -> None:
    requests = [(0, 4), (0, 4), (1 * MS, 100)]
    results = simclock.run(_replay(STAGE.pool(), requests))
    assert results == [(7 * MS, 7 * MS), (14 * MS, 14 * MS), (69 * MS, 69 * MS)]


def test_pool_coroutine_matches_the_pure_function_with_several_workers() -> None:
    stage = TokenizerStage(workers=3, base_ms=0.75, per_input_token_us=3.0)
    requests = [(t * 250_000, (t * 53) % 1200) for t in range(40)]
    results = simclock.run(_replay(stage.pool(), requests))
    assert [done for done, _ in results] == list(stage.tokenized_ns(requests))
    assert all(done == clock for done, clock in results)


def test_pool_coroutine_returns_at_once_when_the_stage_is_off() -> None:
    results = simclock.run(_replay(TokenizerStage().pool(), [(5 * MS, 100), (5 * MS, 3)]))
    assert results == [(5 * MS, 5 * MS), (5 * MS, 5 * MS)]
