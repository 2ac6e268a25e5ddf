"""A run of decode passes is priced in one call, pass for pass the number ``pass_time_ms``
gives for that pass's shape, for every timing model (built-in batch methods, and the
per-pass default for models that have none)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines import (
    FixedTiming,
    LinearTiming,
    PassShape,
    PolynomialTiming,
    RooflineTiming,
    TableTiming,
    gpu_spec,
    model_arch,
)
from engines._pass import DecodeRun, decode_run_times_ms


class OnlyPerPass:
    """A user model with ``pass_time_ms`` only."""

    def pass_time_ms(self, shape: PassShape) -> float:
        return 1.5 + 0.25 * float(shape.samples.sum()) + 1e-4 * float(shape.computed.sum())


MODELS = [
    FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    FixedTiming(prefill_ms=20.0, decode_ms=7.25),
    PolynomialTiming(),
    PolynomialTiming(decode_b2=3.0, decode_b1=-1.0, decode_b0=0.5, decode_floor_ms=0.0),
    LinearTiming(c0=4.0, c_p=0.02, c_d=0.3, c_kv=1e-4, c_pp=1e-6),
    RooflineTiming(gpu=gpu_spec("H200"), model=model_arch("llama-3.1-8b")),
    RooflineTiming(
        gpu=gpu_spec("H200"),
        model=model_arch("llama-3.1-8b"),
        tensor_parallel=2,
        link_bandwidth_GBps=450.0,
        overhead_ms=0.3,
    ),
    TableTiming(
        prefill_tokens=[100, 1000, 4000],
        prefill_ms=[10.0, 40.0, 100.0],
        decode_batch=[1, 8],
        decode_context=[1000, 3000],
        decode_ms=[[5.0, 7.0], [9.0, 15.0]],
    ),
    TableTiming(
        prefill_tokens=[100, 1000],
        prefill_ms=[10.0, 40.0],
        decode_batch=[1, 4, 16, 64],
        decode_context=[500, 2000, 8000, 30000],
        decode_ms=[
            [4.0, 4.5, 6.0, 11.0],
            [4.2, 5.0, 7.5, 15.0],
            [5.0, 6.5, 12.0, 30.0],
            [8.0, 12.0, 25.0, 70.0],
        ],
    ),
    OnlyPerPass(),
]


@st.composite
def runs(draw: st.DrawFn) -> DecodeRun:
    k = draw(st.integers(1, 40))
    prompts = np.array([draw(st.integers(1, 20_000)) for _ in range(k)], dtype=np.int64)
    outputs = np.array([draw(st.integers(1, 500)) for _ in range(k)], dtype=np.int64)
    remaining = np.array([draw(st.integers(1, 300)) for _ in range(k)], dtype=np.int64)
    passes = draw(st.integers(1, int(remaining.max())))
    role = draw(st.sampled_from(["aggregated", "decode"]))
    capacity = draw(st.integers(10_000, 10**8))
    return DecodeRun(passes, prompts + outputs - 1, prompts, outputs, remaining, role, capacity)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: type(m).__name__)
@settings(max_examples=40, deadline=None)
@given(run=runs())
def test_a_run_is_priced_as_its_passes(model: object, run: DecodeRun) -> None:
    whole = decode_run_times_ms(model, run)  # type: ignore[arg-type]
    assert whole.shape == (run.passes,)
    for i in range(run.passes):
        assert whole[i] == model.pass_time_ms(run.shape(i))  # type: ignore[attr-defined]


def test_a_pass_shape_of_a_run_is_what_the_engine_schedules() -> None:
    run = DecodeRun(
        3,
        np.array([10, 20], dtype=np.int64),
        np.array([8, 15], dtype=np.int64),
        np.array([3, 6], dtype=np.int64),
        np.array([1, 3], dtype=np.int64),
    )
    first, last = run.shape(0), run.shape(2)
    assert first.computed.tolist() == [10, 20] and first.output_before.tolist() == [3, 6]
    assert last.computed.tolist() == [22] and last.output_before.tolist() == [8]
    assert last.scheduled.tolist() == [1] and last.samples.tolist() == [True]
    assert run.batch_sizes().tolist() == [2, 1, 1]
    assert run.live_sums(np.array([5, 7], dtype=np.int64)).tolist() == [12, 7, 7]


def test_a_batch_method_of_the_wrong_shape_is_refused() -> None:
    class Broken:
        def pass_time_ms(self, shape: PassShape) -> float:
            return 1.0

        def decode_run_ms(self, run: DecodeRun) -> np.ndarray:
            return np.ones(run.passes + 1)

    run = DecodeRun(
        2,
        np.array([5], dtype=np.int64),
        np.array([4], dtype=np.int64),
        np.array([2], dtype=np.int64),
        np.array([2], dtype=np.int64),
    )
    with pytest.raises(ValueError, match=r"Broken.decode_run_ms returned shape \(3,\)"):
        decode_run_times_ms(Broken(), run)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", [m for m in MODELS if isinstance(m, FixedTiming)])
@settings(max_examples=40, deadline=None)
@given(run=runs(), prefill_role=st.booleans())
def test_a_steady_decode_duration_is_every_pass_of_the_run(
    model: FixedTiming, run: DecodeRun, prefill_role: bool
) -> None:
    """``FixedTiming.steady_decode_ms`` names one duration for every pass of a run of decode
    steps whose entries all sampled before: the number ``pass_time_ms`` gives each pass."""
    if prefill_role:
        run = DecodeRun(
            run.passes,
            run.computed,
            run.prompt_length,
            run.output_before,
            run.remaining,
            "prefill",
            run.kv_capacity_tokens,
        )
    value = model.steady_decode_ms(run.role)
    for i in range(run.passes):
        assert value == model.pass_time_ms(run.shape(i))
