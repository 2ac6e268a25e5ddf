"""Draw the P/D handoff timeline of a small run as SVG (the figure of the P/D explanation).

Two prefill workers, one decode worker with room for only 40 KV blocks, and a 10 GB/s link:
requests queue for a prefill worker, wait for decode blocks, cross the link, then decode.
Run with a path to write the SVG there; without one it prints the phase means.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import pd_policy
from replay import Disaggregated, KVLink, ReplayResult, handoff_timeline_svg, pd_phases, run


def scenario() -> ReplayResult:
    """Replay six requests through 2 prefill + 1 decode workers."""
    sizes = [(1000, 8), (1400, 6), (600, 10), (1200, 8), (800, 6), (1000, 8)]
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=p,
            output_length=n,
            block_size=512,
            hash_ids=[10 * i + k for k in range(-(-p // 512))],
            arrival=ArrivalRule(not_before_ms=15.0 * i),
        )
        for i, (p, n) in enumerate(sizes)
    )
    topology = Disaggregated(
        prefill_workers=2,
        decode_workers=1,
        prefill_engine=EngineConfig(num_blocks=1024, max_num_seqs=1),
        decode_engine=EngineConfig(num_blocks=40),
        prefill_timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        decode_timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        link=KVLink.for_model("llama-3.1-8b", bandwidth_gbps=10.0),
    )
    workload = Workload(requests=requests, source="pd-figure", format="python")
    return run(workload, topology=topology, policy=pd_policy("round_robin"), seed=0)


def figure() -> str:
    """The SVG text of the figure."""
    return handoff_timeline_svg(scenario(), title="P/D handoff: 2 prefill workers, 1 decode")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(figure(), encoding="utf-8")
    else:
        phases = pd_phases(scenario())
        for name, dist in phases.as_dict().items():
            print(f"{name}: mean {dist['mean']:.2f} max {dist['max']:.2f}")
