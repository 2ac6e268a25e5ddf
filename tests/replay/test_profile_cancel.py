"""A continuous profile ends at the end of its grace: what is still in flight is cancelled on
the engines, and the run ends when the release driver returns (REFERENCE-workloads §5.7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines import EngineConfig, FixedTiming
from policies import RoundRobin
from replay import Aggregated, run

from .cancel_play import LOAD, cancel_workload


def test_requests_in_flight_at_the_end_of_the_grace_are_cancelled(tmp_path: Path) -> None:
    # One play, main calls at 0, 10, 20, 30, 40 s. One lane, snapshot seed 42: the cut is at
    # 28,334.88 ms (§8 example d), so calls 3 and 4 are live and call 3 is released at
    # 1,665.12 ms. It asks for 2,000 tokens (20 s of decode at 10 ms a step): still in flight
    # at the cutoff (5 s) and at the end of the grace (8 s), where it is cancelled; call 4,
    # waiting for it, is never issued.
    workload = cancel_workload(tmp_path)
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=100),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(workload, topology=topology, policy=RoundRobin(), seed=0, load=LOAD)
    statuses = {r.request_id: r.status for r in result.requests}
    assert statuses == {"ex:p1#0/main/3": "cancelled", "ex:p1#0/main/4": "never_issued"}
    cancelled = result.requests[0]
    assert cancelled.arrival_ms == pytest.approx(1665.12, abs=0.01)
    assert cancelled.terminal_ms == 8000.0
    assert 0 < cancelled.output_tokens < 2000
    assert result.meta.virtual_duration_ms == 8000.0  # ended when the driver returned
    assert result.meta.event_counts["cancelled"] == 1
    plays = result.summary.plays
    assert plays is not None
    assert dict(plays.outcome_counts) == {"completed": 0, "failed": 0, "incomplete": 1}
    assert plays.cutoff_ms == 5000.0
