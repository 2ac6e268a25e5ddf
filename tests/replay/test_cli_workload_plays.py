"""``simclock replay`` with agentic plays: lanes, snapshots, warm-up, the ``plays`` summary."""

from __future__ import annotations

import json
from pathlib import Path

from .test_cli_workload import _replay, weka_plays

__all__ = ("weka_plays",)  # the fixture, shared with test_cli_workload


def test_lanes_run_weka_plays_and_the_summary_reports_them(
    weka_plays: Path, tmp_path: Path
) -> None:
    config, summary = _replay(tmp_path, str(weka_plays), "--lanes", "2", "--speedup", "100")
    assert config["config"]["workload"] == {"speedup": 100.0, "lanes": 2}
    plays = summary["plays"]
    assert plays["plays"] == 3
    assert plays["outcome_counts"] == {"completed": 3, "failed": 0, "incomplete": 0}
    assert [p["instance_id"] for p in plays["outcomes"]] == [
        "plays:p1#0",
        "plays:p2#0",
        "plays:p3#0",
    ]
    assert [p["lane"] for p in plays["outcomes"]] == [0, 1, 1]
    assert plays["trajectory_ms"]["count"] == 3
    assert summary["status_counts"]["completed"] == 10
    assert summary["workload"]["requests"] == 10


def test_snapshot_seed_and_warmup_reach_the_load_mode(weka_plays: Path, tmp_path: Path) -> None:
    config, summary = _replay(
        tmp_path,
        str(weka_plays),
        "--lanes",
        "1",
        "--snapshot-seed",
        "42",
        "--warmup",
        "--warmup-repeats",
        "2",
    )
    assert config["config"]["workload"] == {
        "lanes": 1,
        "snapshot_seed": 42,
        "warmup": True,
        "warmup_repeats": 2,
    }
    assert config["load"]["snapshots"] is True
    assert config["load"]["snapshot_seed"] == 42
    assert summary["plays"]["profile_start_ms"] is not None
    lines = (tmp_path / "out" / "requests.jsonl").read_text().splitlines()
    phases = [json.loads(line)["phase"] for line in lines]
    assert phases.count("warmup") == 2
    assert "primer" in phases
