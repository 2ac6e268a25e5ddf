"""EngineConfig validation (REFERENCE-engine §2)."""

from __future__ import annotations

import attrs
import pytest

from engines import DEFAULT_CONTEXT_LENGTH, EngineConfig, EngineConfigError, VLLMScheduler


def test_defaults_follow_the_reference() -> None:
    config = EngineConfig(num_blocks=100)
    assert (config.block_size, config.max_num_batched_tokens, config.max_num_seqs) == (
        64,
        8192,
        256,
    )
    assert config.enable_chunked_prefill and config.enable_prefix_caching
    assert config.watermark_fraction == 0.0 and config.watermark_blocks == 0
    assert config.role == "aggregated"
    assert config.context_length == DEFAULT_CONTEXT_LENGTH


def test_watermark_blocks_rounds_down() -> None:
    assert EngineConfig(num_blocks=99, watermark_fraction=0.01).watermark_blocks == 0
    assert EngineConfig(num_blocks=250, watermark_fraction=0.01).watermark_blocks == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_blocks": 0}, "EngineConfig.num_blocks must be an int >= 1, got 0"),
        ({"num_blocks": 2.0}, "EngineConfig.num_blocks must be an int >= 1, got 2.0"),
        ({"num_blocks": True}, "EngineConfig.num_blocks must be an int >= 1, got True"),
        ({"num_blocks": 1, "block_size": 0}, "EngineConfig.block_size must be an int >= 1, got 0"),
        (
            {"num_blocks": 1, "max_num_seqs": -1},
            "EngineConfig.max_num_seqs must be an int >= 1, got -1",
        ),
        (
            {"num_blocks": 1, "watermark_fraction": 1.0},
            "EngineConfig.watermark_fraction must be a number in [0, 1), got 1.0",
        ),
        (
            {"num_blocks": 1, "watermark_fraction": float("nan")},
            "EngineConfig.watermark_fraction must be a number in [0, 1), got nan",
        ),
        (
            {"num_blocks": 1, "enable_chunked_prefill": 1},
            "EngineConfig.enable_chunked_prefill must be a bool, got 1",
        ),
        (
            {"num_blocks": 1, "role": "both"},
            "EngineConfig.role must be one of 'aggregated', 'prefill', 'decode', got 'both'",
        ),
    ],
)
def test_bad_fields_raise_exact_messages(options: dict[str, object], message: str) -> None:
    with pytest.raises(EngineConfigError) as info:
        EngineConfig(**options)  # type: ignore[arg-type]
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_fields_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        EngineConfig(100)  # type: ignore[call-arg]


def test_the_echo_leaves_out_the_default_scheduler_and_a_fidelity_option_at_its_default() -> None:
    plain = EngineConfig(num_blocks=10)
    assert "scheduler" not in plain.as_dict()
    assert "reserve_one_per_pass" not in plain.as_dict()
    assert plain.as_dict() == {
        k: v
        for k, v in attrs.asdict(plain, recurse=False).items()
        if k not in ("scheduler", "reserve_one_per_pass")
    }
    assert EngineConfig(num_blocks=10, reserve_one_per_pass=True).as_dict()["reserve_one_per_pass"]
    # the vLLM scheduler with default options is the default: not echoed either
    assert "scheduler" not in EngineConfig(num_blocks=10, scheduler=VLLMScheduler()).as_dict()
    whole = EngineConfig(num_blocks=10, scheduler=VLLMScheduler(admit_whole_prompt=True))
    assert whole.as_dict()["scheduler"] == {"name": "vllm", "admit_whole_prompt": True}
    both = VLLMScheduler(admit_whole_prompt=True, evict_empty_first=True)
    assert EngineConfig(num_blocks=10, scheduler=both).as_dict()["scheduler"] == {
        "name": "vllm",
        "admit_whole_prompt": True,
        "evict_empty_first": True,
    }


def test_a_scheduler_is_checked_when_the_config_is_built() -> None:
    with pytest.raises(EngineConfigError) as info:
        EngineConfig(num_blocks=10, scheduler="vllm")  # type: ignore[arg-type]
    assert str(info.value) == (
        "EngineConfig.scheduler must be a Scheduler (name, options, make_cache, bind), got 'vllm'"
    )
    with pytest.raises(EngineConfigError) as info:
        VLLMScheduler(admit_whole_prompt=1)  # type: ignore[arg-type]
    assert str(info.value) == "VLLMScheduler.admit_whole_prompt must be a bool, got 1"
