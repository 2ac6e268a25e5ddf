"""Replay from Python: a workload, a topology, a policy, a seed -> a typed result and files.

Two requests share a 1000-token prompt prefix (REFERENCE-engine §9 (c)): the second reuses
960 prompt tokens from the first one's KV cache.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import RoundRobin
from replay import SLO, Aggregated, run, write_outputs


def main() -> None:
    requests = tuple(
        Request(
            id=rid,
            input_length=1000,
            output_length=10,
            block_size=512,
            hash_ids=[1, 2],
            arrival=ArrivalRule(not_before_ms=at_ms),
        )
        for rid, at_ms in (("A", 0.0), ("B", 1.0))
    )
    workload = Workload(requests=requests, source="example", format="python")
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=1000),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(workload, topology=topology, policy=RoundRobin(), seed=0, slo=SLO(ttft_ms=100))

    for r in result.requests:
        print(
            f"{r.request_id}: {r.status}, TTFT {r.ttft_ms} ms, E2E {r.e2e_ms} ms, "
            f"reused {r.reused_input_tokens} tokens, meets SLO {r.meets_slo}"
        )
    s = result.summary
    assert s.goodput is not None
    print(f"prefix reuse ratio {s.prefix_reuse_ratio}, goodput {s.goodput.count} of {s.completed}")

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_outputs(result, Path(tmp) / "report")
        print("wrote", ", ".join(p.name for p in paths))
        summary = json.loads(paths[0].read_text())
        print("mean_ttft_ms =", summary["metrics"]["mean_ttft_ms"])
        first = json.loads(paths[1].read_text().splitlines()[1])
        print("B token_times_ms =", first["token_times_ms"])


if __name__ == "__main__":
    main()
