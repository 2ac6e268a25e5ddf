"""RooflineTiming: REFERENCE-engine §5.5."""

from __future__ import annotations

import pytest

from engines import GPUSpec, RooflineTiming, TimingConfigError, gpu_spec, model_arch

from .test_timing_shapes import shape

LLAMA_8B = model_arch("llama-3.1-8b")
H200 = gpu_spec("H200")
IDEAL = RooflineTiming(gpu=H200, model=LLAMA_8B, compute_efficiency=1.0, memory_efficiency=1.0)
DECODE_AT_1000 = (1, 1000, 1000, 1, True)
PREFILL_1000 = (1000, 0, 1000, 0, True)


def test_llama_8b_linear_parameters_are_6_98e9() -> None:
    assert LLAMA_8B.linear_params == 6_979_321_856
    assert LLAMA_8B.linear_params / 1e9 == pytest.approx(6.98, abs=0.005)


def test_one_decode_at_context_1000_moves_15_1_gb_in_3_15_ms() -> None:
    _, moved = IDEAL.flops_and_bytes(shape(DECODE_AT_1000))
    assert moved / 1e9 == pytest.approx(15.14, abs=0.005)
    assert IDEAL.pass_time_ms(shape(DECODE_AT_1000)) == pytest.approx(3.15, abs=0.005)


def test_1000_token_prefill_is_14_2_tflop_in_14_4_ms() -> None:
    flops, moved = IDEAL.flops_and_bytes(shape(PREFILL_1000))
    assert flops / 1e12 == pytest.approx(14.22, abs=0.005)
    assert flops / H200.bf16_flops > moved / H200.memory_bandwidth_bytes_per_s  # compute-bound
    assert IDEAL.pass_time_ms(shape(PREFILL_1000)) == pytest.approx(14.4, abs=0.05)


def test_flops_and_bytes_follow_the_formula_term_by_term() -> None:
    m = LLAMA_8B
    pass_ = shape((3, 10, 13, 0, False), (1, 20, 15, 6, True))
    flops, moved = IDEAL.flops_and_bytes(pass_)
    attention = (3 * 10 + 3 * 4 / 2) + (1 * 20 + 1)
    expected_flops = (
        2 * m.linear_params * 4
        + 2 * m.head_params * 1
        + 4 * m.num_layers * m.num_heads * m.head_dim * attention
    )
    kv_bpt = 2 * m.num_layers * m.num_kv_heads * m.head_dim * 2
    expected_bytes = (m.linear_params + m.head_params) * 2 + kv_bpt * (13 + 21)
    assert flops == pytest.approx(expected_flops, rel=1e-12)
    assert moved == pytest.approx(expected_bytes, rel=1e-12)


def test_efficiencies_divide_their_roofs() -> None:
    model = RooflineTiming(gpu=H200, model=LLAMA_8B, memory_efficiency=0.5)
    assert model.pass_time_ms(shape(DECODE_AT_1000)) == pytest.approx(
        2 * IDEAL.pass_time_ms(shape(DECODE_AT_1000))
    )


def test_default_efficiencies_are_0_6_and_0_8() -> None:
    model = RooflineTiming(gpu=H200, model=LLAMA_8B)
    assert (model.compute_efficiency, model.memory_efficiency) == (0.6, 0.8)


def test_tensor_parallel_divides_both_roofs() -> None:
    tp2 = RooflineTiming(
        gpu=H200,
        model=LLAMA_8B,
        tensor_parallel=2,
        compute_efficiency=1.0,
        memory_efficiency=1.0,
    )
    for entry in (DECODE_AT_1000, PREFILL_1000):
        assert tp2.pass_time_ms(shape(entry)) == pytest.approx(IDEAL.pass_time_ms(shape(entry)) / 2)


