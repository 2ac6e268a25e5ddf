"""Same inputs and seed give the same bytes, whatever PYTHONHASHSEED (STYLE: determinism)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import hashlib, json, sys
from pathlib import Path
import loadgen
sys.path.insert(0, {root!r})
from tests.loadgen.fake_engine import FakeRun

folder = Path({folder!r})
digest = hashlib.sha256()
for name in ("a.jsonl", "m.jsonl", "w.jsonl"):
    workload = loadgen.read_trace(folder / name)
    for r in workload.requests:
        digest.update(repr((r.id, r.input_length, r.output_length, r.hash_ids.tolist(),
                            r.arrival, r.identity)).encode())
    report = FakeRun(workload, mode=loadgen.LoadMode(lanes=2) if workload.plays else
                     loadgen.LoadMode()).run()
    digest.update(repr(report).encode())
spec = loadgen.parse_synthetic("count=200 arrivals=poisson(5) turns=uniform(1,3) "
                               "prefix_groups=4 shared_prefix_ratio=0.5 think_ms=exponential(100)")
workload = loadgen.generate_synthetic(spec, seed=5)
digest.update(repr([(r.id, r.hash_ids.tolist(), r.arrival) for r in workload.requests]).encode())
digest.update(repr(loadgen.workload_stats(workload)).encode())
print(digest.hexdigest())
"""


def _write_inputs(folder: Path) -> None:
    agentic = [
        {
            "request_id": "A",
            "session_id": "main",
            "timestamp": 5,
            "output_length": 3,
            "hash_ids": [1, 2],
        },
        {
            "request_id": "B",
            "session_id": "t",
            "wait_for": ["A"],
            "output_length": 2,
            "hash_ids": [1, 3],
        },
        {
            "request_id": "C",
            "session_id": "u",
            "wait_for": ["A"],
            "output_length": 2,
            "hash_ids": [1, 4],
        },
        {"request_id": "D", "wait_for": ["B", "C"], "output_length": 1, "hash_ids": [1, 2, 5]},
        {"request_id": "E", "timestamp": 1, "output_length": 1, "hash_ids": [9]},
    ]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in agentic))
    mooncake = [
        {
            "session_id": f"s{i % 3}",
            "timestamp": i * 7,
            "output_length": i % 5,
            "hash_ids": [i % 4, i],
        }
        for i in range(20)
    ]
    (folder / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mooncake))
    call = {"type": "n", "model": "m", "in": 130, "out": 4, "hash_ids": [1, 2], "api_time": 1}
    plays = [
        {
            "id": f"p{k}",
            "block_size": 64,
            "hash_id_scope": "local",
            "requests": [
                dict(call, t=0),
                {
                    "t": 1,
                    "type": "subagent",
                    "agent_id": "a",
                    "status": "completed",
                    "requests": [dict(call, t=0), dict(call, t=2)],
                },
                dict(call, t=3),
            ],
        }
        for k in range(3)
    ]
    (folder / "w.jsonl").write_text("".join(json.dumps(p) + "\n" for p in plays))


def test_readers_generator_and_driver_are_byte_identical_across_hash_seeds(
    tmp_path: Path,
) -> None:
    _write_inputs(tmp_path)
    root = str(Path(__file__).resolve().parents[2])
    script = SCRIPT.format(root=root, folder=str(tmp_path))
    outputs = set()
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env,
            cwd=root,
            check=True,
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1
    assert len(outputs.pop().strip()) == 64
