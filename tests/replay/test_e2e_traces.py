"""End to end: the shared Azure and WEKA traces through ``replay.run``, and each shared trace
through ``simclock replay`` on a small slice.

The Mooncake conversation trace is replayed in full, per policy, in ``test_runner_mooncake.py``.

Sizes and timing are chosen so that each full replay stays near 20 s of CPU on one core
(measured with ``time.process_time``): fixed timing (prefill 50 ms, decode 10 ms; the cheapest
model, one multiply-free branch per pass), a handful of engines, and a load mode that packs
the trace's hours into virtual minutes without changing any request.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import attrs

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, Request, Workload, read_azure, read_weka
from policies import RoundRobin, SessionAffinity
from replay import TERMINAL_STATUSES, Aggregated, ReplayResult, run
from replay._cli import EXIT_OK, main

AZURE = Path("azure_llm_2023") / "AzureLLMInferenceTrace_conv.csv"
WEKA = Path("weka_cc") / "weka_cc_traces_v8_shared.tar.xz"
MOONCAKE = Path("mooncake") / "conversation_trace.jsonl"

# Azure: 19,366 standalone requests over 58 minutes, 4.0 M output tokens.
AZURE_SPEEDUP = 8.0
AZURE_WORKERS = 4
# WEKA: 498 plays, 34,085 calls (521 in 50 subagents), inputs of 100 k tokens at the median.
WEKA_LANES = 64
WEKA_SPEEDUP = 100.0
WEKA_INPUT_CAP = 4096
WEKA_OUTPUT_CAP = 16
WEKA_WORKERS = 4


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


def test_the_whole_azure_conversation_trace_replays_every_request(shared_data: Path) -> None:
    """All 19,366 requests of the Azure 2023 conversation trace, unchanged.

    Released at 8x the recorded pace (root times divided by 8: the 58-minute trace arrives in
    about 7.3 virtual minutes, 44 requests/s) on 4 engines with fixed timing and 4,096 KV
    blocks of 64 tokens each (262 k tokens per engine, enough for the largest batch here, so
    the run measures queueing rather than preemption). The replay takes about 18 s of CPU
    (time.process_time, 2-core machine under load); the cost is the engines' per-pass
    scheduling and commit work, linear in the 4.0 M output tokens.
    """
    workload = read_azure(shared_data / AZURE)
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
    assert sorted({r.engine for r in result.requests}) == [0, 1, 2, 3]
    assert result.summary.preemptions == 0
    # releases keep the trace's order and are compressed 8x (first arrival at 0)
    arrivals = [r.arrival_ms for r in result.requests]
    assert arrivals[0] == 0.0
    last_nominal = max(r.arrival_ms for r in workload.requests)
    assert max(a for a in arrivals if a is not None) == last_nominal / AZURE_SPEEDUP


def _capped_weka(shared_data: Path) -> Workload:
    """The whole WEKA corpus with every prompt cut to its first 4,096 tokens (its first 64
    content ids, so shared prefixes stay shared) and every output to 16 tokens."""
    workload = read_weka(shared_data / WEKA)

    def cap(request: Request) -> Request:
        prompt = min(request.input_length, WEKA_INPUT_CAP)
        return attrs.evolve(
            request,
            input_length=prompt,
            hash_ids=request.hash_ids[: -(-prompt // request.block_size)],
            output_length=min(request.output_length, WEKA_OUTPUT_CAP),
        )

    return attrs.evolve(workload, requests=tuple(cap(r) for r in workload.requests))


def test_all_498_weka_conversations_replay_with_their_subagents(shared_data: Path) -> None:
    """All 498 WEKA plays — 34,085 calls, the 50 subagents' 521 included — through 64 lanes.

    Every call keeps its play, conversation, dependencies (spawn edges included), pacing
    floor and leading content ids, but prompts are cut to 4,096 tokens and outputs to 16
    tokens; the run takes about 21 s of CPU (time.process_time, 2-core machine under load).
    The uncut corpus is too expensive for the suite, whatever the topology, because the
    engines do Python work per prompt block and per pass:

    - prompts: 34,085 calls re-send their conversation, 63.1 M content ids of 64 tokens in
      all. Profiled (cProfile, 100 plays, 5,188 calls, engine blocks of 64), 63 s of CPU went
      to ``engines/_keys.py`` ``BlockKeyer.known`` (18 s), ``engines/_kv.py`` ``allocate``
      (16 s), ``release`` (13 s) and ``register`` (1.9 M calls) and ``engines/_core.py``
      ``_lookup``; with engine blocks of 1,024 tokens the same run spends 18 s of 31 s in
      ``engines/_keys.py`` ``block_content`` (700 k engine blocks, 26 µs each). Extrapolated,
      the full prompts cost 100-170 s of CPU.
    - outputs: 13.3 M output tokens; a conversation's calls run one after another, so at the
      recorded pace engines decode tiny batches (40 plays on 8 engines: 1.05 M passes for
      1.24 M tokens, ``engines/_core.py`` ``schedule`` + ``commit`` + ``_duration_ns`` +
      ``FixedTiming.pass_time_ms`` about 30 µs per pass). Packing plays onto fewer engines
      trades that for the same functions' per-entry work, about 4 µs per output token.

    64 lanes, each taking the next play when its play ends, released at 100x the recorded
    pace, on 4 engines of 8,192 blocks of 64 tokens; ``session_affinity`` keeps a
    conversation on one engine so its prompts hit the prefix cache.
    """
    workload = _capped_weka(shared_data)
    assert len(workload.plays) == 498
    assert len(workload.requests) == 34_085
    topology = Aggregated(
        workers=WEKA_WORKERS,
        engine=EngineConfig(num_blocks=8192, block_size=64, max_num_batched_tokens=16_384),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(
        workload,
        topology=topology,
        policy=SessionAffinity(),
        seed=2026,
        load=LoadMode(lanes=WEKA_LANES, speedup=WEKA_SPEEDUP),
    )
    _check_accounting(result, 34_085)
    assert result.summary.status_counts["completed"] == 34_085
    ids = {r.request_id for r in result.requests}
    assert "weka_cc_traces_v8_shared:trace_0003#0/agent_001/0" in ids
    assert sum(1 for i in ids if "/agent_" in i) == 521
    plays = result.summary.plays
    assert plays is not None
    assert plays.plays == 498
    assert dict(plays.outcome_counts) == {"completed": 498, "failed": 0, "incomplete": 0}
    assert plays.trajectory_ms.count == 498
    assert {o.lane for o in plays.outcomes} == set(range(WEKA_LANES))
    assert result.summary.prefix_reuse_ratio is not None
    assert result.summary.prefix_reuse_ratio > 0.9


# -- the command line on small slices -----------------------------------------------------


def _cli(tmp_path: Path, trace: Path, *args: str) -> dict[str, object]:
    out = tmp_path / "out"
    fast = ["--timing", "fixed", "--workers", "2", "--quiet"]
    code = main(["replay", str(trace), *fast, "--output-dir", str(out), *args])
    assert code == EXIT_OK
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    return summary


def test_cli_replays_a_slice_of_the_azure_trace(shared_data: Path, tmp_path: Path) -> None:
    rows = (shared_data / AZURE).read_text().splitlines(keepends=True)[:301]
    trace = tmp_path / "azure_slice.csv"
    trace.write_text("".join(rows))
    summary = _cli(tmp_path, trace, "--speedup", "2")
    assert summary["workload"] == {"source": "azure_slice", "format": "azure", "requests": 300}
    assert summary["status_counts"]["completed"] == 300  # type: ignore[index]


def test_cli_replays_a_slice_of_the_mooncake_trace(shared_data: Path, tmp_path: Path) -> None:
    rows = (shared_data / MOONCAKE).read_text().splitlines(keepends=True)[200:400]
    trace = tmp_path / "mooncake_slice.jsonl"
    trace.write_text("".join(rows))
    summary = _cli(tmp_path, trace, "--concurrency", "8")
    assert summary["workload"]["requests"] == 200  # type: ignore[index]
    assert summary["status_counts"]["completed"] == 200  # type: ignore[index]


def test_cli_replays_a_slice_of_the_weka_archive(shared_data: Path, tmp_path: Path) -> None:
    # Three plays, trace_0014 with a subagent; the slice is a .tar.xz like the shared archive.
    wanted = {"trace_0007.json", "trace_0014.json", "trace_0016.json"}
    trace = tmp_path / "weka_slice.tar.xz"
    with tarfile.open(shared_data / WEKA) as source, tarfile.open(trace, "w:xz") as sink:
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
