"""Tiny replays written to output directories, and a hand-made sweep directory, for the
series, comparison and figure tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from replay._cli import main

SYNTHETIC = "count=24 arrivals=poisson(40) input=uniform(200,900) output=uniform(5,30)"


def replay_to(
    out: Path, *, policy: str = "round_robin", extra: Sequence[str] = (), workers: int = 2
) -> Path:
    """Replay a small synthetic workload into ``out`` with the CLI; return ``out``."""
    status = main(
        [
            "replay",
            "--synthetic",
            SYNTHETIC,
            "--workers",
            str(workers),
            "--timing",
            "fixed:prefill_ms=20,decode_ms=5",
            "--policy",
            policy,
            "--output-dir",
            str(out),
            "--quiet",
            "--progress",
            "none",
            *extra,
        ]
    )
    assert status == 0
    return out


def make_sweep(root: Path) -> Path:
    """A sweep directory in the agreed layout: policy x workers x seed, one failed run."""
    runs = []
    index = 0
    for policy in ("round_robin", "kv_aware"):
        for workers in (1, 2):
            for seed in (0, 1):
                run_id = f"r{index:03d}-policy={policy}-workers={workers}-seed={seed}"
                entry: dict[str, object] = {
                    "run_id": run_id,
                    "params": {"policy": policy, "workers": workers, "seed": seed},
                    "seed": seed,
                    "output_dir": f"runs/{run_id}",
                }
                if policy == "kv_aware" and workers == 1 and seed == 1:
                    entry |= {"status": "failed", "error": "boom", "metrics": None}
                else:
                    out = replay_to(
                        root / "runs" / run_id,
                        policy=policy,
                        workers=workers,
                        extra=["--seed", str(seed)],
                    )
                    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
                    entry |= {"status": "ok", "error": None, "metrics": summary["metrics"]}
                runs.append(entry)
                index += 1
    table = {
        "schema": "simclock.sweep",
        "schema_version": 1,
        "simclock_version": "0.1.0",
        "swept": ["policy", "workers", "seed"],
        "runs": runs,
    }
    (root / "sweep.json").write_text(json.dumps(table, indent=2), encoding="utf-8")
    return root
