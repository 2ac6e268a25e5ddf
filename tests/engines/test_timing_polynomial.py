"""PolynomialTiming: REFERENCE-engine §5.3."""

from __future__ import annotations

import pytest

from engines import PolynomialTiming, TimingConfigError

from .test_timing_shapes import shape

POLY = PolynomialTiming()


def test_default_prefill_of_1000_tokens_is_32_1_ms() -> None:
    assert POLY.pass_time_ms(shape((1000, 0, 1000, 0, True))) == pytest.approx(32.1058, abs=1e-4)


def test_prefill_part_is_the_quadratic_in_new_tokens() -> None:
    n = 3000.0
    expected = 4.209989e-7 * n * n + 1.518344e-2 * n + 16.50142
    assert POLY.pass_time_ms(shape((3000, 0, 5000, 0, False))) == pytest.approx(expected)


def test_prefix_hits_are_not_prompt_work() -> None:
    # B of §9c: 960 tokens reused, 40 computed.
    expected = POLY.prefill_time_ms(40)
    assert POLY.pass_time_ms(shape((40, 960, 1000, 0, True))) == pytest.approx(expected)


def test_prefill_tokens_add_up_over_entries() -> None:
    two = shape((300, 0, 300, 0, True), (700, 0, 700, 0, True))
    assert POLY.pass_time_ms(two) == pytest.approx(POLY.prefill_time_ms(1000))


def test_decode_part_uses_active_kv_fraction_of_capacity() -> None:
    # two decodes holding 1001 + 2999 tokens of 8000 slots: u = 0.5.
    pass_ = shape((1, 1000, 1000, 1, True), (1, 2998, 2990, 9, True), capacity=8000)
    expected = -25.74 * 0.25 + 54.01 * 0.5 + 5.74
    assert POLY.pass_time_ms(pass_) == pytest.approx(expected)


def test_active_fraction_is_capped_at_one() -> None:
    pass_ = shape((1, 1000, 1000, 1, True), capacity=64)
    assert POLY.pass_time_ms(pass_) == pytest.approx(-25.74 + 54.01 + 5.74)


def test_decode_part_is_floored() -> None:
    model = PolynomialTiming(decode_b2=0.0, decode_b1=0.0, decode_b0=0.2, decode_floor_ms=1.0)
    assert model.pass_time_ms(shape((1, 10, 10, 1, True), capacity=1000)) == 1.0


def test_mixed_pass_is_additive() -> None:
    pass_ = shape((1, 1000, 1000, 1, True), (1000, 0, 1000, 0, True), capacity=4000)
    expected = POLY.prefill_time_ms(1000) + POLY.decode_time_ms(1001 / 4000)
    assert POLY.pass_time_ms(pass_) == pytest.approx(expected)


def test_first_token_of_a_fresh_prompt_is_not_decode_work() -> None:
    # capacity 0 would raise if the entry counted as decode work.
    assert POLY.pass_time_ms(shape((1000, 0, 1000, 0, True))) == pytest.approx(
        POLY.prefill_time_ms(1000)
    )


def test_preempted_request_finishing_recompute_charges_both_parts() -> None:
    pass_ = shape((192, 448, 600, 40, True), capacity=1280)
    expected = POLY.prefill_time_ms(192) + POLY.decode_time_ms(640 / 1280)
    assert POLY.pass_time_ms(pass_) == pytest.approx(expected)


def test_prefill_role_drops_the_decode_part() -> None:
    pass_ = shape((192, 448, 600, 40, True), role="prefill", capacity=1280)
    assert POLY.pass_time_ms(pass_) == pytest.approx(POLY.prefill_time_ms(192))


def test_decode_role_drops_the_prefill_part_and_counts_every_sampling_entry() -> None:
    activated = (1, 999, 1000, 0, True)
    pass_ = shape(activated, role="decode", capacity=4000)
    assert POLY.pass_time_ms(pass_) == pytest.approx(POLY.decode_time_ms(1000 / 4000))


def test_empty_pass_costs_nothing() -> None:
    assert POLY.pass_time_ms(shape()) == 0.0


def test_decode_without_capacity_raises() -> None:
    with pytest.raises(TimingConfigError) as info:
        POLY.pass_time_ms(shape((1, 1000, 1000, 1, True)))
    assert str(info.value) == (
        "PolynomialTiming needs kv_capacity_tokens > 0 in the pass shape, got 0"
    )


def test_non_finite_coefficient_raises() -> None:
    with pytest.raises(TimingConfigError) as info:
        PolynomialTiming(prefill_a2=float("nan"))
    assert str(info.value) == "PolynomialTiming.prefill_a2 must be a finite number, got nan"


def test_negative_floor_raises() -> None:
    with pytest.raises(TimingConfigError) as info:
        PolynomialTiming(decode_floor_ms=-1.0)
    assert str(info.value) == (
        "PolynomialTiming.decode_floor_ms must be a finite number >= 0, got -1.0"
    )
