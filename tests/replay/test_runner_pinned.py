"""Pinned replays: the per-request results of small Mooncake slices, byte for byte.

Each test replays the first requests of the real Mooncake conversation trace and compares a
SHA-256 digest of every request's outcome (engine, reuse, preemptions, admissions, every token
time) and of every engine's pass count and busy time with a digest recorded once. Any change
of behaviour — an admission, a token time, a prefix hit — changes the digest; speed-ups must
not.
"""

from __future__ import annotations

import hashlib

import attrs
import pytest

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, Workload, read_mooncake
from policies import KVAware, Policy, RoundRobin
from replay import Aggregated, ReplayResult, run
from tests.datasets import MOONCAKE

TOPOLOGY = Aggregated(
    workers=4,
    engine=EngineConfig(num_blocks=1024, block_size=512, max_num_batched_tokens=16384),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)
# Smaller engines (64-token blocks, a small KV pool) so the slice sees preemptions and
# partial prefix hits.
TIGHT = Aggregated(
    workers=2,
    engine=EngineConfig(num_blocks=600, block_size=64, max_num_batched_tokens=4096),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)

_WORKLOAD: list[Workload] = []


def mooncake_slice(count: int) -> Workload:
    if not _WORKLOAD:
        _WORKLOAD.append(read_mooncake(MOONCAKE))
    workload = _WORKLOAD[0]
    return attrs.evolve(workload, requests=workload.requests[:count])


class _Spelled(str):
    """A string whose repr is itself."""

    def __repr__(self) -> str:
        return str(self)


def digest(result: ReplayResult) -> str:
    h = hashlib.sha256()
    for r in result.requests:
        row = (
            r.request_id,
            r.status,
            r.engine,
            r.output_tokens,
            r.reused_input_tokens,
            r.num_preemptions,
            r.engine_arrival_ms,
            r.first_admit_ms,
            r.terminal_ms,
            tuple(r.admissions),
            tuple(r.token_times_ms),
        )
        h.update(repr(row).encode())
    # the engines' busy time and passes, spelled as before the usage counters were added
    usage = [
        f"EngineUsage(index={u.index}, busy_ns={u.busy_ns}, passes={u.passes})"
        for u in result.meta.engines
    ]
    h.update(repr(tuple(_Spelled(text) for text in usage)).encode())
    h.update(repr(sorted((result.meta.event_counts or {}).items())).encode())
    return h.hexdigest()[:16]


CASES: dict[str, tuple[Aggregated, type[Policy], float, int, str]] = {
    "round_robin@8": (TOPOLOGY, RoundRobin, 8.0, 400, "c971fa201420b052"),
    "kv_aware@8": (TOPOLOGY, KVAware, 8.0, 400, "ef467e9c2b557a26"),
    "round_robin@1": (TOPOLOGY, RoundRobin, 1.0, 200, "a6aa883d5d2f82aa"),
    "kv_aware@4-tight": (TIGHT, KVAware, 4.0, 300, "87bfdce31bc6129e"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mooncake_slice_replays_to_the_pinned_results(name: str) -> None:
    topology, make_policy, speedup, count, expected = CASES[name]
    result = run(
        mooncake_slice(count),
        topology=topology,
        policy=make_policy(),
        seed=2026,
        load=LoadMode(speedup=speedup),
    )
    assert len(result.requests) == count
    counts = result.summary.status_counts
    assert counts["completed"] + counts["rejected"] == count
    assert digest(result) == expected
