"""Every built-in timing model gives, bit for bit, what the §5 formulas give when spelled out
with numpy masks over the whole pass (the straightforward implementation kept here), on both
sides of the size where the models switch from plain Python to numpy."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Iterator

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engines._timing
import engines._timing_roofline
from engines import (
    FixedTiming,
    LinearSample,
    LinearTiming,
    PassShape,
    PolynomialTiming,
    Role,
    RooflineTiming,
    TableTiming,
    TimingModel,
    gpu_spec,
    model_arch,
)

from .test_timing_shapes import Entry, shape

BoolArray = npt.NDArray[np.bool_]
SMALL = engines._timing.SMALL_PASS_ENTRIES


# --- the reference: the §5 formulas over numpy masks, one model at a time -------------------


def _masks(s: PassShape) -> tuple[BoolArray, BoolArray]:
    decode = s.is_decode
    prefill = ~decode
    if s.role == "prefill":
        decode = np.zeros_like(decode)
    return prefill, decode


def _has_decode_set(s: PassShape) -> BoolArray:
    if s.role == "decode":
        return s.samples.copy()
    if s.role == "prefill":
        return np.zeros_like(s.samples)
    mask: BoolArray = s.samples & (s.output_before >= 1)
    return mask


def ref_fixed(m: FixedTiming, s: PassShape) -> float:
    has_prefill = s.role != "decode" and bool(np.any(s.computed < s.prompt_length))
    has_decode = bool(np.any(_has_decode_set(s)))
    return float(m.prefill_ms) * has_prefill + float(m.decode_ms) * has_decode


def ref_polynomial(m: PolynomialTiming, s: PassShape) -> float:
    prefill, _ = _masks(s)
    total = m.prefill_time_ms(int(s.scheduled[prefill].sum()))
    decodes = _has_decode_set(s)
    if np.any(decodes):
        active = int((s.prompt_length[decodes] + s.output_before[decodes]).sum())
        total += m.decode_time_ms(active / s.kv_capacity_tokens)
    return total


def ref_regressors(s: PassShape) -> tuple[float, float, float, float]:
    prefill, decode = _masks(s)
    n = s.scheduled.astype(np.float64)
    c = s.computed.astype(np.float64)
    charged = prefill | decode
    return (
        float(n[prefill].sum()),
        float(np.count_nonzero(decode)),
        float((c[charged] + n[charged]).sum()),
        float((n[prefill] * (c[prefill] + n[prefill] / 2)).sum()),
    )


def ref_linear(m: LinearTiming, s: PassShape) -> float:
    prefill, decode = _masks(s)
    if not np.any(prefill | decode):
        return 0.0
    tokens, decodes, kv, attention = ref_regressors(s)
    return float(m.c0 + m.c_p * tokens + m.c_d * decodes + m.c_kv * kv + m.c_pp * attention)


def ref_flops_and_bytes(m: RooflineTiming, s: PassShape) -> tuple[float, float]:
    prefill, decode = _masks(s)
    charged = prefill | decode
    if not np.any(charged):
        return 0.0, 0.0
    a = m.model
    n = s.scheduled[charged].astype(np.float64)
    c = s.computed[charged].astype(np.float64)
    p_lin, p_head = float(a.linear_params), float(a.head_params)
    attention = float((n * c + n * (n + 1) / 2).sum())
    flops = (
        2 * p_lin * float(n.sum())
        + 2 * p_head * float(np.count_nonzero(s.samples[charged]))
        + 4 * a.num_layers * a.num_heads * a.head_dim * attention
    )
    kv_bpt = 2 * a.num_layers * a.num_kv_heads * a.head_dim * float(m.kv_bytes)
    return flops, (p_lin + p_head) * float(m.weight_bytes) + kv_bpt * float((c + n).sum())


def ref_roofline(m: RooflineTiming, s: PassShape) -> float:
    flops, moved = ref_flops_and_bytes(m, s)
    if flops == 0.0 and moved == 0.0:
        return 0.0
    t = m.tensor_parallel
    compute_s = flops / (t * m.gpu.bf16_flops * m.compute_efficiency)
    memory_s = moved / (t * m.gpu.memory_bandwidth_bytes_per_s * m.memory_efficiency)
    total_ms = float(m.overhead_ms) + max(compute_s, memory_s) * 1000.0
    if m.link_bandwidth_GBps is not None and t > 1:
        prefill, decode = _masks(s)
        tokens = float(s.scheduled[prefill | decode].sum())
        volume = tokens * m.model.hidden_size * float(m.activation_bytes)
        comm_s = (2 * m.model.num_layers * 2 * (t - 1) / t * volume) / (m.link_bandwidth_GBps * 1e9)
        total_ms += comm_s * 1000.0
    return total_ms


def _segment(xs: tuple[float, ...], x: float) -> tuple[int, float]:
    grid = np.array(xs, dtype=np.float64)
    i = int(np.searchsorted(grid, x, side="right")) - 1
    i = min(max(i, 0), len(xs) - 2)
    return i, (x - float(grid[i])) / float(grid[i + 1] - grid[i])


def ref_table(m: TableTiming, s: PassShape) -> float:
    prefill, decode = _masks(s)
    total = 0.0
    tokens = float(s.scheduled[prefill].sum())
    if tokens > 0:
        ys = np.array(m.prefill_ms, dtype=np.float64)
        i, f = _segment(m.prefill_tokens, tokens)
        total += max(0.0, float(ys[i] + f * (ys[i + 1] - ys[i])))
    batch = int(np.count_nonzero(decode))
    if batch:
        kv = float((s.computed[decode] + s.scheduled[decode]).sum())
        grid = np.array(m.decode_ms, dtype=np.float64)
        i, u = _segment(m.decode_batch, float(batch))
        j, v = _segment(m.decode_context, kv / batch)
        value = (
            (1 - u) * (1 - v) * grid[i, j]
            + u * (1 - v) * grid[i + 1, j]
            + (1 - u) * v * grid[i, j + 1]
            + u * v * grid[i + 1, j + 1]
        )
        total += max(0.0, float(value))
    return total


MODELS: list[tuple[str, TimingModel, Callable[..., float]]] = [
    ("fixed", FixedTiming(prefill_ms=50, decode_ms=10), ref_fixed),
    ("fixed-int", FixedTiming(prefill_ms=7, decode_ms=3), ref_fixed),
    ("polynomial", PolynomialTiming(), ref_polynomial),
    ("linear", LinearTiming(c0=3.0, c_p=0.02, c_d=0.2, c_kv=1e-4, c_pp=1e-7), ref_linear),
    (
        "roofline",
        RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b")),
        ref_roofline,
    ),
    (
        "roofline-tp4",
        RooflineTiming(
            gpu=gpu_spec("H200"),
            model=model_arch("llama-3.1-70b"),
            tensor_parallel=4,
            weight_bytes=1,
            kv_bytes=1,
            overhead_ms=1.5,
            link_bandwidth_GBps=450,
        ),
        ref_roofline,
    ),
    (
        "table",
        TableTiming(
            prefill_tokens=[128, 1024, 8192],
            prefill_ms=[12.0, 30.0, 180.0],
            decode_batch=[1, 16, 256],
            decode_context=[512, 8192, 65536],
            decode_ms=[[6, 7, 12], [7, 10, 30], [12, 30, 200]],
        ),
        ref_table,
    ),
]
ROLES: tuple[Role, ...] = ("aggregated", "prefill", "decode")


def _rows(size: int, seed: int) -> list[Entry]:
    """A pass of ``size`` entries mixing decodes, prompt chunks and recomputes."""
    rng = np.random.default_rng(seed)
    rows: list[Entry] = []
    for _ in range(size):
        kind = int(rng.integers(0, 3))
        if kind == 0:  # a decode
            prompt = int(rng.integers(1, 16_000))
            out = int(rng.integers(1, 500))
            rows.append((1, prompt + out - 1, prompt, out, bool(rng.integers(0, 2))))
        elif kind == 1:  # a prompt chunk or whole prompt
            prompt = int(rng.integers(1, 100_000))
            start = int(rng.integers(0, prompt))
            chunk = int(rng.integers(1, min(8192, prompt - start) + 1))
            rows.append((chunk, start, prompt, 0, start + chunk == prompt))
        else:  # a recompute after preemption, possibly of one position
            prompt = int(rng.integers(1, 20_000))
            out = int(rng.integers(1, 300))
            start = int(rng.integers(0, prompt + out))
            chunk = int(rng.integers(1, prompt + out - start + 1))
            rows.append((chunk, start, prompt, out, start + chunk == prompt + out))
    return rows


SIZES = (0, 1, 2, 7, SMALL - 1, SMALL, SMALL + 1, 200)


EDGES: list[Entry] = [
    (1, 1000, 1000, 1, True),  # a decode right after the first token
    (1, 0, 1, 0, True),  # a one-token prompt: prefill, not decode
    (1, 520, 500, 21, False),  # one position of a recompute: a decode entry by §5.1
    (4, 100, 100, 3, True),  # the tail of a recompute past the prompt
    (512, 0, 2000, 0, False),  # a first prompt chunk
]


def _cases() -> Iterator[tuple[str, PassShape]]:
    for role in ROLES:
        for size in (1, len(EDGES), SMALL + 1):
            rows = (EDGES * SMALL)[:size]
            yield f"edges-{size}-{role}", shape(*rows, role=role, capacity=98_304)
        for i, row in enumerate(EDGES):
            yield f"edge-{i}-{role}", shape(row, role=role, capacity=98_304)
    for size in SIZES:
        for seed in range(3):
            for role in ROLES:
                yield f"{size}-{seed}-{role}", shape(*_rows(size, seed), role=role, capacity=98_304)


CASES = list(_cases())


@pytest.mark.parametrize(("name", "model", "reference"), MODELS, ids=[m[0] for m in MODELS])
def test_model_equals_the_spelled_out_formula_bit_for_bit(
    name: str, model: TimingModel, reference: Callable[..., float]
) -> None:
    for label, pass_ in CASES:
        assert model.pass_time_ms(pass_) == reference(model, pass_), (name, label)


def test_roofline_flops_and_bytes_equal_the_spelled_out_formula() -> None:
    for _, model, _ in MODELS:
        if isinstance(model, RooflineTiming):
            for label, pass_ in CASES:
                assert model.flops_and_bytes(pass_) == ref_flops_and_bytes(model, pass_), label


def test_linear_sample_regressors_equal_the_spelled_out_sums() -> None:
    for label, pass_ in CASES:
        sample = LinearSample.from_shape(pass_, time_ms=1.0)
        regressors = (
            sample.prefill_tokens,
            sample.decode_count,
            sample.kv_positions,
            sample.prefill_attention,
        )
        assert regressors == ref_regressors(pass_), label


@pytest.mark.parametrize("threshold", [0, 10**9])
def test_python_and_numpy_reductions_agree(threshold: int, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {(n, label): m.pass_time_ms(p) for n, m, _ in MODELS for label, p in CASES}
    monkeypatch.setattr(engines._timing, "SMALL_PASS_ENTRIES", threshold)
    monkeypatch.setattr(engines._timing_roofline, "SMALL_PASS_ENTRIES", threshold)
    for name, model, _ in MODELS:
        for label, pass_ in CASES:
            assert model.pass_time_ms(pass_) == expected[name, label], (name, label)


def _as_int32(s: PassShape) -> PassShape:
    return attrs.evolve(
        s,
        scheduled=s.scheduled.astype(np.int32),
        computed=s.computed.astype(np.int32),
        prompt_length=s.prompt_length.astype(np.int32),
        output_before=s.output_before.astype(np.int32),
    )


def test_int32_columns_give_the_int64_results_without_overflow() -> None:
    # n_r·(2·c_r + n_r) overflows int32 for these entries; the models widen before multiplying.
    rows: list[Entry] = [(8192, 200_000, 300_000, 0, False)] * (SMALL + 5)
    for size in (1, SMALL + 5):
        wide = shape(*rows[:size], capacity=1 << 20)
        for name, model, _ in MODELS:
            assert model.pass_time_ms(_as_int32(wide)) == model.pass_time_ms(wide), (name, size)


entries = st.tuples(
    st.integers(1, 8192),
    st.integers(0, 200_000),
    st.integers(1, 100_000),
    st.integers(0, 4096),
    st.booleans(),
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(entries, max_size=2 * SMALL),
    st.sampled_from(ROLES),
    st.integers(1, 10_000_000),
)
def test_every_model_equals_its_reference_on_arbitrary_passes(
    rows: list[Entry], role: Role, capacity: int
) -> None:
    pass_ = shape(*rows, role=role, capacity=capacity)
    for name, model, reference in MODELS:
        assert model.pass_time_ms(pass_) == reference(model, pass_), name


def test_roofline_constants_stay_out_of_equality_repr_and_copies() -> None:
    model = RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b"))
    twin = RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b"))
    pass_ = CASES[10][1]
    expected = model.pass_time_ms(pass_)  # derives and keeps the constants
    assert model == twin and hash(model) == hash(twin) and repr(model) == repr(twin)
    assert [f.name for f in attrs.fields(RooflineTiming)] == [
        "gpu",
        "model",
        "tensor_parallel",
        "weight_bytes",
        "kv_bytes",
        "compute_efficiency",
        "memory_efficiency",
        "overhead_ms",
        "link_bandwidth_GBps",
        "activation_bytes",
    ]
    for copied in (
        pickle.loads(pickle.dumps(model)),
        copy.deepcopy(model),
        copy.copy(model),
        attrs.evolve(model),
    ):
        assert copied == model
        assert copied.pass_time_ms(pass_) == expected


def test_evolved_roofline_derives_its_own_constants() -> None:
    model = RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b"))
    pass_ = CASES[10][1]
    model.pass_time_ms(pass_)
    slower = attrs.evolve(model, memory_efficiency=0.4, compute_efficiency=0.3)
    assert slower.pass_time_ms(pass_) == ref_roofline(slower, pass_)
    assert slower.pass_time_ms(pass_) > model.pass_time_ms(pass_)


def test_table_timing_has_only_its_five_public_fields() -> None:
    assert [f.name for f in attrs.fields(TableTiming)] == [
        "prefill_tokens",
        "prefill_ms",
        "decode_batch",
        "decode_context",
        "decode_ms",
    ]
