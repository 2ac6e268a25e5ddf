"""A cluster that changes during the run: an engine joins, another drains and leaves.

Two engines serve a steady stream of requests. At 1 s a third engine joins; at 2 s engine 0
starts draining (it finishes what it has) and is removed at 3 s. The same schedule is then
given to a policy that ignores drains: its offers to engine 0 are refused and recorded.
"""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import ChoicePolicy, PolicyContext, RoundRobin
from replay import Aggregated, ClusterEvent, Run

EVENTS = [
    ClusterEvent(at_s=1.0, action="add"),
    ClusterEvent(at_s=2.0, action="drain", engine=0),
    ClusterEvent(at_s=3.0, action="remove", engine=0),
]


class AlwaysZero(ChoicePolicy):
    """A policy that ignores drains: every request to engine 0."""

    name = "always_zero"

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        return 0


def replay(policy: ChoicePolicy) -> Run:
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=256,
            output_length=40,
            block_size=64,
            hash_ids=range(4 * i, 4 * i + 4),
            arrival=ArrivalRule(not_before_ms=100.0 * i),
        )
        for i in range(40)
    )
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=1000),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    run = Run.build(
        Workload(requests=requests, source="example", format="python"),
        topology=topology,
        policy=policy,
        cluster_events=EVENTS,
    )
    run.finish()
    return run


def main() -> None:
    run = replay(RoundRobin())
    result = run.finish()
    for engine in result.summary.engines:
        print(
            f"engine {engine.index}: joined {engine.joined_ms:6.1f} ms, "  # type: ignore[attr-defined]
            f"removed {engine.removed_ms}, completed {engine.completed}"  # type: ignore[attr-defined]
        )
    print("states:", {i: run.cluster.state(i) for i in run.cluster.ids()})

    stubborn = replay(AlwaysZero())
    refused = stubborn.cluster.inactive_placements()
    first = refused[0]
    print(f"always_zero: {len(refused)} offers refused")
    print(f"first: {first.request_id} at {first.time_ns / 1e6} ms, {first.outcome}, {first.reason}")
    print("status counts:", dict(stubborn.finish().summary.status_counts))


if __name__ == "__main__":
    main()
