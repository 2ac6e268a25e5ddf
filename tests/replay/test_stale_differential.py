"""Stale information keeps macro-stepping indistinguishable from one deadline per pass.

The scenarios of ``test_macro_differential`` replayed with delayed and periodic views and
delayed KV events (``replay.Faults``): ``requests.jsonl``, ``summary.json``, ``config.json``,
every quiet lifecycle event and what the policy reads from its (stale) views must be equal
byte for byte in both steppings.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import EngineConfig, FixedTiming
from policies import pd_policy
from replay import Aggregated, Faults, run

from ..policies.support import req, workload
from .test_macro_differential import (
    Watcher,
    assert_same,
    assert_same_scenario,
    pd_requests,
    pd_topology,
    scenarios,
)

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
    assert_same_scenario(scenario, faults=scenario["faults"])


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
    requests = pd_requests(5)
    topology = pd_topology(order, prefill_workers=2)
    assert_same(workload(requests), lambda: pd_policy("kv_aware"), topology=topology, faults=faults)


@pytest.mark.parametrize("period_ms", [17.0, 100.0])
def test_periodic_views_do_not_keep_a_quiescent_run_alive(period_ms: float) -> None:
    """A request that can never fit (899 tokens, 12 blocks of 64) is held by a policy that
    waits on its dispatch; once nothing else can happen the run ends, ``quiescent``: with
    views refreshed on a period, at the first snapshot after the instant it ends without them
    (the period's snapshots stop there instead of keeping the clock moving until the
    no-progress budget is spent), and both steppings write the same bytes."""
    requests = [
        req("r0", prompt=216, output=110, at_ms=278.0, ids=[0, 1, 2, 3]),
        req("r1", prompt=899, output=1, at_ms=251.0, ids=list(range(15))),
        req("r2", prompt=80, output=74, at_ms=143.0),
    ]
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=12, block_size=64, max_num_batched_tokens=512),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    faults = Faults(view_period_ms=period_ms)
    assert_same(workload(requests), Watcher, topology=topology, faults=faults)
    ends = []
    for options in ({}, {"faults": faults}):
        result = run(workload(requests), topology=topology, policy=Watcher(), **options)
        assert result.summary.status_counts["unplaced"] == 1
        assert result.summary.status_counts["completed"] == 2
        ends.append(result.meta.virtual_duration_ms)
    assert ends[1] == math.ceil(ends[0] / period_ms) * period_ms < 2_000.0
