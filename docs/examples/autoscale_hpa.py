"""Autoscale a pool: an HPA on running requests per engine, under a step in load.

Requests arrive at 2 per second for 60 s, then at 12 per second for 60 s, then at 2 per second
again. One engine serves at first; the HPA aims at 16 running requests per engine, looks
every 15 s, adds engines that load for 20 s, and scales down only to the highest
recommendation of the last 60 s. The same load on a fixed fleet of 4 engines costs more.
"""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import LeastLoaded
from replay import HPA, SLO, Aggregated, ReplayResult, run


def load() -> Workload:
    times_ms = [500.0 * i for i in range(120)]  # 2/s until 60 s
    times_ms += [60_000.0 + 1000.0 * i / 12 for i in range(720)]  # 12/s until 120 s
    times_ms += [120_000.0 + 500.0 * i for i in range(240)]  # 2/s until 240 s
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=512,
            output_length=400,
            block_size=64,
            hash_ids=range(8 * i, 8 * i + 8),
            arrival=ArrivalRule(not_before_ms=at),
        )
        for i, at in enumerate(times_ms)
    )
    return Workload(requests=requests, source="step", format="python")


def replay(workers: int, autoscaler: HPA | None) -> ReplayResult:
    topology = Aggregated(
        workers=workers,
        engine=EngineConfig(num_blocks=4000, max_num_seqs=32),
        timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
    )
    options = {} if autoscaler is None else {"autoscaler": autoscaler, "cold_start_s": 20.0}
    return run(
        load(),
        topology=topology,
        policy=LeastLoaded(),
        slo=SLO(ttft_ms=1000),
        **options,  # type: ignore[arg-type]
    )


def main() -> None:
    hpa = HPA(metric="running", target=8, period_s=10, stabilization_s=30, max_replicas=6)
    scaled = replay(1, hpa)
    for r in hpa.history:
        if r.target != r.replicas:
            print(
                f"{r.time_s:5.0f} s: {r.value:5.2f} running per engine on {r.ready} ready "
                f"-> desired {r.desired}, scale {r.replicas} -> {r.target}"
            )
    cost = scaled.summary.cost
    assert cost is not None
    for c in cost.engine_count:
        print(
            f"from {c.at_ms / 1000:5.0f} s: {c.engines} engines "
            f"({c.starting} starting, {c.active} active, {c.draining} draining)"
        )
    fixed = replay(4, None)
    for name, result in (("autoscaled", scaled), ("fixed 4", fixed)):
        s = result.summary
        assert s.cost is not None and s.goodput is not None and s.goodput.attainment is not None
        print(
            f"{name:10}: {s.cost.engine_seconds:6.0f} engine-s, "
            f"{s.cost.requests_per_engine_hour:5.0f} requests per engine-hour, "
            f"SLO attainment {100 * s.goodput.attainment:5.1f} %"
        )


if __name__ == "__main__":
    main()
