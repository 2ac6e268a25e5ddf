"""An agentic workload replayed without lanes runs ``LoadMode.PLAYS_PER_ENGINE`` (one) play
per engine at a time, not every play at once; ``--lanes`` still decides when given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen import LoadMode
from replay._cli import EXIT_OK, main


def _plays(tmp_path: Path, count: int) -> Path:
    """``count`` one-request plays, all recorded at timestamp 0."""
    path = tmp_path / "plays.jsonl"
    rows = [
        json.dumps(
            {
                "request_id": f"p{i}",
                "timestamp": 0,
                "input_length": 100,
                "output_length": 2,
                "hash_ids": [i],
            }
        )
        for i in range(count)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def _arrivals(tmp_path: Path, *extra: str) -> list[float]:
    out = tmp_path / "out"
    argv = ["replay", str(_plays(tmp_path, 6)), "--format", "agentic", "--workers", "1"]
    argv += ["--timing", "fixed:prefill_ms=50,decode_ms=10", *extra]
    assert main([*argv, "--quiet", "--progress", "none", "--output-dir", str(out)]) == EXIT_OK
    lines = (out / "requests.jsonl").read_text().splitlines()
    return sorted(json.loads(line)["arrival_ms"] for line in lines)


def test_without_lanes_one_play_per_engine_runs_at_a_time(tmp_path: Path) -> None:
    # one engine: one lane; a play (one request, 50 + 10 ms) frees its lane at 60 ms
    assert _arrivals(tmp_path) == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0]
    assert _arrivals(tmp_path, "--workers", "2") == [0.0, 0.0, 60.0, 60.0, 120.0, 120.0]


def test_lanes_given_decide(tmp_path: Path) -> None:
    assert _arrivals(tmp_path, "--lanes", "6") == [0.0] * 6
    assert _arrivals(tmp_path, "--lanes", "3") == [0.0] * 3 + [60.0] * 3


@pytest.mark.parametrize(
    ("mode", "plays", "engines", "lanes"),
    [
        (LoadMode(), 498, 4, 4),
        (LoadMode(), 3, 4, 3),  # never more lanes than plays
        (LoadMode(speedup=2.0), 10, 2, 2),
        (LoadMode(lanes=5), 498, 4, 5),  # given: kept
        (LoadMode(), 0, 4, None),  # no plays: no lanes
        (LoadMode(concurrency=3), 10, 4, None),  # a closed loop is refused later, not changed
    ],
)
def test_default_lanes_are_sized_to_the_topology(
    mode: LoadMode, plays: int, engines: int, lanes: int | None
) -> None:
    assert LoadMode.PLAYS_PER_ENGINE == 1
    assert mode.with_default_lanes(plays=plays, engines=engines).lanes == lanes
