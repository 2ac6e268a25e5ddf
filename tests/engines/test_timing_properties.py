"""Properties every built-in timing model keeps on arbitrary passes (hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from engines import (
    FixedTiming,
    LinearTiming,
    PassShape,
    PolynomialTiming,
    RooflineTiming,
    TableTiming,
    TimingModel,
    gpu_spec,
    model_arch,
)

from .test_timing_shapes import Entry, shape

entries = st.tuples(
    st.integers(1, 8192),
    st.integers(0, 200_000),
    st.integers(1, 100_000),
    st.integers(0, 4096),
    st.booleans(),
)
roles = st.sampled_from(["aggregated", "prefill", "decode"])
passes = st.builds(
    lambda rows, role, capacity: shape(*rows, role=role, capacity=capacity),
    st.lists(entries, max_size=40),
    roles,
    st.integers(1, 10_000_000),
)

MODELS: dict[str, TimingModel] = {
    "fixed": FixedTiming(prefill_ms=50, decode_ms=10),
    "polynomial": PolynomialTiming(),
    "linear": LinearTiming(c0=3.0, c_p=0.02, c_d=0.2, c_kv=1e-4, c_pp=1e-7),
    "roofline": RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b")),
    "table": TableTiming(
        prefill_tokens=[128, 1024, 8192],
        prefill_ms=[12.0, 30.0, 180.0],
        decode_batch=[1, 16, 256],
        decode_context=[512, 8192, 65536],
        decode_ms=[[6, 7, 12], [7, 10, 30], [12, 30, 200]],
    ),
}


@settings(max_examples=60, deadline=None)
@given(passes)
def test_every_model_returns_a_finite_float_at_least_zero(pass_: PassShape) -> None:
    for name, model in MODELS.items():
        ms = model.pass_time_ms(pass_)
        assert type(ms) is float, name
        assert math.isfinite(ms) and ms >= 0, (name, ms)


@settings(max_examples=60, deadline=None)
@given(passes)
def test_fixed_charges_each_constant_at_most_once(pass_: PassShape) -> None:
    assert MODELS["fixed"].pass_time_ms(pass_) in {0.0, 10.0, 50.0, 60.0}


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, max_size=30))
def test_prefill_role_prices_only_the_prefill_entries(rows: list[Entry]) -> None:
    whole = shape(*rows, role="prefill", capacity=1_000_000)
    keep = ~whole.is_decode
    only_prefill = shape(*[r for r, k in zip(rows, keep, strict=True) if k], role="prefill")
    for name in ("linear", "table", "roofline"):
        assert MODELS[name].pass_time_ms(whole) == MODELS[name].pass_time_ms(only_prefill), name


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, min_size=1, max_size=30))
def test_linear_and_table_split_a_mixed_pass_into_additive_parts(rows: list[Entry]) -> None:
    whole = shape(*rows)
    decode = whole.is_decode
    prefill_rows = [r for r, d in zip(rows, decode, strict=True) if not d]
    decode_rows = [r for r, d in zip(rows, decode, strict=True) if d]
    table = MODELS["table"]
    parts = table.pass_time_ms(shape(*prefill_rows)) + table.pass_time_ms(shape(*decode_rows))
    assert math.isclose(table.pass_time_ms(whole), parts, rel_tol=1e-12, abs_tol=1e-9)
    linear = MODELS["linear"]
    c0_twice = 3.0 if prefill_rows and decode_rows else 0.0
    parts = linear.pass_time_ms(shape(*prefill_rows)) + linear.pass_time_ms(shape(*decode_rows))
    assert math.isclose(linear.pass_time_ms(whole), parts - c0_twice, rel_tol=1e-12, abs_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, max_size=30), entries)
def test_roofline_never_gets_faster_with_more_work(rows: list[Entry], extra: Entry) -> None:
    model = MODELS["roofline"]
    assert model.pass_time_ms(shape(*rows, extra)) >= model.pass_time_ms(shape(*rows))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1e4), min_size=2, max_size=6, unique=True),
    st.data(),
)
def test_table_returns_the_measurement_at_every_grid_point(
    axis: list[float], data: st.DataObject
) -> None:
    xs = sorted(axis)
    ys = data.draw(st.lists(st.floats(0, 1e3), min_size=len(xs), max_size=len(xs)))
    grid = data.draw(
        st.lists(
            st.lists(st.floats(0, 1e3), min_size=len(xs), max_size=len(xs)),
            min_size=len(xs),
            max_size=len(xs),
        )
    )
    table = TableTiming(
        prefill_tokens=xs, prefill_ms=ys, decode_batch=xs, decode_context=xs, decode_ms=grid
    )
    for i, x in enumerate(xs):
        if x > 0:
            assert math.isclose(table.prefill_time_ms(x), ys[i], abs_tol=1e-9)
            for j, context in enumerate(xs):
                assert math.isclose(table.decode_time_ms(x, context), grid[i][j], abs_tol=1e-9)


def test_models_price_a_full_batch() -> None:
    rows = [(1, 2000 + i, 2000, 5, True) for i in range(255)] + [(4096, 0, 9000, 0, False)]
    big = shape(*rows, capacity=1 << 22)
    for model in MODELS.values():
        assert model.pass_time_ms(big) > 0
