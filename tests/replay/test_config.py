"""Replay configuration: specs, files, flag overrides, the name->object mapping, KV sizing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engines import EngineConfig, FixedTiming, VLLMScheduler
from policies import KVAware, LeastLoaded, RoundRobin, SessionAffinity
from replay import SLO
from replay.config import (
    POLICIES,
    TIMINGS,
    ComponentSpec,
    ConfigError,
    ReplayConfig,
    kv_blocks_for,
    load_config_file,
    parse_spec,
    resolve_config,
)


def test_spec_parses_name_and_typed_options() -> None:
    spec = parse_spec("kv_aware:temperature=0.5,prefill_weight=2, flag=true ,label=x", what="p")
    assert spec == ComponentSpec(
        "kv_aware", {"temperature": 0.5, "prefill_weight": 2, "flag": True, "label": "x"}
    )
    assert parse_spec("round_robin", what="p") == ComponentSpec("round_robin")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (":a=1", "--policy: empty name in ':a=1'"),
        ("kv_aware:temperature", "--policy: 'temperature' is not key=value"),
        ("kv_aware:a=1,a=2", "--policy: option 'a' is given twice"),
    ],
)
def test_bad_spec_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(text, what="--policy")
    assert str(info.value) == message


def test_defaults_are_four_engines_roofline_on_h100_llama_8b_round_robin() -> None:
    config = resolve_config()
    assert config == ReplayConfig()
    assert config.workers == 4
    assert (config.gpu, config.model) == ("H100", "llama-3.1-8b")
    assert config.timing == ComponentSpec("roofline")
    assert isinstance(config.build_policy(), RoundRobin)
    assert type(config.build_timing()).__name__ == "RooflineTiming"
    assert config.build_engine() == EngineConfig(num_blocks=kv_blocks_for("H100", "llama-3.1-8b"))


def test_kv_blocks_for_matches_a_hand_computation() -> None:
    # llama-3.1-8b: linear params 32*(2*4096*32*128 + 2*4096*8*128 + 3*4096*14336),
    # embedding + head 2*4096*128256; bf16 weights; KV 2*32*8*128*2 = 131072 B per token.
    params = 32 * (2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336) + 2 * 4096 * 128256
    expected = math.floor((80e9 * 0.9 - 2 * params) / (131072 * 64))
    assert kv_blocks_for("H100", "llama-3.1-8b") == expected == 6668
    assert kv_blocks_for("H100", "llama-3.1-8b", block_size=16) == math.floor(
        (80e9 * 0.9 - 2 * params) / (131072 * 16)
    )


def test_kv_blocks_shard_weights_and_kv_over_tensor_parallel_gpus() -> None:
    # llama-3.1-70b on H200 with TP 2: half the weights and half the KV heads per GPU.
    params = 80 * (2 * 8192 * 64 * 128 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672) + 2 * 8192 * 128256
    kv_per_token_per_shard = 2 * 80 * 4 * 128 * 2
    expected = math.floor((141e9 * 0.9 - 2 * params / 2) / (kv_per_token_per_shard * 64))
    assert kv_blocks_for("H200", "llama-3.1-70b", tensor_parallel=2) == expected
    config = resolve_config(
        overrides={"gpu": "H200", "model": "llama-3.1-70b", "timing": "roofline:tensor_parallel=2"}
    )
    assert config.build_engine().num_blocks == expected
    with pytest.raises(ValueError, match=r"^model llama-3\.1-70b does not fit on one H200"):
        kv_blocks_for("H200", "llama-3.1-70b")


def test_every_policy_and_timing_name_builds() -> None:
    for name in POLICIES:
        assert ReplayConfig(policy=ComponentSpec(name)).build_policy() is not None
    linear = {"c0": 1, "c_p": 0.01, "c_d": 0.1, "c_kv": 0.0001}
    table = {
        "prefill_tokens": [1, 1000],
        "prefill_ms": [5, 50],
        "decode_batch": [1, 8],
        "decode_context": [1, 1000],
        "decode_ms": [[5, 6], [7, 8]],
    }
    options = {"linear": linear, "table": table}
    for name in TIMINGS:
        timing = ReplayConfig(timing=ComponentSpec(name, options.get(name, {}))).build_timing()
        assert hasattr(timing, "pass_time_ms")


def test_fixed_timing_defaults_to_the_reference_50_10() -> None:
    assert ReplayConfig(timing=ComponentSpec("fixed")).build_timing() == FixedTiming(50.0, 10.0)


def test_table_timing_reads_a_json_file(tmp_path: Path) -> None:
    table = tmp_path / "t.json"
    table.write_text(
        '{"prefill_tokens": [1, 1000], "prefill_ms": [5, 50], "decode_batch": [1, 8],'
        ' "decode_context": [1, 1000], "decode_ms": [[5, 6], [7, 8]]}'
    )
    timing = resolve_config(overrides={"timing": f"table:file={table}"}).build_timing()
    assert type(timing).__name__ == "TableTiming"


def test_session_affinity_takes_a_named_fallback() -> None:
    policy = ReplayConfig(
        policy=ComponentSpec("session_affinity", {"fallback": "kv_aware"})
    ).build_policy()
    assert isinstance(policy, SessionAffinity)
    assert isinstance(policy.fallback, KVAware)
    assert isinstance(
        ReplayConfig(policy=ComponentSpec("session_affinity")).build_policy().fallback,  # type: ignore[attr-defined]
        LeastLoaded,
    )
    with pytest.raises(ConfigError) as info:
        ReplayConfig(policy=ComponentSpec("session_affinity", {"fallback": "x"})).build_policy()
    assert str(info.value) == (
        "policy: session_affinity: fallback: unknown policy 'x'; "
        "known: round_robin, random, least_loaded, kv_aware"
    )


def test_file_values_and_tables_resolve(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(
        'trace = "t.jsonl"\nformat = "mooncake"\nworkers = 2\nseed = 4\n'
        'gpu = "A100"\nmodel = "qwen3-8b"\ngpu_memory_utilization = 0.8\n'
        '[policy]\nname = "kv_aware"\ntemperature = 0.25\n'
        '[timing]\ntype = "fixed"\nprefill_ms = 20\n'
        "[slo]\nttft = 300\ne2el = 9000\n"
        '[scheduler]\nname = "vllm"\nadmit_whole_prompt = true\nevict_empty_first = true\n'
        "[engine]\nblock_size = 16\n"
    )
    config = resolve_config(load_config_file(path), source=str(path))
    assert config.trace == "t.jsonl"
    assert config.format == "mooncake"
    assert config.workers == 2
    assert config.seed == 4
    assert config.policy == ComponentSpec("kv_aware", {"temperature": 0.25})
    assert config.timing == ComponentSpec("fixed", {"prefill_ms": 20})
    assert config.slo == SLO(ttft_ms=300, e2e_ms=9000)
    engine = config.build_engine()
    assert engine.block_size == 16
    assert engine.scheduler == VLLMScheduler(admit_whole_prompt=True, evict_empty_first=True)
    assert config.as_json()["scheduler"] == {
        "name": "vllm",
        "admit_whole_prompt": True,
        "evict_empty_first": True,
    }
    assert engine.num_blocks == kv_blocks_for(
        "A100", "qwen3-8b", block_size=16, gpu_memory_utilization=0.8
    )


def test_overrides_win_key_by_key_and_none_means_not_given() -> None:
    config = resolve_config(
        {"workers": 2, "seed": 1, "policy": "random"},
        {"workers": 8, "seed": None, "policy": None},
    )
    assert (config.workers, config.seed, config.policy.name) == (8, 1, "random")


def test_as_json_reads_back_to_the_same_config(tmp_path: Path) -> None:
    config = resolve_config(
        overrides={
            "policy": "kv_aware:temperature=0.5",
            "timing": "fixed:prefill_ms=20",
            "slo": "ttft=100",
            "output_dir": "out",
        }
    )
    echo = config.as_json()
    assert "output_dir" not in echo
    assert resolve_config(echo) == ReplayConfig(
        policy=config.policy, timing=config.timing, slo=config.slo
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"workers": 0}, "run.toml: workers: must be an integer >= 1, got 0"),
        ({"workers": True}, "run.toml: workers: must be an integer >= 1, got True"),
        ({"seed": -1}, "run.toml: seed: must be an integer >= 0, got -1"),
        ({"gpu": ""}, "run.toml: gpu: must be a non-empty string, got ''"),
        ({"policy": 3}, "run.toml: policy: must be a string or a table, got 3"),
        ({"timing": {"prefill_ms": 1}}, "run.toml: timing: the table needs a 'type' string"),
        ({"slo": {"ttft": -5}}, "run.toml: slo: ttft must be a finite number >= 0 (ms), got -5"),
        ({"slo": "ttft=1,ttft=2"}, "run.toml: slo: ttft is given twice"),
        ({"engine": 5}, "run.toml: engine: must be a table of EngineConfig fields"),
        (
            {"gpu_memory_utilization": 1.5},
            "run.toml: gpu_memory_utilization: must be a number in (0, 1], got 1.5",
        ),
        (
            {"model": "llama-3.1-70b"},
            "run.toml: model: llama-3.1-70b does not fit on one H100 with room for KV",
        ),
        (
            {"policy": {"name": "kv_aware", "temperature": -1}},
            "run.toml: policy: kv_aware: temperature: must be finite and >= 0, got -1",
        ),
        (
            {"timing": "linear"},
            "run.toml: timing: linear: missing 4 required keyword-only arguments: "
            "'c0', 'c_p', 'c_d', and 'c_kv'",
        ),
    ],
)
def test_bad_values_name_the_file_and_key(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config(values, source="run.toml")
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_schema_keys_of_a_written_config_are_ignored() -> None:
    config = resolve_config({"schema_version": 1, "simclock_version": "0.0.0", "workers": 3})
    assert config.workers == 3


def test_load_config_file_accepts_a_utf8_bom_json(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(b'\xef\xbb\xbf{"workers": 2}')
    assert load_config_file(path) == {"workers": 2}


def test_pd_keys_resolve_and_echo_without_workers() -> None:
    config = resolve_config(
        {"topology": "pd", "prefill_workers": 2, "decode_workers": 3, "kv_bandwidth_gbps": 40}
    )
    assert (config.topology, config.prefill_workers, config.decode_workers) == ("pd", 2, 3)
    assert config.kv_bandwidth_gbps == 40.0
    echo = config.as_json()
    assert "workers" not in echo
    assert resolve_config(echo) == config


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"topology": "ring"}, "run.toml: topology: must be one of aggregated, pd, got 'ring'"),
        (
            {"topology": "pd", "kv_bandwidth_gbps": 0},
            "run.toml: kv_bandwidth_gbps: must be a finite number > 0 (GB/s), got 0",
        ),
        (
            {"topology": "pd", "prefill_workers": 0},
            "run.toml: prefill_workers: must be an integer >= 1, got 0",
        ),
        ({"prefill_workers": 2}, "run.toml: prefill_workers: only used with the pd topology"),
        (
            {"topology": "pd", "workers": 2},
            "run.toml: workers: not used by the pd topology (see prefill_workers)",
        ),
    ],
)
def test_bad_pd_values_name_the_file_and_key(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config(values, source="run.toml")
    assert str(info.value) == message
