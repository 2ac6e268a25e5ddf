"""TableTiming: REFERENCE-engine §5.6."""

from __future__ import annotations

import pytest

from engines import TableTiming, TimingConfigError

from .test_timing_shapes import shape

TABLE = TableTiming(
    prefill_tokens=[100, 1000, 4000],
    prefill_ms=[10.0, 40.0, 100.0],
    decode_batch=[1, 8],
    decode_context=[1000, 3000],
    decode_ms=[[5.0, 7.0], [9.0, 15.0]],
)


def test_prefill_on_grid_points_returns_the_measurements() -> None:
    assert [TABLE.prefill_time_ms(n) for n in (100, 1000, 4000)] == [10.0, 40.0, 100.0]


def test_prefill_interpolates_piecewise_linearly() -> None:
    assert TABLE.prefill_time_ms(550) == pytest.approx(25.0)
    assert TABLE.prefill_time_ms(2500) == pytest.approx(70.0)


def test_prefill_extrapolates_from_the_edge_segments() -> None:
    assert TABLE.prefill_time_ms(7000) == pytest.approx(160.0)
    assert TABLE.prefill_time_ms(40) == pytest.approx(10.0 - 60 * 30 / 900)


def test_prefill_extrapolation_is_clamped_at_zero() -> None:
    steep = TableTiming(
        prefill_tokens=[100, 200],
        prefill_ms=[1.0, 50.0],
        decode_batch=[1, 2],
        decode_context=[1, 2],
        decode_ms=[[1.0, 1.0], [1.0, 1.0]],
    )
    assert steep.prefill_time_ms(10) == 0.0


def test_decode_on_grid_points_returns_the_measurements() -> None:
    assert TABLE.decode_time_ms(1, 1000) == 5.0
    assert TABLE.decode_time_ms(8, 3000) == 15.0


def test_decode_is_bilinear_inside_the_grid() -> None:
    # centre of the cell: mean of the four corners.
    assert TABLE.decode_time_ms(4.5, 2000) == pytest.approx((5 + 7 + 9 + 15) / 4)


def test_decode_extrapolates_from_the_edge_cell() -> None:
    # batch 15 (u = 2), context 1000: 5 + 2·(9 - 5)
    assert TABLE.decode_time_ms(15, 1000) == pytest.approx(13.0)
    # batch 1, context 5000 (v = 2): 5 + 2·(7 - 5)
    assert TABLE.decode_time_ms(1, 5000) == pytest.approx(9.0)


def test_pass_indexes_decode_by_batch_and_mean_context() -> None:
    pass_ = shape((1, 999, 990, 10, True), (1, 2999, 2000, 1000, True))
    # B_d = 2, K_d = 1000 + 3000, mean context 2000.
    assert TABLE.pass_time_ms(pass_) == pytest.approx(TABLE.decode_time_ms(2, 2000))


def test_mixed_pass_is_additive() -> None:
    pass_ = shape((1, 999, 990, 10, True), (550, 0, 550, 0, True))
    assert TABLE.pass_time_ms(pass_) == pytest.approx(25.0 + TABLE.decode_time_ms(1, 1000))


def test_prefill_role_drops_the_decode_part() -> None:
    pass_ = shape((1, 999, 990, 10, True), (550, 0, 550, 0, True), role="prefill")
    assert TABLE.pass_time_ms(pass_) == pytest.approx(25.0)


def test_decode_role_has_only_decode_entries() -> None:
    pass_ = shape((1, 999, 1000, 0, True), role="decode")
    assert TABLE.pass_time_ms(pass_) == pytest.approx(5.0)


def test_empty_pass_costs_nothing() -> None:
    assert TABLE.pass_time_ms(shape()) == 0.0


def test_is_a_comparable_value() -> None:
    twin = TableTiming(
        prefill_tokens=(100, 1000, 4000),
        prefill_ms=(10, 40, 100),
        decode_batch=(1, 8),
        decode_context=(1000, 3000),
        decode_ms=((5, 7), (9, 15)),
    )
    assert twin == TABLE
    assert twin.prefill_tokens == (100.0, 1000.0, 4000.0)


GOOD = {
    "prefill_tokens": [1, 2],
    "prefill_ms": [1.0, 2.0],
    "decode_batch": [1, 2],
    "decode_context": [1, 2],
    "decode_ms": [[1.0, 1.0], [1.0, 1.0]],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prefill_tokens": [1]}, "TableTiming.prefill_tokens needs at least 2 points, got 1"),
        (
            {"decode_batch": [2, 2]},
            "TableTiming.decode_batch must be strictly increasing, got (2.0, 2.0)",
        ),
        (
            {"decode_context": [1, float("inf")]},
            "TableTiming.decode_context must be finite, got (1.0, inf)",
        ),
        (
            {"prefill_ms": [1.0, -2.0]},
            "TableTiming.prefill_ms must be finite numbers >= 0, got (1.0, -2.0)",
        ),
        (
            {"prefill_ms": [1.0, 2.0, 3.0]},
            "TableTiming.prefill_ms has 3 values for 2 prefill_tokens",
        ),
        (
            {"decode_ms": [[1.0, 1.0]]},
            "TableTiming.decode_ms must be 2x2 (decode_batch x decode_context), got 1x2",
        ),
        (
            {"decode_ms": [[1.0, 1.0], [1.0, float("nan")]]},
            "TableTiming.decode_ms must be finite numbers >= 0, got (1.0, nan)",
        ),
    ],
)
def test_bad_tables_raise_with_exact_message(change: dict[str, object], message: str) -> None:
    with pytest.raises(TimingConfigError) as info:
        TableTiming(**{**GOOD, **change})  # type: ignore[arg-type]
    assert str(info.value) == message
