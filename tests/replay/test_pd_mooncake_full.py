"""End to end: the whole bundled Mooncake conversation trace on a disaggregated topology.

All 12,031 requests, unchanged, on two prefill and two decode engines with a 50 GB/s KV link,
released at the recorded pace (speedup 1): the whole virtual hour, which macro-stepping
engines replay in seconds. The decode pool has four times the prefill pool's KV blocks:
decode engines hold every activated request's prompt while it waits, and with too few blocks
they can stall behind a preempted request (the overcommit hazard described in
docs/explanation/engine-model.md), which the clock reports as a deadlock rather than hanging.
"""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, read_mooncake
from policies import pd_policy
from replay import pd_phases, pd_topology_from_options, run
from tests.datasets import MOONCAKE


def test_the_whole_mooncake_trace_replays_on_pd_with_every_handoff_recorded() -> None:
    workload = read_mooncake(MOONCAKE)
    topology = pd_topology_from_options(
        prefill_workers=2,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=1024, block_size=512, max_num_batched_tokens=16384),
        decode_engine=EngineConfig(num_blocks=4096, block_size=512, max_num_batched_tokens=16384),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        model="llama-3.1-8b",
        kv_bandwidth_gbps=50.0,
    )
    result = run(
        workload,
        topology=topology,
        policy=pd_policy("kv_aware"),
        seed=2026,
        load=LoadMode(speedup=1.0),
    )
    assert len(result.requests) == 12_031
    assert result.summary.status_counts["completed"] == 12_031
    assert sum(r.output_tokens for r in result.requests) == sum(
        r.output_length for r in workload.requests
    )
    # every request went prefill pool -> decode pool, and each handoff was recorded
    assert all(r.handoff is not None for r in result.requests)
    assert {r.handoff.prefill_worker for r in result.requests if r.handoff} == {0, 1}
    assert {r.handoff.decode_worker for r in result.requests if r.handoff} == {2, 3}
    phases = pd_phases(result)
    assert phases.transfer_ms.count == 12_031
    assert phases.transfer_ms.min is not None and phases.transfer_ms.min > 0
    assert phases.reservation_wait_ms.count == 12_031
