"""A P/D request cancelled during its handoff (a profile's grace ends while its KV is held on
the prefill side, reserved on the decode side, and on the link) ends cancelled once, and the
run ends cleanly with no block held (REFERENCE-workloads §5.7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import PDPolicy
from replay import run

from .cancel_play import CALL_3, CALL_4, LOAD, cancel_workload
from .pd_helpers import KeepingPD, clean, example_d, statuses


@pytest.mark.parametrize(
    ("bandwidth_gbps", "order", "transfer_done_ms"),
    [
        # 128 tokens of 256 KiB at 10 kB/s: still on the link at the end of the grace (8 s)
        (1e-5, "source_first", None),
        (1e-5, "destination_first", None),
        # an instant link: the handoff is over, the request decodes when it is cancelled
        (None, "source_first", 1715.116849),
    ],
)
def test_a_request_cancelled_in_its_handoff_ends_cancelled_once_and_frees_everything(
    tmp_path: Path, bandwidth_gbps: float | None, order: str, transfer_done_ms: float | None
) -> None:
    # cancel_play: call 3 is still in flight at the end of the grace (8 s); call 4 waits for it
    topology = KeepingPD(example_d(bandwidth_gbps=bandwidth_gbps, order=order))
    result = run(cancel_workload(tmp_path), topology=topology, policy=PDPolicy(), seed=0, load=LOAD)
    assert statuses(result) == {CALL_3: "cancelled", CALL_4: "never_issued"}
    cancelled = result.requests[0]
    assert cancelled.terminal_ms == 8000.0
    assert cancelled.handoff is not None
    assert cancelled.handoff.prefill_done_ms == pytest.approx(1715.116849)
    assert cancelled.handoff.transfer_done_ms == transfer_done_ms
    assert result.meta.event_counts["cancelled"] == 1  # once, though two engines held it
    assert result.meta.virtual_duration_ms == 8000.0
    assert topology.leftovers() == clean(topology)
