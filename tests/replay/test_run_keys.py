"""A run's configuration keys are declared once (``replay._config.RUN_KEYS``): the config file
accepts them, the command line adds a flag for each one that has it, and both give the same
configuration."""

from __future__ import annotations

import attrs

from replay._cli import build_parser
from replay._config import RUN_KEYS, ReplayConfig, resolve_config

# a value for each key with a flag, as a file gives it and as the command line gives it
VALUES = {
    "format": ("mooncake", "mooncake"),
    "workers": (3, "3"),
    "policy": ("kv_aware:temperature=0.5", "kv_aware:temperature=0.5"),
    "timing": ("fixed:prefill_ms=20", "fixed:prefill_ms=20"),
    "gpu": ("A100", "A100"),
    "model": ("qwen3-8b", "qwen3-8b"),
    "seed": (7, "7"),
    "slo": ("ttft=300", "ttft=300"),
    "output_dir": ("out", "out"),
    "stepping": ("pass", "pass"),
    "dispatch_latency_ms": (1.5, "1.5"),
    "token_times": ("runs", "runs"),
    "scheduler": ("vllm:admit_whole_prompt=true", "vllm:admit_whole_prompt=true"),
    "export": (["csv", "vllm"], "vllm,csv"),
    "autoscaler": ("hpa:metric=running,target=4", "hpa:metric=running,target=4"),
    "cold_start_s": (30, "30"),
}
PD_VALUES = {
    "topology": ("pd", "pd"),
    "prefill_workers": (2, "2"),
    "decode_workers": (3, "3"),
    "kv_bandwidth_gbps": (25.0, "25"),
}


def test_every_key_is_a_field_of_the_configuration() -> None:
    fields = {f.name for f in attrs.fields(ReplayConfig)} - {"origins"}
    assert {key.name for key in RUN_KEYS} == fields


def test_every_flagged_key_has_its_flag_and_a_value_here() -> None:
    options = set(vars(build_parser().parse_args(["replay"])))
    flagged = {key.name for key in RUN_KEYS if key.flag is not None}
    assert flagged <= options
    assert flagged == set(VALUES) | set(PD_VALUES)


def _both(values: dict[str, tuple[object, str]]) -> tuple[ReplayConfig, ReplayConfig]:
    from_file = resolve_config({k: v for k, (v, _) in values.items()}, source="run.toml")
    args = ["replay"]
    for key, (_, text) in values.items():
        args += ["--" + key.replace("_", "-"), text]
    parsed = build_parser().parse_args(args)
    flags = {key.name: getattr(parsed, key.name) for key in RUN_KEYS if key.flag is not None}
    return from_file, resolve_config(None, flags)


def test_a_file_and_the_flags_give_the_same_configuration() -> None:
    for values in (VALUES, {**PD_VALUES, "seed": (1, "1")}):
        from_file, from_flags = _both(values)
        assert from_file == from_flags
        assert from_file.origins != from_flags.origins  # where each was set differs


def test_every_workload_key_has_one_flag_and_the_flag_sets_it() -> None:
    from replay._config import WORKLOAD_FLAGS, WORKLOAD_OPTIONS

    assert list(WORKLOAD_FLAGS) == [w.key for w in WORKLOAD_OPTIONS]
    parsed = vars(build_parser().parse_args(["replay"]))
    assert {w.key for w in WORKLOAD_OPTIONS} <= set(parsed)
    given = build_parser().parse_args(["replay", "--speedup", "2", "--max-virtual-time", "5"])
    assert (given.speedup, given.max_virtual_time_s) == (2.0, 5.0)
