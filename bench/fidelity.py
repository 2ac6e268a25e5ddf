"""Cross-check: simclock's per-request results against AISimulate's, request by request.

Run ``python bench/fidelity.py [--requests 2000] [--blocks 3000] [--admit-whole-prompt]
[--evict-empty-first] [--pd [--reserve-one-per-pass]]``.

Both replay the first ``--requests`` rows of the Mooncake conversation trace on 4 aggregated
workers of ``--blocks`` KV blocks (64 tokens), fixed pass timing 50/10 ms, chunked prefill with
``max_num_batched_tokens`` 8192, ``max_num_seqs`` 256, prefix caching, round robin, the trace's
own pace (the configuration of ``bench/vs_aisimulate.py`` with a smaller cache, so that blocks
run short). For every request the script compares its first-token and last-token instants, its
number of admissions and its terminal status, and prints how many are equal and the first
differences. ``--admit-whole-prompt`` and ``--evict-empty-first`` set those options of
``EngineConfig``, the admission rule and the free-block order of AISimulate's replay
(docs/reference/engines.md). ``--pd`` replays disaggregated instead: 2 prefill and 2 decode
workers, a 50 GB/s link at 262,144 bytes per token, source-first placement, round robin on
both sides; it compares the decode-side reservation instant instead of the admissions, and
``--reserve-one-per-pass`` sets that option of the decode engines.

AISimulate runs in its own environment (bench/README.md says how to install it; looked for as
in ``bench/vs_aisimulate.py``).
"""

from __future__ import annotations

import argparse
import json
import lzma
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == HERE:
    del sys.path[0]  # run as a script: this directory must not shadow the packages

WORKERS = 4


def _simclock(trace: Path, blocks: int, pd: bool, **options: bool) -> dict[int, tuple[object, ...]]:
    """simclock's results per trace row (ids ``row:N``, rows counted from 1): first token
    ms, last token ms, admissions, status."""
    from engines import EngineConfig, FixedTiming, VLLMScheduler
    from loadgen import LoadMode, read_mooncake
    from policies import PDPolicy, RoundRobin
    from replay import Aggregated, Disaggregated, KVLink, run

    engine = EngineConfig(
        num_blocks=blocks,
        block_size=64,
        max_num_batched_tokens=8192,
        max_num_seqs=256,
        scheduler=VLLMScheduler(
            admit_whole_prompt=options.get("admit_whole_prompt", False),
            evict_empty_first=options.get("evict_empty_first", False),
        ),
        reserve_one_per_pass=options.get("reserve_one_per_pass", False),
    )
    timing = FixedTiming(prefill_ms=50.0, decode_ms=10.0)
    workload = read_mooncake(trace, source="row")
    load = LoadMode(speedup=1.0)
    if not pd:
        topology = Aggregated(workers=WORKERS, engine=engine, timing=timing)
        result = run(workload, topology=topology, policy=RoundRobin(), load=load)
        return {
            int(r.request_id.split(":")[1]): (
                r.first_token_ms,
                r.terminal_ms,
                len(r.admissions),
                r.status,
            )
            for r in result.requests
        }
    pools = Disaggregated(
        prefill_workers=WORKERS // 2,
        decode_workers=WORKERS // 2,
        prefill_engine=engine,
        decode_engine=engine,
        prefill_timing=timing,
        decode_timing=timing,
        link=KVLink(kv_bytes_per_token=262_144, bandwidth_gbps=50.0),
        order="source_first",
    )
    result = run(workload, topology=pools, policy=PDPolicy(), load=load)
    return {
        int(r.request_id.split(":")[1]): (
            r.first_token_ms,
            r.terminal_ms,
            None if r.handoff is None else r.handoff.destination_reserved_ms,
            r.status,
        )
        for r in result.requests
    }


def _aisimulate(python: Path, trace: Path, blocks: int, pd: bool) -> dict[int, tuple[object, ...]]:
    """AISimulate's results per trace row (its ids are ``request_N``, rows counted from 1 as
    in simclock's ids)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "per_request.json"
        workers = WORKERS // 2 if pd else WORKERS
        command = [str(python), str(HERE / "_aisim_once.py"), str(trace), str(workers)]
        command += [str(blocks), str(out), *(["pd"] if pd else [])]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"AISimulate failed:\n{done.stderr[-2000:]}")
        records = json.loads(out.read_text())
    return {
        int(p["session_id"].rsplit("_", 1)[1]): (
            p["first_token_ms"],
            p["terminal_time_ms"],
            p["destination_reserved_ms"] if pd else p["admission_count"],
            p["terminal_status"],
        )
        for p in records
    }


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, int | float) and isinstance(y, int | float):
            if abs(x - y) > 1e-6:
                return False
        elif x != y:
            return False
    return True


def main() -> None:
    """Replay the rows with both simulators and print the comparison."""
    from vs_aisimulate import aisim_python, default_trace

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--blocks", type=int, default=3000)
    parser.add_argument("--admit-whole-prompt", action="store_true")
    parser.add_argument("--evict-empty-first", action="store_true")
    parser.add_argument("--pd", action="store_true")
    parser.add_argument("--reserve-one-per-pass", action="store_true")
    parser.add_argument("--aisim-python", default=None)
    args = parser.parse_args()
    python = aisim_python(args.aisim_python)
    if python is None:
        raise SystemExit("AISimulate is not installed: see bench/README.md")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "rows.jsonl"
        with lzma.open(default_trace(), "rb") as src:
            lines = src.read().splitlines()[: args.requests]
        trace.write_bytes(b"\n".join(lines) + b"\n")
        theirs = _aisimulate(python, trace, args.blocks, args.pd)
        options = {
            "admit_whole_prompt": args.admit_whole_prompt,
            "evict_empty_first": args.evict_empty_first,
        }
        if args.reserve_one_per_pass:
            options["reserve_one_per_pass"] = True
        mine = _simclock(trace, args.blocks, args.pd, **options)
    rows = sorted(set(mine) | set(theirs))
    differ = [i for i in rows if i not in mine or i not in theirs or not _same(mine[i], theirs[i])]
    third = "decode reservation" if args.pd else "admissions"
    print(
        f"{len(rows) - len(differ)} of {len(rows)} requests equal "
        f"(first token, last token, {third}, status); "
        f"{'P/D, ' if args.pd else ''}{args.blocks} blocks per worker, "
        + ", ".join(f"{k}={v}" for k, v in options.items())
    )
    for i in differ[:5]:
        print(f"  row {i}: simclock {mine.get(i)}  AISimulate {theirs.get(i)}")


if __name__ == "__main__":
    sys.path.append(str(HERE))  # for vs_aisimulate, after the packages (bench/replay.py)
    main()