def test_overhead_is_added_to_every_non_empty_pass() -> None:
    model = RooflineTiming(
        gpu=H200, model=LLAMA_8B, overhead_ms=2.0, compute_efficiency=1.0, memory_efficiency=1.0
    )
    assert model.pass_time_ms(shape(DECODE_AT_1000)) == pytest.approx(
        2.0 + IDEAL.pass_time_ms(shape(DECODE_AT_1000))
    )
    assert model.pass_time_ms(shape()) == 0.0


def test_all_reduce_time_is_added_when_a_link_is_given() -> None:
    base = RooflineTiming(gpu=H200, model=LLAMA_8B, tensor_parallel=2)
    linked = RooflineTiming(gpu=H200, model=LLAMA_8B, tensor_parallel=2, link_bandwidth_GBps=450)
    comm_ms = 2 * 32 * 2 * (1 / 2) * (1000 * 4096 * 2) / 450e9 * 1000
    assert linked.pass_time_ms(shape(PREFILL_1000)) == pytest.approx(
        base.pass_time_ms(shape(PREFILL_1000)) + comm_ms
    )


def test_all_reduce_time_is_zero_without_tensor_parallelism() -> None:
    linked = RooflineTiming(gpu=H200, model=LLAMA_8B, link_bandwidth_GBps=450)
    base = RooflineTiming(gpu=H200, model=LLAMA_8B)
    assert linked.pass_time_ms(shape(PREFILL_1000)) == base.pass_time_ms(shape(PREFILL_1000))


def test_prefill_role_leaves_out_decode_entries() -> None:
    prefill_role = RooflineTiming(
        gpu=H200, model=LLAMA_8B, compute_efficiency=1.0, memory_efficiency=1.0
    )
    mixed = shape(DECODE_AT_1000, PREFILL_1000, role="prefill")
    assert prefill_role.pass_time_ms(mixed) == IDEAL.pass_time_ms(shape(PREFILL_1000))


def test_longer_context_decodes_take_longer() -> None:
    short = IDEAL.pass_time_ms(shape(*[DECODE_AT_1000] * 64))
    long = IDEAL.pass_time_ms(shape(*[(1, 30000, 30000, 1, True)] * 64))
    assert long > short


def test_empty_pass_costs_nothing() -> None:
    assert IDEAL.pass_time_ms(shape()) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"compute_efficiency": 1.5},
            "RooflineTiming.compute_efficiency must be in (0, 1], got 1.5",
        ),
        (
            {"memory_efficiency": 0.0},
            "RooflineTiming.memory_efficiency must be a finite number > 0, got 0.0",
        ),
        ({"tensor_parallel": 0}, "tensor_parallel must be an integer >= 1, got 0"),
        (
            {"tensor_parallel": 3},
            "tensor_parallel 3 does not split the 8 KV heads of llama-3.1-8b evenly",
        ),
        (
            {"overhead_ms": -1.0},
            "RooflineTiming.overhead_ms must be a finite number >= 0, got -1.0",
        ),
        (
            {"link_bandwidth_GBps": 0},
            "RooflineTiming.link_bandwidth_GBps must be a finite number > 0, got 0",
        ),
    ],
)
def test_bad_parameters_raise_with_exact_message(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TimingConfigError) as info:
        RooflineTiming(gpu=H200, model=LLAMA_8B, **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_gpu_must_be_a_spec() -> None:
    with pytest.raises(TypeError):
        RooflineTiming(gpu="H200", model=LLAMA_8B)  # type: ignore[arg-type]


def test_custom_gpu_spec_is_accepted() -> None:
    toy = GPUSpec("toy", 1e12, 1e9, 1e9)
    model = RooflineTiming(gpu=toy, model=LLAMA_8B, compute_efficiency=1, memory_efficiency=1)
    _, moved = model.flops_and_bytes(shape(DECODE_AT_1000))
    assert model.pass_time_ms(shape(DECODE_AT_1000)) == pytest.approx(moved / 1e9 * 1000)
