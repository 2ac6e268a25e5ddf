"""Replay one workload under two policies, compare them, and draw their TTFT CDFs.

Every request starts with one of four 1024-token system prompts, and each engine has room
for only 40 KV blocks: a policy that keeps a prompt family on one engine reuses its prefix.
Each run is written to an output directory with its per-engine series
(``series=SeriesRecorder()``), then ``replay.compare`` lines the runs up and ``replay.plot``
draws the figures. Run with a path to write the TTFT CDF (the figure of
docs/reference/plots.md) there; without one it prints part of the comparison.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from engines import EngineConfig, LinearTiming
from loadgen import ArrivalRule, Request, Workload
from policies import KVAware, Policy, RoundRobin
from replay import Aggregated, SeriesRecorder, compare, plot, run, write_outputs


def workload() -> Workload:
    requests = []
    for i in range(96):
        family = (i * i + i // 3) % 4  # which system prompt
        shared = [family * 100 + k for k in range(8)]  # 8 blocks of 128 tokens
        requests.append(
            Request(
                id=f"r{i}",
                input_length=9 * 128,
                output_length=32,
                block_size=128,
                hash_ids=[*shared, 10_000 + i],
                arrival=ArrivalRule(not_before_ms=12.0 * i),
            )
        )
    return Workload(requests=tuple(requests), source="families", format="python")


def replay_into(directory: Path, policy: Policy) -> Path:
    """Replay under ``policy`` and write the report and the series into ``directory``."""
    topology = Aggregated(
        workers=4,
        engine=EngineConfig(num_blocks=40, block_size=64),
        timing=LinearTiming(c0=5.0, c_p=0.05, c_d=0.5, c_kv=0.0),
    )
    series = SeriesRecorder()
    result = run(workload(), topology=topology, policy=policy, seed=1, series=series)
    write_outputs(result, directory)
    series.write(directory, end_ns=round(result.meta.virtual_duration_ms * 1_000_000))
    return directory


def figure() -> bytes:
    """The SVG bytes of the TTFT CDF of both runs."""
    with tempfile.TemporaryDirectory() as root:
        runs = [
            replay_into(Path(root) / "rr", RoundRobin()),
            replay_into(Path(root) / "kv", KVAware()),
        ]
        plot(runs, Path(root) / "plots", formats=["svg"], report=False)
        return (Path(root) / "plots" / "ttft_cdf.svg").read_bytes()


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        runs = [
            replay_into(Path(root) / "rr", RoundRobin()),
            replay_into(Path(root) / "kv", KVAware()),
        ]
        table = compare(runs)
        print("runs:", ", ".join(table.labels))
        for row in table.rows:
            if row.key in ("distributions.ttft_ms.mean", "prefix_reuse.prefix_reuse_ratio"):
                base, other = row.values
                print(f"{row.label}: {base:.2f} -> {other:.2f} ({row.diff_pcts()[1]:+.1f}%)")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_bytes(figure())
    else:
        main()
