"""Routers whose information lags: stale views herd a burst, late KV events miss a cache.

Four engines. Every 20 ms a burst of four requests arrives: with live views least-loaded
spreads them; with views 200 ms late (``view_delay_ms``) or refreshed every 200 ms
(``view_period_ms``) the requests read the same old numbers, pile onto two engines and wait
longer for their first token. Then a request every 100 ms shares a 1024-token prefix: with
live KV events a KV-aware router keeps them on the engine that caches it; with events 150 ms
late (``kv_event_delay_ms``) ``prefix_overlap`` does not show the cache yet and some go
elsewhere, recomputing the prefix.
"""

from __future__ import annotations

from collections import Counter

from engines import EngineConfig, LinearTiming
from loadgen import ArrivalRule, Request, Workload
from policies import KVAware, LeastLoaded, Policy
from replay import Aggregated, Faults, run


def bursts() -> Workload:
    """Bursts of four requests every 20 ms, each with a prompt of its own."""
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=512,
            output_length=100,
            block_size=64,
            hash_ids=range(8 * i, 8 * i + 8),
            arrival=ArrivalRule(not_before_ms=20.0 * (i // 4)),
        )
        for i in range(64)
    )
    return Workload(requests=requests, source="example", format="python")


def one_prefix() -> Workload:
    """A request every 100 ms, all with the same 1024-token prompt prefix."""
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=1100,
            output_length=50,
            block_size=64,
            hash_ids=[*range(16), 100 + i, 200 + i],
            arrival=ArrivalRule(not_before_ms=100.0 * i),
        )
        for i in range(16)
    )
    return Workload(requests=requests, source="example", format="python")


def replay(workload: Workload, policy: Policy, faults: Faults) -> None:
    topology = Aggregated(
        workers=4,
        engine=EngineConfig(num_blocks=2000, max_num_batched_tokens=1024),
        timing=LinearTiming(c0=5.0, c_p=0.05, c_d=0.2, c_kv=0.0),
    )
    result = run(workload, topology=topology, policy=policy, faults=faults)
    per_engine = Counter(r.engine for r in result.requests)
    ttft = sorted(r.ttft_ms for r in result.requests if r.ttft_ms is not None)
    hits = sum(r.reused_input_tokens for r in result.requests)
    lag = " ".join(f"{k}={v:g}" for k, v in faults.as_dict().items()) or "live"
    print(
        f"{type(policy).__name__:<11} {lag:<21} engines {[per_engine[e] for e in range(4)]}"
        f"  p50 TTFT {ttft[len(ttft) // 2]:5.1f} ms  cached {hits}"
    )


def main() -> None:
    for faults in (Faults(), Faults(view_delay_ms=200.0), Faults(view_period_ms=200.0)):
        replay(bursts(), LeastLoaded(), faults)
    for faults in (Faults(), Faults(kv_event_delay_ms=150.0)):
        replay(one_prefix(), KVAware(), faults)


if __name__ == "__main__":
    main()
