"""The one-play WEKA workload of REFERENCE-workloads §8 example d, for the cancellation tests.

With one lane and snapshot seed 42 the cut is at 28,334.88 ms, so calls 3 and 4 of instance
``p1#0`` are live: call 3 is released at 1,665.12 ms and asks for 2,000 tokens (20 s of
decode), so a profile of 5 s with a grace of 3 s (:data:`LOAD`) cancels it at 8 s; call 4,
waiting for it, is never issued.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadgen import LoadMode, Profile, Workload, read_weka

CALL_3 = "ex:p1#0/main/3"
CALL_4 = "ex:p1#0/main/4"
LOAD = LoadMode(
    lanes=1, snapshots=True, snapshot_seed=42, profile=Profile(duration_s=5.0, grace_s=3.0)
)


def _call(t: float, out: int) -> dict[str, Any]:
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": 128,
        "out": out,
        "api_time": 1,
        "hash_ids": [1, 2],
    }


def cancel_workload(folder: Path) -> Workload:
    """The play (main calls at 0, 10, 20, 30, 40 s; call 3 long), written to ``folder``."""
    play = {
        "id": "p1",
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": [_call(10 * i, 2000 if i == 3 else 5) for i in range(5)],
    }
    path = folder / "ex.json"
    path.write_text(json.dumps(play))
    return read_weka(path)
