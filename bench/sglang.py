"""Benchmark: the cost of SGLang's rules at page size 1 on a Mooncake slice.

Run ``python bench/sglang.py [--limit N] [--reps R]``.

Replays the first ``N`` (200) requests of the Mooncake conversation trace (prompts up to
~12,000 tokens: at page size 1, a prompt is that many KV blocks) on four engines of 524,288
KV token slots each, ``FixedTiming(50, 10)``, round-robin at the recorded pace, with four
schedulers: vLLM's rules at ``block_size`` 64, SGLang's at page size 64, and SGLang's at page
size 1 with macro stepping and per pass (the SGLang scheduler plans no macro runs, so those
two are the same work). The configurations are run interleaved, ``R`` (5) rounds; prints the
median process CPU time of each, its ratio to vLLM's, the passes and the prefix reuse ratio.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import attrs

from engines import EngineConfig, FixedTiming, Scheduler, SGLangScheduler
from loadgen import LoadMode, Workload, dataset_path, read_mooncake
from policies import RoundRobin
from replay import Aggregated, run

SLOTS = 524_288  # KV token slots per engine
CONFIGS: dict[str, tuple[int, Scheduler | None, str]] = {
    "vllm E=64": (64, None, "macro"),
    "sglang page=64": (64, SGLangScheduler(page_size=64), "macro"),
    "sglang page=1": (1, SGLangScheduler(), "macro"),
    "sglang page=1 pass": (1, SGLangScheduler(), "pass"),
}


def once(
    workload: Workload, block: int, scheduler: Scheduler | None, stepping: str
) -> tuple[float, int, float]:
    engine = EngineConfig(num_blocks=SLOTS // block, block_size=block)
    if scheduler is not None:
        engine = attrs.evolve(engine, scheduler=scheduler)
    start = time.process_time()
    result = run(
        workload,
        topology=Aggregated(
            workers=4, engine=engine, timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0)
        ),
        policy=RoundRobin(),
        seed=2026,
        load=LoadMode(),
        stepping=stepping,  # type: ignore[arg-type]
    )
    cpu = time.process_time() - start
    passes = sum(e.passes for e in result.meta.engines)
    return cpu, passes, result.summary.prefix_reuse_ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    full = read_mooncake(dataset_path("mooncake-conversation"), source="row")
    workload = attrs.evolve(full, requests=full.requests[: args.limit])
    longest = max(r.input_length for r in workload.requests)
    print(f"{len(workload.requests)} requests, longest prompt {longest} tokens")
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    facts: dict[str, tuple[int, float]] = {}
    for _ in range(args.reps):
        for name, (block, scheduler, stepping) in CONFIGS.items():
            cpu, passes, reuse = once(workload, block, scheduler, stepping)
            times[name].append(cpu)
            facts[name] = (passes, reuse)
    base = statistics.median(times["vllm E=64"])
    for name, samples in times.items():
        med = statistics.median(samples)
        passes, reuse = facts[name]
        print(
            f"{name:20} median CPU {med:7.3f} s  x{med / base:5.2f}  "
            f"passes {passes:6}  reuse {reuse:.4f}"
        )


if __name__ == "__main__":
    main()
