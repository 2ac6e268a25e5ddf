"""Benchmark: the real Mooncake conversation trace replayed on four engines.

Run ``python bench/replay.py [--trace PATH] [--limit N] [--only NAME] [--profile [N]]``.

Replays the trace (12,031 requests, ~4.1 M output tokens) on four engines
(``EngineConfig(num_blocks=1024, block_size=512, max_num_batched_tokens=16384)``,
``FixedTiming(50, 10)``) in three configurations: round-robin and kv-aware at ``speedup=8``,
and round-robin at the recorded pace (``speedup=1``). For each, prints the process CPU time
(``time.process_time``), the engine passes, the loop events, passes per CPU second, and the
prefix reuse ratio, and a digest of the per-request output (``requests.jsonl``), which must
not change when the code gets faster. Figures are printed, never asserted. ``--profile`` runs
the selected configurations under cProfile and prints the top ``N`` functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path and its name would shadow
# the ``replay`` package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import attrs

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, Workload, dataset_path, read_mooncake
from policies import KVAware, Policy, RoundRobin
from replay import Aggregated, ReplayResult, run, write_outputs

TRACE = dataset_path("mooncake-conversation")
TOPOLOGY = Aggregated(
    workers=4,
    engine=EngineConfig(num_blocks=1024, block_size=512, max_num_batched_tokens=16384),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)
CONFIGS: dict[str, tuple[Callable[[], Policy], float]] = {
    "round_robin@8": (RoundRobin, 8.0),
    "kv_aware@8": (KVAware, 8.0),
    "round_robin@1": (RoundRobin, 1.0),
}


def replay_once(
    workload: Workload, make_policy: Callable[[], Policy], speedup: float
) -> ReplayResult:
    """Replay ``workload`` once on the benchmark topology."""
    return run(
        workload,
        topology=TOPOLOGY,
        policy=make_policy(),
        seed=2026,
        load=LoadMode(speedup=speedup),
    )


def digest(result: ReplayResult) -> str:
    """The first 16 hex digits of the SHA-256 of the result's ``requests.jsonl``."""
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        data = (Path(out) / "requests.jsonl").read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


def main() -> None:
    """Run the selected configurations and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--limit", type=int, default=None, help="replay the first N requests")
    parser.add_argument("--only", action="append", choices=sorted(CONFIGS), default=None)
    parser.add_argument("--profile", type=int, nargs="?", const=30, default=None)
    args = parser.parse_args()
    workload = read_mooncake(args.trace)
    if args.limit is not None:
        workload = attrs.evolve(workload, requests=workload.requests[: args.limit])
    tokens = sum(r.output_length for r in workload.requests)
    print(f"{len(workload.requests)} requests, {tokens} output tokens, 4 engines")
    for name in args.only or list(CONFIGS):
        make_policy, speedup = CONFIGS[name]
        profiler = cProfile.Profile() if args.profile is not None else None
        cpu_start = time.process_time()
        if profiler is not None:
            profiler.enable()
        result = replay_once(workload, make_policy, speedup)
        if profiler is not None:
            profiler.disable()
        cpu = time.process_time() - cpu_start
        passes = sum(e.passes for e in result.meta.engines)
        events = result.meta.events_processed
        print(
            f"{name:>14}: {cpu:7.2f} s CPU, {passes:>9,} passes ({passes / cpu:>9,.0f}/s), "
            f"{events:>10,} events, {cpu / passes * 1e6:6.1f} us/pass, "
            f"prefix reuse {result.summary.prefix_reuse_ratio:.6f}, "
            f"requests.jsonl {digest(result)}"
        )
        if profiler is not None:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
