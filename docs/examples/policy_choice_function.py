"""The smallest policy: a plain function that picks an engine, adapted with from_choice.

Short prompts go to engine 0, long ones to the least busy of the others.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines import EngineConfig, EngineView, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import from_choice
from replay import Aggregated, run


def short_to_zero(request: Request, engines: Sequence[EngineView]) -> int:
    """Prompts under 500 tokens on engine 0; others on the least loaded of engines 1..n-1."""
    if request.input_length < 500:
        return 0
    others = engines[1:]
    least_busy = min(
        others, key=lambda v: (v.outstanding_prefill_tokens + v.outstanding_decode_tokens, v.index)
    )
    return least_busy.index


def main() -> None:
    lengths = [100, 2000, 300, 1500, 1800, 50]
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=length,
            output_length=20,
            block_size=64,
            hash_ids=range(1000 * i, 1000 * i + -(-length // 64)),
            arrival=ArrivalRule(not_before_ms=5.0 * i),
        )
        for i, length in enumerate(lengths)
    )
    workload = Workload(requests=requests, source="example", format="python")
    topology = Aggregated(
        workers=3,
        engine=EngineConfig(num_blocks=1000),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(workload, topology=topology, policy=from_choice(short_to_zero), seed=0)
    for r in result.requests:
        print(
            f"{r.request_id}: {r.input_length:>5} tokens -> engine {r.engine}, TTFT {r.ttft_ms} ms"
        )


if __name__ == "__main__":
    main()
