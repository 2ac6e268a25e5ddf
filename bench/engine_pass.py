"""Benchmark: the cost of one pass in each timing model, and of a whole default replay.

Run ``python bench/engine_pass.py [--repeats N] [--no-passes] [--no-replay] [--trace PATH]
[--limit N] [--shapes]``.

Prints, per timing model and pass shape, the median CPU time (``time.process_time``) of one
``pass_time_ms`` call over several repeats; the cost of building the ``PassShape`` the way the
engine does (five small arrays from lists); and the CPU time of the default replay
(``simclock replay`` with no options: the bundled sample, 4 engines, roofline timing,
round-robin), or of ``--trace PATH`` instead (its first ``--limit N`` requests). ``--shapes``
also prints how many entries the replay's passes had. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path and bench/replay.py would
# shadow the ``replay`` package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import attrs
import numpy as np

import replay
import replay.config
from engines import (
    FixedTiming,
    LinearTiming,
    PassShape,
    PolynomialTiming,
    Role,
    RooflineTiming,
    TableTiming,
    TimingModel,
    gpu_spec,
    model_arch,
)
from loadgen import dataset_path, read_trace

Rows = tuple[list[int], list[int], list[int], list[int], list[bool]]

MODELS: dict[str, TimingModel] = {
    "fixed": FixedTiming(prefill_ms=50, decode_ms=10),
    "polynomial": PolynomialTiming(),
    "linear": LinearTiming(c0=3.0, c_p=0.02, c_d=0.2, c_kv=1e-4, c_pp=1e-7),
    "roofline": RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b")),
    "roofline-tp2": RooflineTiming(
        gpu=gpu_spec("H100"),
        model=model_arch("llama-3.1-70b"),
        tensor_parallel=4,
        link_bandwidth_GBps=450.0,
    ),
    "table": TableTiming(
        prefill_tokens=[128, 1024, 8192],
        prefill_ms=[12.0, 30.0, 180.0],
        decode_batch=[1, 16, 256],
        decode_context=[512, 8192, 65536],
        decode_ms=[[6, 7, 12], [7, 10, 30], [12, 30, 200]],
    ),
}


def rows(size: int, kind: str, seed: int = 11) -> Rows:
    """``size`` entries: ``decode`` (all decodes), ``decode+1`` (decodes and one prompt chunk)
    or ``mixed`` (half decodes, half prompt chunks and fresh prompts)."""
    rng = np.random.default_rng(seed + size)
    n: list[int] = []
    c: list[int] = []
    p: list[int] = []
    ob: list[int] = []
    s: list[bool] = []
    prompts = {"decode": 0, "decode+1": 1, "mixed": size // 2}[kind]
    for i in range(size):
        prompt = int(rng.integers(200, 16_000))
        if i < size - prompts:  # a decode entry
            out = int(rng.integers(1, 400))
            n.append(1)
            c.append(prompt + out - 1)
            p.append(prompt)
            ob.append(out)
            s.append(True)
        else:  # a prompt chunk, the last one reaching the end of its prompt
            start = int(rng.integers(0, prompt // 2))
            chunk = int(rng.integers(16, 512))
            done = start + chunk >= prompt or i == size - 1
            if done:
                chunk = prompt - start
            n.append(chunk)
            c.append(start)
            p.append(prompt)
            ob.append(0)
            s.append(done)
    return n, c, p, ob, s


def build(r: Rows, role: Role = "aggregated") -> PassShape:
    """The pass shape, built the way the engine builds it."""
    return PassShape(
        np.array(r[0], dtype=np.int64),
        np.array(r[1], dtype=np.int64),
        np.array(r[2], dtype=np.int64),
        np.array(r[3], dtype=np.int64),
        np.array(r[4], dtype=np.bool_),
        role,
        6000 * 64,
    )


def per_call_us(fn: Callable[[], object], *, repeats: int, target_s: float = 0.02) -> float:
    """Median CPU microseconds of one ``fn()`` over ``repeats`` timed loops."""
    loops = 1
    while True:  # calibrate the loop count to about target_s
        start = time.process_time()
        for _ in range(loops):
            fn()
        if time.process_time() - start >= target_s / 4 or loops >= 1 << 20:
            break
        loops *= 4
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(loops):
            fn()
        samples.append((time.process_time() - start) / loops * 1e6)
    return statistics.median(samples)


CASES: list[tuple[str, int, str, Role]] = [
    ("1 decode", 1, "decode", "aggregated"),
    ("1 prompt", 1, "mixed", "aggregated"),
    ("4 decode", 4, "decode", "aggregated"),
    ("8 decode+1", 8, "decode+1", "aggregated"),
    ("8 mixed", 8, "mixed", "aggregated"),
    ("16 decode+1", 16, "decode+1", "aggregated"),
    ("64 decode+1", 64, "decode+1", "aggregated"),
    ("64 mixed", 64, "mixed", "aggregated"),
    ("256 decode", 256, "decode", "aggregated"),
    ("256 mixed", 256, "mixed", "aggregated"),
    ("64 mixed prefill-role", 64, "mixed", "prefill"),
    ("64 decode decode-role", 64, "decode", "decode"),
]


def pass_table(repeats: int) -> None:
    """Print per-pass microseconds per model and shape."""
    names = list(MODELS)
    header = f"{'pass shape (µs/pass, CPU)':<24}" + "".join(f"{n:>13}" for n in names)
    print(header + f"{'build':>10}")
    for label, size, kind, role in CASES:
        r = rows(size, kind)
        # Distinct shape objects, cycled, so nothing a shape might cache is reused.
        pool = itertools.cycle([build(r, role) for _ in range(64)])
        cells = []
        for name in names:
            call = partial(_one_pass, MODELS[name], pool)
            cells.append(per_call_us(call, repeats=repeats))
        build_us = per_call_us(partial(build, r, role), repeats=repeats)
        print(f"{label:<24}" + "".join(f"{v:>13.2f}" for v in cells) + f"{build_us:>10.2f}")
    print("('build' is what the engine spends making the PassShape: five np.array calls)")


def _one_pass(model: TimingModel, pool: itertools.cycle[PassShape]) -> float:
    return model.pass_time_ms(next(pool))


@attrs.frozen
class _Recording:
    """Wraps a timing model and counts the batch sizes it is asked about."""

    inner: TimingModel
    sizes: Counter[int] = attrs.field(factory=Counter)

    def pass_time_ms(self, shape: PassShape) -> float:
        self.sizes[len(shape.scheduled)] += 1
        return self.inner.pass_time_ms(shape)


def replay_cpu_s(trace: str | None, *, repeats: int, shapes: bool, limit: int | None) -> None:
    """Print the CPU seconds of the replay ``simclock replay [trace] --quiet`` runs."""
    config = replay.config.resolve_config({}, {"trace": trace})
    if trace is None:
        workload = read_trace(dataset_path("mooncake-sample"), format=config.format)
    else:
        workload = read_trace(trace, format=config.format)
    if limit is not None:
        workload = attrs.evolve(workload, requests=workload.requests[:limit])
    timing = config.build_timing()
    recorder = _Recording(timing)
    samples = []
    passes = 0
    for i in range(repeats):
        topology = replay.Aggregated(
            workers=config.workers,
            engine=config.build_engine(),
            timing=recorder if (shapes and i == 0) else timing,
        )
        start = time.process_time()
        replay.run(workload, topology=topology, policy=config.build_policy(), seed=config.seed)
        samples.append(time.process_time() - start)
    passes = sum(recorder.sizes.values())
    label = trace or "bundled sample"
    print(
        f"replay {label} ({len(workload.requests)} requests, {config.workers} engines, "
        f"{config.timing.name}, {config.policy.name}): "
        f"median {statistics.median(samples):.3f} s CPU over {repeats} runs "
        f"(min {min(samples):.3f}, max {max(samples):.3f})"
    )
    if shapes and passes:
        buckets = Counter[str]()
        for size, count in recorder.sizes.items():
            edge = next(e for e in (1, 4, 16, 64, 256, 1 << 30) if size <= e)
            buckets[f"<={edge}" if edge < 1 << 30 else ">256"] += count
        print(
            f"  {passes} passes; entries per pass: "
            + ", ".join(
                f"{k}: {v}"
                for k, v in sorted(buckets.items(), key=lambda kv: int(kv[0].strip("<=>")))
            )
        )


def main() -> None:
    """Parse the options and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-replay", action="store_true")
    parser.add_argument("--no-passes", action="store_true")
    parser.add_argument("--trace", default=None)
    parser.add_argument("--shapes", action="store_true")
    parser.add_argument("--limit", type=int, default=None, help="replay the first N requests")
    args = parser.parse_args()
    if not args.no_passes:
        pass_table(args.repeats)
    if not args.no_replay:
        replay_cpu_s(
            args.trace,
            repeats=args.repeats if args.trace is None else 1,
            shapes=args.shapes,
            limit=args.limit,
        )


if __name__ == "__main__":
    main()
