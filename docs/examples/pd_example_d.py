"""REFERENCE-engine §9 (d): one prefill and one decode worker joined by a 50 GB/s KV link."""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import PDPolicy
from replay import Disaggregated, KVLink, ReplayResult, TransferMode, pd_phases, run

KV_BYTES_PER_TOKEN = 2 * 64 * 8 * 128 * 2  # 64 layers, 8 KV heads, head dim 128, bf16, TP 1


def topology(
    *, decode_ms: float = 10.0, mode: TransferMode = "destination_missing", prefill_tp: int = 1
) -> Disaggregated:
    return Disaggregated(
        prefill_workers=1,
        decode_workers=1,
        prefill_engine=EngineConfig(num_blocks=10_000),  # the pool gives it the prefill role
        decode_engine=EngineConfig(num_blocks=10_000),
        prefill_timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        decode_timing=FixedTiming(prefill_ms=50.0, decode_ms=decode_ms),
        # shards send in parallel: one TP shard's share of the KV crosses the link
        link=KVLink(
            mode=mode, kv_bytes_per_token=KV_BYTES_PER_TOKEN / prefill_tp, bandwidth_gbps=50.0
        ),
    )


def request(rid: str, at_ms: float = 0.0) -> Request:
    """P = 1000, N = 10, two 512-token content ids."""
    return Request(
        id=rid,
        input_length=1000,
        output_length=10,
        block_size=512,
        hash_ids=[1, 2],
        arrival=ArrivalRule(not_before_ms=at_ms),
    )


def replay(topology: Disaggregated, *requests: Request) -> ReplayResult:
    workload = Workload(requests=requests, source="example-d", format="python")
    return run(workload, topology=topology, policy=PDPolicy(), seed=0)


if __name__ == "__main__":
    result = replay(topology(), request("a"), request("b", at_ms=500.0))
    for record in result.requests:
        h = record.handoff
        assert h is not None
        print(
            f"{record.request_id}: prefill done {h.prefill_done_ms:.4f}, "
            f"reserved {h.destination_reserved_ms:.4f}, {h.transfer_tokens} tokens in "
            f"{h.transfer_ms:.4f} ms, TTFT {record.ttft_ms:.4f}, E2E {record.e2e_ms:.4f}"
        )
    phases = pd_phases(result)
    print(f"transfer: mean {phases.transfer_ms.mean:.4f} ms over {phases.transfer_ms.count}")
    (a,) = replay(topology(mode="full_prompt"), request("a")).requests
    print(f"full_prompt: {a.handoff and a.handoff.transfer_tokens} tokens, TTFT {a.ttft_ms:.4f}")
    (a,) = replay(topology(prefill_tp=2), request("a")).requests
    print(f"prefill TP 2: transfer {a.handoff and a.handoff.transfer_ms:.2f} ms")
    (a,) = replay(topology(decode_ms=20.0), request("a")).requests
    print(f"decode fixed 20: TTFT {a.ttft_ms:.2f}, E2E {a.e2e_ms:.2f}")
