"""Benchmark: simclock against AISimulate on the Mooncake conversation trace, side by side.

Run ``python bench/vs_aisimulate.py [--reps 5] [--stepping macro|pass|both] [--trace PATH]``.

The measurement: the Mooncake conversation trace (12,031 requests) on 4 aggregated workers,
fixed pass timing 50/10 ms, engine blocks of 64 tokens, 1,000,000 KV blocks per worker,
``max_num_batched_tokens`` 8192, ``max_num_seqs`` 256, round robin, the trace's own pace,
per-request records kept. simclock's figure is the process CPU time (``time.process_time``)
of reading the trace plus ``replay.run``, with its modules loaded before; AISimulate's is the
CPU time of its ``runner.run(spec)`` with per-request capture, which includes its own trace
load (its modules and runner are made before). Both read the same plain JSON-lines file: the
shipped trace is xz-compressed, so it is decompressed once, untimed, before the repetitions
(decompressing it costs about 18 ms of CPU, which simclock's figure included until
2026-12-07). Each repetition runs simclock then
AISimulate, each in a fresh process, so the two alternate on the machine; the script prints
every repetition, the medians and the ratio (AISimulate CPU time / simclock CPU time: above 1
means simclock is faster). With ``--stepping both`` it also runs
simclock with one engine deadline per pass and prints both pass rates (passes per CPU second).

AISimulate is optional: without it the script times simclock alone and says how to install it
(bench/README.md). It is looked for at ``$AISIM_VENV/bin/python`` (default
``${TMPDIR:-/tmp}/anchors/aisim/bin/python``) or ``--aisim-python``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Run as a script, this file's directory comes first on sys.path and its name would shadow
# the ``replay`` package.
if sys.path and Path(sys.path[0]).resolve() == HERE:
    del sys.path[0]

WORKERS = 4
KV_BLOCKS = 1_000_000


def default_trace() -> Path:
    """The Mooncake conversation trace shipped with simclock."""
    from loadgen import dataset_path

    return dataset_path("mooncake-conversation")


def simclock_once(trace: Path, stepping: str, digest: bool) -> None:
    """Child process: read the trace and replay it; print CPU seconds, passes, digest."""
    import numpy.ma
    import numpy.random

    import simclock
    from engines import EngineConfig, FixedTiming
    from loadgen import LoadMode, read_mooncake
    from policies import RoundRobin
    from replay import Aggregated, run, write_outputs

    # Modules are loaded before the timer, as AISimulate's are in its timing: simclock's
    # submodules that load on first use, and numpy's that a run reaches (seed streams;
    # ``numpy.unique`` loads ``numpy.ma``).
    for name in simclock.__all__:
        getattr(simclock, name)
    del numpy

    topology = Aggregated(
        workers=WORKERS,
        engine=EngineConfig(
            num_blocks=KV_BLOCKS, block_size=64, max_num_batched_tokens=8192, max_num_seqs=256
        ),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    start = time.process_time()
    workload = read_mooncake(trace)
    result = run(
        workload,
        topology=topology,
        policy=RoundRobin(),
        seed=2026,
        load=LoadMode(speedup=1.0),
        stepping=stepping,  # type: ignore[arg-type]
    )
    cpu = time.process_time() - start
    passes = sum(e.passes for e in result.meta.engines)
    print(f"simclock_cpu_s {cpu:.4f}")
    print(f"passes {passes}")
    print(f"completed {result.summary.completed}")
    if digest:
        with tempfile.TemporaryDirectory() as out:
            write_outputs(result, out)
            data = (Path(out) / "requests.jsonl").read_bytes()
        print(f"digest {hashlib.sha256(data).hexdigest()[:16]}")


def _child(command: list[str]) -> dict[str, str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed:\n{done.stderr[-2000:]}")
    out = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        out[key] = value
    return out


def aisim_python(explicit: str | None) -> Path | None:
    """AISimulate's interpreter, if installed."""
    if explicit:
        return Path(explicit)
    venv = os.environ.get("AISIM_VENV") or str(
        Path(os.environ.get("TMPDIR", "/tmp")) / "anchors" / "aisim"
    )
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        return None
    probe = subprocess.run(
        [str(python), "-c", "import aisimulate.runner"], capture_output=True, check=False
    )
    return python if probe.returncode == 0 else None


