"""Building the P/D topology and policy from a resolved command-line configuration."""

from __future__ import annotations

import attrs
import pytest

from engines import FixedTiming, kv_bytes_per_token, model_arch
from loadgen import Workload
from policies import KVAware, LeastLoaded
from replay import KVLink, pd_phases, run
from replay.config import ComponentSpec, ConfigError, pd_from_config, resolve_config

from .pd_helpers import request


def test_a_config_gives_both_pools_its_engine_timing_and_model_link() -> None:
    config = resolve_config(
        {
            "timing": "fixed:prefill_ms=30,decode_ms=6",
            "policy": "kv_aware",
            "engine": {"num_blocks": 512},
        }
    )
    topology, policy = pd_from_config(
        config, prefill_workers=2, decode_workers=3, kv_bandwidth_gbps=40.0
    )
    assert (topology.prefill_workers, topology.decode_workers) == (2, 3)
    assert topology.prefill_engine.num_blocks == topology.decode_engine.num_blocks == 512
    assert (topology.prefill_engine.role, topology.decode_engine.role) == ("prefill", "decode")
    assert topology.prefill_timing == FixedTiming(prefill_ms=30.0, decode_ms=6.0)
    per_token = kv_bytes_per_token(model_arch("llama-3.1-8b"))
    assert topology.link == KVLink(kv_bytes_per_token=per_token, bandwidth_gbps=40.0)
    assert isinstance(policy.prefill, KVAware) and isinstance(policy.decode, LeastLoaded)
    result = run(
        Workload(requests=(request("a"), request("b", at_ms=3)), source="t", format="t"),
        topology=topology,
        policy=policy,
        seed=0,
    )
    assert result.summary.status_counts["completed"] == 2
    assert pd_phases(result).transfer_ms.count == 2


def test_the_roofline_tensor_parallel_degree_shards_the_link() -> None:
    config = resolve_config({"timing": "roofline:tensor_parallel=2", "gpu": "H100"})
    topology, _ = pd_from_config(config, kv_bandwidth_gbps=50.0)
    one_shard = kv_bytes_per_token(model_arch("llama-3.1-8b"), tensor_parallel=2)
    assert topology.link.kv_bytes_per_token == one_shard


def test_bad_pd_options_are_reported() -> None:
    config = resolve_config({"timing": "fixed", "engine": {"num_blocks": 64}})
    with pytest.raises(ValueError) as info:
        pd_from_config(config, kv_bandwidth_gbps=-1.0)
    assert str(info.value) == "KVLink.bandwidth_gbps must be a finite number > 0 or None, got -1.0"
    with pytest.raises(ValueError) as info:
        pd_from_config(config, decode_workers=0)
    assert str(info.value) == "Disaggregated.decode_workers must be an int >= 1, got 0"


def test_policy_options_reach_both_pools_and_unknown_ones_are_config_errors() -> None:
    config = resolve_config({"timing": "fixed", "policy": "kv_aware:temperature=0.5"})
    _, policy = pd_from_config(config)
    assert isinstance(policy.prefill, KVAware) and policy.prefill.temperature == 0.5
    bad = attrs.evolve(config, policy=ComponentSpec("kv_aware", {"weight": 2}))
    with pytest.raises(ConfigError) as info:
        pd_from_config(bad)
    assert str(info.value) == (
        "config: policy: kv_aware: pd_kv_aware() got an unexpected keyword argument 'weight'"
    )
