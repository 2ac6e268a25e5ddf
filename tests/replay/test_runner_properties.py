"""Properties of any replay: every request accounted once, no KV block left, same seed same run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engines import EngineConfig
from policies import KVAware, LeastLoaded, Random, RoundRobin, SessionAffinity

from ..policies.support import KeepingTopology, req, run_policy, topology

POLICIES = [RoundRobin, Random, LeastLoaded, KVAware, SessionAffinity]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list, int, int, int]:  # type: ignore[type-arg]
    count = draw(st.integers(1, 12))
    requests = []
    for i in range(count):
        prompt = draw(st.integers(1, 700))
        family = draw(st.integers(0, 2))
        ids = [100 * family + k for k in range(-(-prompt // 64))]
        requests.append(
            req(
                f"r{i}",
                prompt=prompt,
                output=draw(st.integers(0, 12)),
                at_ms=float(draw(st.integers(0, 200))),
                ids=ids if draw(st.booleans()) else None,
                conversation=f"c{family}",
            )
        )
    workers = draw(st.integers(1, 3))
    num_blocks = draw(st.integers(4, 40))
    policy = draw(st.integers(0, len(POLICIES) - 1))
    return requests, workers, num_blocks, policy


@settings(max_examples=30, deadline=None)
@given(scenarios(), st.integers(0, 3))
def test_any_replay_accounts_every_request_once_and_frees_every_block(
    scenario: tuple[list, int, int, int],  # type: ignore[type-arg]
    seed: int,
) -> None:
    requests, workers, num_blocks, which = scenario
    topo = KeepingTopology(inner=topology(workers, num_blocks=num_blocks))
    result = run_policy(POLICIES[which](), requests, topo=topo, seed=seed)
    assert [r.request_id for r in result.requests] == [r.id for r in requests]
    counts = result.summary.status_counts
    assert sum(counts.values()) == len(requests)
    # engines refuse only what can never fit; everything else completes
    assert counts["completed"] + counts["rejected"] == len(requests)
    for record in result.requests:
        if record.status == "rejected":
            assert record.rejection_reason == "exceeds_kv_capacity"
    assert topo.kv_blocks_used() == [0] * workers
    assert topo.pending_offers() == [0] * workers
    again = run_policy(
        POLICIES[which](),
        requests,
        topo=KeepingTopology(inner=topology(workers, num_blocks=num_blocks)),
        seed=seed,
    )
    assert again.requests == result.requests


def test_a_request_too_large_for_every_engine_is_rejected_not_lost() -> None:
    topo = KeepingTopology(
        inner=topology(2), configs={1: EngineConfig(num_blocks=256, context_length=100)}
    )
    result = run_policy(KVAware(), [req("big", prompt=64 * 300)], topo=topo)
    assert [(r.status, r.rejection_reason) for r in result.requests] == [
        ("rejected", "exceeds_kv_capacity")
    ]
