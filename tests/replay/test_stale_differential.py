"""Stale information keeps macro-stepping indistinguishable from one deadline per pass.

The scenarios of ``test_macro_differential`` replayed with delayed and periodic views and
delayed KV events (``replay.Faults``): ``requests.jsonl``, ``summary.json``, ``config.json``,
every quiet lifecycle event and what the policy reads from its (stale) views must be equal
byte for byte in both steppings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import EngineConfig, FixedTiming, TokenizerStage
from policies import pd_policy
from replay import Aggregated, Disaggregated, Faults, KVLink

from ..policies.support import req, workload
from .test_macro_differential import POLICIES, TIMINGS, Watcher, assert_same, scenarios

DELAYS_MS = [0.0, 0.0, 5.0, 17.0, 40.0, 100.0]


@st.composite
def stale_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    scenario = draw(scenarios())
    faults = Faults(
        view_delay_ms=draw(st.sampled_from(DELAYS_MS)),
        view_period_ms=draw(st.sampled_from(DELAYS_MS)),
        kv_event_delay_ms=draw(st.sampled_from(DELAYS_MS)),
    )
    return {**scenario, "faults": faults}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stale_scenarios())
def test_stale_views_and_kv_events_match_per_pass_steps(scenario: dict[str, Any]) -> None:
    topology = Aggregated(
        workers=scenario["workers"],
        engine=scenario["config"],
        timing=TIMINGS[scenario["timing"]](),
    )
    tokenizer = (
        TokenizerStage(workers=1, base_ms=2.0, per_input_token_us=3.0)
        if scenario["tokenizer"]
        else None
    )
    assert_same(
        workload(scenario["requests"]),
        POLICIES[scenario["policy"]],
        topology=topology,
        seed=scenario["seed"],
        tokenizer=tokenizer,
        faults=scenario["faults"],
    )


def test_long_decodes_with_delayed_views_match() -> None:
    requests = [
        req(f"r{i}", prompt=300 + 37 * i, output=200 + 13 * i, at_ms=7.0 * i) for i in range(8)
    ]
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=2000, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    for faults in (
        Faults(view_delay_ms=25.0),
        Faults(view_period_ms=20.0),
        Faults(view_delay_ms=15.0, view_period_ms=10.0),
        Faults(kv_event_delay_ms=30.0),
    ):
        assert_same(workload(requests), Watcher, topology=topology, faults=faults)


@pytest.mark.parametrize(
    "faults",
    [
        Faults(view_delay_ms=20.0),
        Faults(view_period_ms=15.0, view_delay_ms=5.0),
        Faults(kv_event_delay_ms=25.0),
    ],
)
@pytest.mark.parametrize("order", ["source_first", "destination_first"])
def test_pd_topologies_with_stale_information_match(order: str, faults: Faults) -> None:
    rng = np.random.default_rng(5)
    requests = [
        req(
            f"r{i}",
            prompt=int(rng.integers(50, 900)),
            output=int(rng.integers(1, 150)),
            at_ms=float(rng.integers(0, 300)),
            ids=list(range(7, 22)) if i % 2 else None,
        )
        for i in range(12)
    ]
    topology = Disaggregated(
        prefill_workers=2,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=300, block_size=64),
        decode_engine=EngineConfig(num_blocks=300, block_size=64),
        prefill_timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
        decode_timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
        link=KVLink(kv_bytes_per_token=262144.0, bandwidth_gbps=50.0),
        order=order,
    )
    assert_same(workload(requests), lambda: pd_policy("kv_aware"), topology=topology, faults=faults)
