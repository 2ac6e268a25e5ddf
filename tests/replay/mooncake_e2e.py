"""The end-to-end replay of the real Mooncake conversation trace, under each built-in policy.

All 12,031 requests are replayed unchanged — prompt lengths, output lengths and content ids —
on four engines, at the trace's recorded pace (``SPEEDUP`` 1): the whole virtual hour, which
macro-stepping engines replay in seconds. Engine blocks are 512
tokens, the trace's own block size, so each engine block is exactly one trace content id.
"""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, Workload, read_mooncake
from policies import KVAware, LeastLoaded, Random, RoundRobin, SessionAffinity
from replay import Aggregated, ReplayResult, run
from tests.datasets import MOONCAKE

SPEEDUP = 1.0
TOPOLOGY = Aggregated(
    workers=4,
    engine=EngineConfig(num_blocks=1024, block_size=512, max_num_batched_tokens=16384),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)
POLICIES = {
    "round_robin": RoundRobin,
    "random": Random,
    "least_loaded": LeastLoaded,
    "kv_aware": KVAware,
    "session_affinity": SessionAffinity,
}


_RESULTS: dict[str, ReplayResult] = {}  # one replay per policy and process, shared by the tests
_WORKLOAD: list[Workload] = []


def mooncake() -> Workload:
    if not _WORKLOAD:
        _WORKLOAD.append(read_mooncake(MOONCAKE))
    return _WORKLOAD[0]


def replay(name: str) -> ReplayResult:
    if name not in _RESULTS:
        _RESULTS[name] = run(
            mooncake(),
            topology=TOPOLOGY,
            policy=POLICIES[name](),
            seed=2026,
            load=LoadMode(speedup=SPEEDUP),
        )
    return _RESULTS[name]


def check_every_request_reaches_a_terminal_state(name: str) -> None:
    """All 12,031 requests completed under ``name``, with every output token generated."""
    result = replay(name)
    assert len(mooncake().requests) == 12_031
    assert len(result.requests) == 12_031
    assert result.summary.status_counts["completed"] == 12_031
    # every output token of the trace was generated
    total_output = sum(r.output_length for r in mooncake().requests)
    assert sum(r.output_tokens for r in result.requests) == total_output
    assert all(r.terminal_ms is not None for r in result.requests)
    assert result.meta.config["policy"] == name
    # every engine took part
    assert sorted({r.engine for r in result.requests}) == [0, 1, 2, 3]
