"""The GPU and model catalog, and KV bytes per token (REFERENCE-engine §5.5, §6.3)."""

from __future__ import annotations

import pytest

from engines import (
    GPUS,
    MODELS,
    GPUSpec,
    ModelArch,
    TimingConfigError,
    gpu_spec,
    kv_bytes_per_token,
    model_arch,
)


@pytest.mark.parametrize(
    ("name", "tflops", "tb_per_s", "gb"),
    [
        ("A100", 312, 2.039, 80),
        ("H100", 989, 3.35, 80),
        ("H200", 989, 4.8, 141),
        ("B200", 2250, 8.0, 180),
        ("L40S", 362.05, 0.864, 48),
    ],
)
def test_gpu_figures_are_the_published_dense_bf16_ones(
    name: str, tflops: float, tb_per_s: float, gb: float
) -> None:
    spec = gpu_spec(name)
    assert spec.bf16_flops == pytest.approx(tflops * 1e12)
    assert spec.memory_bandwidth_bytes_per_s == pytest.approx(tb_per_s * 1e12)
    assert spec.memory_bytes == pytest.approx(gb * 1e9)


@pytest.mark.parametrize(
    ("name", "dims"),
    [
        ("llama-3.1-8b", (32, 4096, 32, 8, 128, 14336, 128256, 131072)),
        ("llama-3.1-70b", (80, 8192, 64, 8, 128, 28672, 128256, 131072)),
        ("qwen3-8b", (36, 4096, 32, 8, 128, 12288, 151936, 40960)),
        ("qwen3-32b", (64, 5120, 64, 8, 128, 25600, 151936, 40960)),
    ],
)
def test_model_dimensions_match_their_config_json(name: str, dims: tuple[int, ...]) -> None:
    m = model_arch(name)
    assert (
        m.num_layers,
        m.hidden_size,
        m.num_heads,
        m.num_kv_heads,
        m.head_dim,
        m.ffn_size,
        m.vocab_size,
        m.context_length,
    ) == dims


def test_catalog_contains_exactly_the_documented_entries() -> None:
    assert tuple(GPUS) == ("A100", "H100", "H200", "B200", "L40S")
    assert tuple(MODELS) == ("llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-32b")


def test_lookup_is_case_insensitive() -> None:
    assert gpu_spec("h100") is GPUS["H100"]
    assert gpu_spec(" l40s ") is GPUS["L40S"]
    assert model_arch("Llama-3.1-8B") is MODELS["llama-3.1-8b"]
    assert model_arch("QWEN3-32B") is MODELS["qwen3-32b"]


def test_unknown_gpu_lists_the_known_names() -> None:
    with pytest.raises(TimingConfigError) as info:
        gpu_spec("V100")
    assert str(info.value) == "unknown GPU 'V100'; known: A100, B200, H100, H200, L40S"


def test_unknown_model_lists_the_known_names() -> None:
    with pytest.raises(TimingConfigError) as info:
        model_arch("llama-2-7b")
    assert str(info.value) == (
        "unknown model 'llama-2-7b'; known: llama-3.1-70b, llama-3.1-8b, qwen3-32b, qwen3-8b"
    )


def test_catalog_cannot_be_modified() -> None:
    with pytest.raises(TypeError):
        GPUS["X"] = GPUS["H100"]  # type: ignore[index]


def test_unknown_name_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        model_arch("nope")


def test_kv_bytes_per_token_of_the_p_d_example_is_262144() -> None:
    # §9d: 64 layers, 8 KV heads, head dim 128, bf16, TP 1.
    assert kv_bytes_per_token(model_arch("qwen3-32b")) == 2 * 64 * 8 * 128 * 2 == 262_144


def test_kv_bytes_per_token_is_per_tensor_parallel_shard() -> None:
    assert kv_bytes_per_token(model_arch("qwen3-32b"), tensor_parallel=2) == 131_072
    assert kv_bytes_per_token(model_arch("qwen3-32b"), tensor_parallel=8) == 2 * 64 * 128 * 2


def test_kv_bytes_per_token_keeps_one_head_per_shard_beyond_h_kv() -> None:
    assert kv_bytes_per_token(model_arch("llama-3.1-70b"), tensor_parallel=16) == 2 * 80 * 128 * 2


def test_kv_bytes_per_token_scales_with_dtype() -> None:
    assert kv_bytes_per_token(model_arch("llama-3.1-8b"), dtype_bytes=1) == 2 * 32 * 8 * 128


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tensor_parallel": 0}, "tensor_parallel must be an integer >= 1, got 0"),
        ({"tensor_parallel": 2.0}, "tensor_parallel must be an integer >= 1, got 2.0"),
        (
            {"tensor_parallel": 3},
            "tensor_parallel 3 does not split the 8 KV heads of qwen3-8b evenly",
        ),
        (
            {"tensor_parallel": 12},
            "tensor_parallel 12 does not split the 8 KV heads of qwen3-8b evenly",
        ),
        ({"dtype_bytes": 0}, "dtype_bytes must be a finite number > 0, got 0"),
    ],
)
def test_kv_bytes_per_token_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TimingConfigError) as info:
        kv_bytes_per_token(model_arch("qwen3-8b"), **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_model_arch_rejects_heads_not_grouped_evenly() -> None:
    with pytest.raises(TimingConfigError) as info:
        ModelArch("odd", 1, 64, 6, 4, 16, 128, 100, 1024)
    assert str(info.value) == "ModelArch.num_heads (6) must be a multiple of num_kv_heads (4)"


def test_model_arch_rejects_non_positive_dimensions() -> None:
    with pytest.raises(TimingConfigError) as info:
        ModelArch("bad", 0, 64, 4, 4, 16, 128, 100, 1024)
    assert str(info.value) == "ModelArch.num_layers must be an integer > 0, got 0"


def test_gpu_spec_rejects_non_positive_figures() -> None:
    with pytest.raises(TimingConfigError) as info:
        GPUSpec("bad", 1e12, -1.0, 1e9)
    assert str(info.value) == (
        "GPUSpec.memory_bandwidth_bytes_per_s must be a finite number > 0, got -1.0"
    )
