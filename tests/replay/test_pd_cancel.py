"""A P/D request cancelled during its handoff (a profile's grace ends while its KV is held on
the prefill side, reserved on the decode side, and on the link) ends cancelled once, and the
run ends cleanly with no block held (REFERENCE-workloads §5.7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen import LoadMode, Profile, read_weka
from policies import PDPolicy
from replay import run

from .pd_helpers import KeepingPD, clean, example_d, statuses


def _call(t: float, out: int) -> dict[str, Any]:
    return {"t": t, "type": "n", "model": "m", "in": 128, "out": out, "api_time": 1,
            "hash_ids": [1, 2]}  # fmt: skip


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
    # The play of tests/replay/test_profile_cancel.py: call 3 is released at 1,665.12 ms and
    # is still in flight at the end of the grace (8 s); call 4 waits for it.
    play = {
        "id": "p1",
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": [_call(10 * i, 2000 if i == 3 else 5) for i in range(5)],
    }
    path = tmp_path / "ex.json"
    path.write_text(json.dumps(play))
    topology = KeepingPD(example_d(bandwidth_gbps=bandwidth_gbps, order=order))
    load = LoadMode(
        lanes=1, snapshots=True, snapshot_seed=42, profile=Profile(duration_s=5.0, grace_s=3.0)
    )
    result = run(read_weka(path), topology=topology, policy=PDPolicy(), seed=0, load=load)
    assert statuses(result) == {"ex:p1#0/main/3": "cancelled", "ex:p1#0/main/4": "never_issued"}
    cancelled = result.requests[0]
    assert cancelled.terminal_ms == 8000.0
    assert cancelled.handoff is not None
    assert cancelled.handoff.prefill_done_ms == pytest.approx(1715.116849)
    assert cancelled.handoff.transfer_done_ms == transfer_done_ms
    assert result.meta.event_counts["cancelled"] == 1  # once, though two engines held it
    assert result.meta.virtual_duration_ms == 8000.0
    assert topology.leftovers() == clean(topology)