def main() -> None:
    """Run the interleaved repetitions and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--stepping", choices=["macro", "pass", "both"], default="macro")
    parser.add_argument("--aisim-python", default=None)
    parser.add_argument("--child", choices=["macro", "pass"], help=argparse.SUPPRESS)
    parser.add_argument("--digest", action="store_true", help="print requests.jsonl digests")
    args = parser.parse_args()
    trace = args.trace or default_trace()
    if args.child:
        simclock_once(trace, args.child, args.digest)
        return
    # both simulators read the same plain file; the shipped trace is compressed
    with tempfile.TemporaryDirectory() as tmp:
        # the same name without the compression suffix: request ids begin with the file's stem
        plain = Path(tmp) / trace.with_suffix("").name
        if trace.suffix in (".xz", ".gz"):
            import gzip
            import lzma

            opener = lzma.open if trace.suffix == ".xz" else gzip.open
            with opener(trace, "rb") as src:
                plain.write_bytes(src.read())
        else:
            plain = trace
        _compare(args, trace, plain)


def _compare(args: argparse.Namespace, trace: Path, plain: Path) -> None:
    python = aisim_python(args.aisim_python)
    steppings = ["macro", "pass"] if args.stepping == "both" else [args.stepping]
    cpu: dict[str, list[float]] = {s: [] for s in [*steppings, "aisimulate"]}
    passes: dict[str, int] = {}
    digests: dict[str, set[str]] = {s: set() for s in steppings}
    me = [sys.executable, str(Path(__file__).resolve()), "--trace", str(plain)]
    print(f"trace {trace} (both read it as plain text)")
    print(f"{WORKERS} workers, {KV_BLOCKS:,} blocks each, fixed 50/10 ms")
    if python is None:
        print("AISimulate not installed: timing simclock alone (see bench/README.md)")
    for rep in range(args.reps):
        line = [f"rep {rep}:"]
        for stepping in steppings:
            extra = ["--digest"] if args.digest else []
            got = _child([*me, "--child", stepping, *extra])
            cpu[stepping].append(float(got["simclock_cpu_s"]))
            passes[stepping] = int(got["passes"])
            if "digest" in got:
                digests[stepping].add(got["digest"])
            line.append(f"simclock[{stepping}] {cpu[stepping][-1]:.2f} s")
        if python is not None:
            here = str(HERE / "_aisim_once.py")
            got = _child([str(python), here, str(plain), str(WORKERS), str(KV_BLOCKS)])
            cpu["aisimulate"].append(float(got["aisim_cpu_s"]))
            line.append(f"aisimulate {cpu['aisimulate'][-1]:.2f} s")
        print("  ".join(line), flush=True)
    print()
    print(f"{'runner':<20} {'median CPU s':>12} {'passes/CPU s':>14}")
    for stepping in steppings:
        median = statistics.median(cpu[stepping])
        print(f"{'simclock ' + stepping:<20} {median:>12.3f} {passes[stepping] / median:>14,.0f}")
    if cpu["aisimulate"]:
        anchor = statistics.median(cpu["aisimulate"])
        print(f"{'aisimulate':<20} {anchor:>12.3f}")
        for stepping in steppings:
            ratio = anchor / statistics.median(cpu[stepping])
            print(f"speed vs AISimulate (simclock {stepping}): {ratio:.2f}x")
    for stepping, seen in digests.items():
        if seen:
            print(f"requests.jsonl digest ({stepping}): {', '.join(sorted(seen))}")


if __name__ == "__main__":
    main()
