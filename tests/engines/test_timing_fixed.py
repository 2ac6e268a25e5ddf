"""FixedTiming: the exact AIS parity rule of REFERENCE-engine §5.2."""

from __future__ import annotations

import pytest

import simclock
from engines import EngineError, FixedTiming, TimingConfigError

from .test_timing_shapes import shape

FIXED = FixedTiming(prefill_ms=50, decode_ms=10)
FRESH_PROMPT = (1000, 0, 1000, 0, True)  # a whole fresh prompt, samples token 1
DECODE = (1, 1000, 1000, 1, True)  # one decode step after token 1
FIRST_CHUNK = (512, 0, 1000, 0, False)  # a prompt chunk that does not reach the end
RECOMPUTE_DONE = (192, 448, 600, 40, True)  # §9e: B finishes recomputing 448..640


def test_lone_fresh_prompt_costs_prefill_only() -> None:
    assert FIXED.pass_time_ms(shape(FRESH_PROMPT)) == 50.0


def test_lone_prompt_chunk_costs_prefill_only() -> None:
    assert FIXED.pass_time_ms(shape(FIRST_CHUNK)) == 50.0


def test_lone_decode_costs_decode_only() -> None:
    assert FIXED.pass_time_ms(shape(DECODE)) == 10.0


def test_many_decodes_cost_one_decode() -> None:
    assert FIXED.pass_time_ms(shape(DECODE, DECODE, DECODE)) == 10.0


def test_mixed_pass_costs_prefill_plus_decode() -> None:
    assert FIXED.pass_time_ms(shape(DECODE, (40, 960, 1000, 0, True))) == 60.0


def test_decode_with_unfinished_prompt_chunk_costs_both() -> None:
    assert FIXED.pass_time_ms(shape(DECODE, FIRST_CHUNK)) == 60.0


def test_preempted_request_finishing_recompute_costs_both_even_alone() -> None:
    assert FIXED.pass_time_ms(shape(RECOMPUTE_DONE)) == 60.0


def test_recompute_chunk_past_the_prompt_that_samples_costs_decode_only() -> None:
    # positions 600..640 are recomputed outputs: no prompt position is touched (c_r >= P).
    assert FIXED.pass_time_ms(shape((40, 600, 600, 40, True))) == 10.0


def test_recompute_chunk_that_does_not_sample_costs_prefill_only() -> None:
    assert FIXED.pass_time_ms(shape((300, 0, 600, 40, False))) == 50.0


def test_empty_pass_costs_nothing() -> None:
    assert FIXED.pass_time_ms(shape()) == 0.0


def test_prefill_role_never_charges_decode() -> None:
    assert FIXED.pass_time_ms(shape(FRESH_PROMPT, role="prefill")) == 50.0
    assert FIXED.pass_time_ms(shape(RECOMPUTE_DONE, role="prefill")) == 50.0
    assert FIXED.pass_time_ms(shape(DECODE, FRESH_PROMPT, role="prefill")) == 50.0


def test_decode_role_never_charges_prefill_and_counts_every_sampling_entry() -> None:
    # P/D activation: num_computed = P - 1, num_output = 0; the first decode pass samples token 1.
    activated = (1, 999, 1000, 0, True)
    assert FIXED.pass_time_ms(shape(activated, role="decode")) == 10.0
    assert FIXED.pass_time_ms(shape(activated, DECODE, role="decode")) == 10.0
    assert FIXED.pass_time_ms(shape(RECOMPUTE_DONE, role="decode")) == 10.0


def test_decode_role_pass_without_sampling_costs_nothing() -> None:
    assert FIXED.pass_time_ms(shape((300, 0, 600, 40, False), role="decode")) == 0.0


def test_result_is_a_float() -> None:
    assert type(FIXED.pass_time_ms(shape(FRESH_PROMPT))) is float


def test_zero_costs_are_allowed() -> None:
    assert FixedTiming(prefill_ms=0, decode_ms=0).pass_time_ms(shape(DECODE, FRESH_PROMPT)) == 0.0


def test_is_a_frozen_comparable_value() -> None:
    assert FixedTiming(prefill_ms=50, decode_ms=10) == FIXED
    with pytest.raises(AttributeError):
        FIXED.prefill_ms = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"prefill_ms": -1.0, "decode_ms": 10.0},
            "FixedTiming.prefill_ms must be a finite number >= 0, got -1.0",
        ),
        (
            {"prefill_ms": 50.0, "decode_ms": float("nan")},
            "FixedTiming.decode_ms must be a finite number >= 0, got nan",
        ),
        (
            {"prefill_ms": float("inf"), "decode_ms": 10.0},
            "FixedTiming.prefill_ms must be a finite number >= 0, got inf",
        ),
        (
            {"prefill_ms": "50", "decode_ms": 10.0},
            "FixedTiming.prefill_ms must be a finite number >= 0, got '50'",
        ),
        (
            {"prefill_ms": True, "decode_ms": 10.0},
            "FixedTiming.prefill_ms must be a finite number >= 0, got True",
        ),
    ],
)
def test_bad_parameters_raise_with_exact_message(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TimingConfigError) as info:
        FixedTiming(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_config_error_is_a_simulation_error_and_a_value_error() -> None:
    assert issubclass(TimingConfigError, simclock.SimulationError)
    assert issubclass(TimingConfigError, ValueError)


def test_config_error_is_an_engine_error() -> None:
    assert issubclass(TimingConfigError, EngineError)
