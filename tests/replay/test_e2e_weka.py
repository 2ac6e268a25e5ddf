"""End to end: the whole WEKA Claude Code corpus through ``replay.run``, nothing cut.

In a file of its own so that pytest-xdist (``--dist loadfile``) can run it beside the rest
of the suite.
"""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode
from policies import SessionAffinity
from replay import Aggregated, run
from tests.datasets import weka_workload

from .test_e2e_traces import _check_accounting

# 498 plays, 34,085 calls (521 in 50 subagents), inputs of 100 k tokens at the median
WEKA_SPEEDUP = 1.0
WEKA_BLOCKS = 2_000_000


def test_all_498_weka_conversations_replay_uncut_with_their_subagents() -> None:
    """All 498 WEKA plays as recorded — 34,085 calls, the 50 subagents' 521 included, every
    prompt whole (63.1 M content ids, 4.0 G prompt tokens) and every output token generated.

    The plays all start at 0 (no lanes, REFERENCE-workloads §5.1) and are released at the
    recorded pace (speedup 1), on one engine whose cache holds every conversation at once (2 M
    blocks of 64 tokens), so nothing is evicted or preempted and the engine's prefix reuse
    is the workload's unbounded-cache hit ratio (§7: 96.29 %). The replay takes about 23 s
    of CPU (time.process_time) on the 2-core machine (reading the corpus, shared with other
    modules, about 2.7 s more); the costs are per reused prompt block
    (63 M) and per output token (15.2 M), with keys of shared prefixes taken from the
    previous turn and decode steps scheduled together (docs/explanation/engine-model.md).
    """
    workload = weka_workload()  # read_weka(WEKA), shared with the modules that read it whole
    assert len(workload.plays) == 498
    assert len(workload.requests) == 34_085
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=WEKA_BLOCKS, block_size=64, max_num_batched_tokens=16_384),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(
        workload,
        topology=topology,
        policy=SessionAffinity(),
        seed=2026,
        load=LoadMode(speedup=WEKA_SPEEDUP),
    )
    _check_accounting(result, 34_085)
    assert result.summary.status_counts["completed"] == 34_085
    by_id = {r.id: r for r in workload.requests}
    for record in result.requests:
        request = by_id[record.request_id]
        assert record.input_length == request.input_length
        assert record.output_tokens == request.output_length  # nothing cut, nothing truncated
    assert sum(r.output_tokens for r in result.requests) == 15_202_681
    ids = {r.request_id for r in result.requests}
    assert "weka_cc_traces_v8_shared:trace_0003/agent_001/0" in ids
    assert sum(1 for i in ids if "/agent_" in i) == 521
    assert result.summary.preemptions == 0
    plays = result.summary.plays
    assert plays is not None
    assert plays.plays == 498
    assert dict(plays.outcome_counts) == {"completed": 498, "failed": 0, "incomplete": 0}
    assert plays.trajectory_ms.count == 498
    # a cache that never evicts reuses what an unbounded cache hits: the 96.29 % that
    # REFERENCE-workloads §7 quotes (and tests/loadgen checks `inspect` against)
    assert result.summary.prefix_reuse_ratio is not None
    assert round(result.summary.prefix_reuse_ratio, 4) == 0.9629
