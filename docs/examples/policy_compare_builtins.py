"""Compare the built-in policies on requests that share four system prompts.

Every request starts with one of four 1024-token system prompts, then 128 tokens of its own.
A policy that sends each prompt family to the engine that already caches it computes fewer
prompt tokens, and with a timing model that charges per prompt token, answers sooner.
"""

from __future__ import annotations

from engines import EngineConfig, LinearTiming
from loadgen import ArrivalRule, Identity, Request, Workload
from policies import KVAware, LeastLoaded, Random, RoundRobin, SessionAffinity
from replay import Aggregated, run


def workload() -> Workload:
    requests = []
    for i in range(48):
        family = (i * i + i // 3) % 4  # which system prompt
        shared = [family * 100 + k for k in range(8)]  # 8 blocks of 128 tokens
        own = [10_000 + i]
        requests.append(
            Request(
                id=f"r{i}",
                input_length=9 * 128,
                output_length=16,
                block_size=128,
                hash_ids=shared + own,
                arrival=ArrivalRule(not_before_ms=25.0 * i),
                identity=Identity(conversation_id=f"family{family}"),
            )
        )
    return Workload(requests=tuple(requests), source="families", format="python")


def main() -> None:
    topology = Aggregated(
        workers=4,
        engine=EngineConfig(num_blocks=200, block_size=64),
        timing=LinearTiming(c0=5.0, c_p=0.05, c_d=0.5, c_kv=0.0),
    )
    for policy in (RoundRobin(), Random(), LeastLoaded(), KVAware(), SessionAffinity()):
        result = run(workload(), topology=topology, policy=policy, seed=1)
        s = result.summary
        print(
            f"{policy.name:<17} prefix reuse {s.prefix_reuse_ratio:.3f}, "
            f"mean TTFT {s.ttft_ms.mean:6.1f} ms"
        )


if __name__ == "__main__":
    main()
