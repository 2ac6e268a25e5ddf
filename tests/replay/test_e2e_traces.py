"""End to end: the shared Azure trace through ``replay.run``, and each shared trace through
``simclock replay`` on a small slice.

The Mooncake conversation trace is replayed in full, per policy, in ``test_runner_mooncake.py``;
the WEKA corpus in full in ``test_e2e_weka.py``.

Every request is replayed as recorded. Sizes and timing keep each full replay within about
a minute of CPU on one core (measured with ``time.process_time``): fixed timing (prefill
50 ms, decode 10 ms; the cheapest model, one multiply-free branch per pass), a few engines,
and a load mode that packs the trace's hours into virtual minutes without changing any
request.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, read_azure
from policies import RoundRobin
from replay import TERMINAL_STATUSES, Aggregated, ReplayResult, run
from replay._cli import EXIT_OK, main
from tests.datasets import AZURE, MOONCAKE, WEKA, lines

# Azure: 19,366 standalone requests over 58 minutes, 4.0 M output tokens.
AZURE_SPEEDUP = 8.0
AZURE_WORKERS = 4


def _check_accounting(result: ReplayResult, expected_requests: int) -> None:
    """Every request has exactly one terminal status and the counts add up."""
    assert len(result.requests) == expected_requests
    assert len({r.request_id for r in result.requests}) == expected_requests
    counts = result.summary.status_counts
    assert tuple(counts) == TERMINAL_STATUSES
    assert sum(counts.values()) == expected_requests
    assert result.evidence.accounted == expected_requests
    for status in counts:
        assert counts[status] == sum(1 for r in result.requests if r.status == status)
    assert result.summary.completed == counts["completed"]


def test_the_whole_azure_conversation_trace_replays_every_request() -> None:
    """All 19,366 requests of the Azure 2023 conversation trace, unchanged.

    Released at 8x the recorded pace (root times divided by 8: the 58-minute trace arrives in
    about 7.3 virtual minutes, 44 requests/s) on 4 engines with fixed timing and 4,096 KV
    blocks of 64 tokens each (262 k tokens per engine, enough for the largest batch here, so
    the run measures queueing rather than preemption). The replay takes about 18 s of CPU
    (time.process_time, 2-core machine under load); the cost is the engines' per-pass
    scheduling and commit work, linear in the 4.0 M output tokens.
    """
    workload = read_azure(AZURE)
    assert len(workload.requests) == 19_366
    topology = Aggregated(
        workers=AZURE_WORKERS,
        engine=EngineConfig(num_blocks=4096, block_size=64, max_num_batched_tokens=16_384),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(
        workload,
        topology=topology,
        policy=RoundRobin(),
        seed=2026,
        load=LoadMode(speedup=AZURE_SPEEDUP),
    )
    _check_accounting(result, 19_366)
    assert result.summary.status_counts["completed"] == 19_366
    total_output = sum(r.output_length for r in workload.requests)
    assert sum(r.output_tokens for r in result.requests) == total_output
    assert {r.engine for r in result.requests} == {0, 1, 2, 3}
    assert result.summary.preemptions == 0
    # releases keep the trace's order and are compressed 8x (first arrival at 0)
    arrivals = [r.arrival_ms for r in result.requests]
    assert arrivals[0] == 0.0
    last_nominal = max(r.arrival_ms for r in workload.requests)
    assert max(a for a in arrivals if a is not None) == last_nominal / AZURE_SPEEDUP


# -- the command line on small slices -----------------------------------------------------


def _cli(tmp_path: Path, trace: Path, *args: str) -> dict[str, object]:
    out = tmp_path / "out"
    fast = ["--timing", "fixed", "--workers", "2", "--quiet"]
    code = main(["replay", str(trace), *fast, "--output-dir", str(out), *args])
    assert code == EXIT_OK
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    return summary


def test_cli_replays_a_slice_of_the_azure_trace(tmp_path: Path) -> None:
    rows = lines(AZURE)[:301]
    trace = tmp_path / "azure_slice.csv"
    trace.write_text("".join(rows))
    summary = _cli(tmp_path, trace, "--speedup", "2")
    assert summary["workload"] == {"source": "azure_slice", "format": "azure", "requests": 300}
    assert summary["status_counts"]["completed"] == 300  # type: ignore[index]


def test_cli_replays_a_slice_of_the_mooncake_trace(tmp_path: Path) -> None:
    rows = lines(MOONCAKE)[200:400]
    trace = tmp_path / "mooncake_slice.jsonl"
    trace.write_text("".join(rows))
    summary = _cli(tmp_path, trace, "--concurrency", "8")
    assert summary["workload"]["requests"] == 200  # type: ignore[index]
    assert summary["status_counts"]["completed"] == 200  # type: ignore[index]


def test_cli_replays_a_slice_of_the_weka_archive(tmp_path: Path) -> None:
    # Three plays, trace_0014 with a subagent; the slice is a .tar.xz like the bundled archive.
    wanted = {"trace_0007.json", "trace_0014.json", "trace_0016.json"}
    trace = tmp_path / "weka_slice.tar.xz"
    with tarfile.open(WEKA) as source, tarfile.open(trace, "w:xz") as sink:
        for member in source:
            if Path(member.name).name in wanted:
                data = source.extractfile(member)
                assert data is not None
                payload = data.read()
                info = tarfile.TarInfo(Path(member.name).name)
                info.size = len(payload)
                sink.addfile(info, io.BytesIO(payload))
                wanted.discard(info.name)
                if not wanted:
                    break  # the archive is 60 MB of xz: read no further than needed
    summary = _cli(tmp_path, trace, "--lanes", "2", "--speedup", "100")
    assert summary["workload"]["format"] == "weka"  # type: ignore[index]
    counts = summary["status_counts"]
    assert counts["completed"] == summary["workload"]["requests"]  # type: ignore[index]
    plays = summary["plays"]
    assert plays["plays"] == 3  # type: ignore[index]
    assert plays["outcome_counts"]["completed"] == 3  # type: ignore[index]
