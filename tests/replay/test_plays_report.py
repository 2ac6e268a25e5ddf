"""Records and metrics of agentic play instances (REFERENCE-workloads §5.4, §5.6, §5.7, §6.6).

Every record of a play instance carries the instance's identity (conversation id, turn,
play id, phase and lineage in the ``P#k`` namespace), released or not; the summary metrics
are computed over the measured cohort only (completed requests of phase ``measure``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from engines import EngineConfig, FixedTiming
from loadgen import (
    LoadMode,
    Profile,
    Request,
    Workload,
    lineage_from_json,
    read_mooncake,
    read_weka,
)
from policies import PolicyContext, SessionAffinity, conversation_key
from replay import SLO, Aggregated, Handoff, ReplayResult, RequestRecord, pd_phases, run
from replay._output import _dumps, request_json


def _call(t: float, *, out: int = 3, size: int = 128, api: float = 1.0) -> dict[str, Any]:
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": size,
        "out": out,
        "api_time": api,
        "hash_ids": list(range(1, size // 64 + 1)),
    }


def _weka(tmp_path: Path, *, sub_out: int = 3, sub_size: int = 128) -> Workload:
    """One play ``ex:P`` (§8 example c): main calls at 0, 8, 12 s, subagent ``agent_001``
    spawned at 5 s with calls at 5 and 7 s; ``sub_out``/``sub_size`` shape its second call."""
    marker = {
        "t": 5,
        "type": "subagent",
        "agent_id": "agent_001",
        "status": "completed",
        "duration_ms": 4000,
        "requests": [_call(0), _call(2, out=sub_out, size=sub_size)],
    }
    play = {
        "id": "P",
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": [_call(0, api=2.0), marker, _call(8), _call(12)],
    }
    path = tmp_path / "ex.jsonl"
    path.write_text(json.dumps(play) + "\n", encoding="utf-8")
    return read_weka(path)


def _topology(workers: int = 1, *, context_length: int | None = None) -> Aggregated:
    engine = EngineConfig(num_blocks=200)
    if context_length is not None:
        engine = EngineConfig(num_blocks=200, context_length=context_length)
    return Aggregated(
        workers=workers, engine=engine, timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0)
    )


@attrs.define(eq=False)
class _KeyRecorder(SessionAffinity):
    """Session affinity that remembers the key it saw for every request it placed."""

    keys: dict[str, str | None] = attrs.field(factory=dict, init=False)

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        self.keys[request.id] = conversation_key(request)
        return super().choose(request, ctx)


def _instance_of(record: RequestRecord) -> str:
    """``ex:P#k`` of an instance record's id ``ex:P#k/<conversation>/<n>``."""
    return record.request_id.split("/", 1)[0]


def _corpus_id(record: RequestRecord) -> str:
    instance = _instance_of(record)
    return "ex:P" + record.request_id[len(instance) :]


def _check_instance_identity(record: RequestRecord, corpus: dict[str, Request]) -> None:
    """The record carries the identity ``instance_requests`` gives the corpus request."""
    instance = _instance_of(record)
    source = corpus[_corpus_id(record)].identity
    conversation = source.conversation_id
    assert conversation is not None and conversation.startswith("ex:P/")
    assert record.conversation_id == instance + conversation[len("ex:P") :]
    assert record.turn_index == source.turn_index
    assert record.play_id == instance
    assert record.phase == "measure"
    assert record.lineage is not None
    assert record.lineage["root_conversation_id"] == f"{instance}/main"
    if conversation.endswith("/agent_001"):
        assert record.lineage["parent_conversation_id"] == f"{instance}/main"
    else:
        assert "parent_conversation_id" not in record.lineage


def test_instances_of_a_play_carry_their_own_identity_and_policies_key_by_it(
    tmp_path: Path,
) -> None:
    # Two lanes over one play: the play runs twice, as ex:P#0 on lane 0 and ex:P#1 on lane 1.
    workload = _weka(tmp_path)
    corpus = {r.id: r for r in workload.requests}
    policy = _KeyRecorder()
    result = run(workload, topology=_topology(2), policy=policy, load=LoadMode(lanes=2))
    ids = [r.request_id for r in result.requests]
    assert ids == [
        f"ex:P#{k}/{rest}"
        for k in (0, 1)
        for rest in ("main/0", "agent_001/0", "agent_001/1", "main/1", "main/2")
    ]
    assert all(r.status == "completed" for r in result.requests)
    for record in result.requests:
        _check_instance_identity(record, corpus)
    sub = result.requests[7]
    assert (sub.request_id, sub.conversation_id, sub.turn_index) == (
        "ex:P#1/agent_001/1",
        "ex:P#1/agent_001",
        1,
    )
    assert sub.lineage == {
        "schema": "conversation-lineage",
        "version": 1,
        "root_conversation_id": "ex:P#1/main",
        "parent_conversation_id": "ex:P#1/main",
    }
    # The policy saw the instance's lineage: each instance is its own affinity key, so the
    # second instance is not sent after the first one's engine.
    assert policy.keys == {rid: _instance_of_id(rid) + "/main" for rid in ids}
    engines = {r.request_id: r.engine for r in result.requests}
    assert {engines[rid] for rid in ids[:5]} == {0}
    assert {engines[rid] for rid in ids[5:]} == {1}


def _instance_of_id(request_id: str) -> str:
    return request_id.split("/", 1)[0]


def _profile_run(tmp_path: Path, *, duration_s: float, policy: SessionAffinity) -> ReplayResult:
    # One lane, snapshot seed 42, warm-up of 2: ex:P#0 starts mid-play after one primer and two
    # warm-ups (B = 150 ms); the lane is then recycled to ex:P#1, ex:P#2, ... until the cutoff.
    # The subagent's second call decodes for 4 s.
    workload = _weka(tmp_path, sub_out=400)
    load = LoadMode(
        lanes=1,
        snapshots=True,
        snapshot_seed=42,
        warmup=True,
        warmup_repeats=2,
        profile=Profile(duration_s=duration_s, grace_s=1.0),
    )
    return run(workload, topology=_topology(), policy=policy, load=load)


def test_a_recycled_instance_and_its_unreleased_requests_carry_the_instance_identity(
    tmp_path: Path,
) -> None:
    # Cutoff at 12,150 ms, grace to 13,150 ms: ex:P#1/agent_001/1 (released at ~10.7 s,
    # 4 s of decode) is cancelled, and ex:P#1/main/2, waiting for ex:P#1/main/1's
    # completion + 3 s past the cutoff, is never issued.
    workload = _weka(tmp_path, sub_out=400)
    corpus = {r.id: r for r in workload.requests}
    policy = _KeyRecorder()
    result = _profile_run(tmp_path, duration_s=12.0, policy=policy)
    status = {r.request_id: r.status for r in result.requests}
    assert status["ex:P#1/agent_001/1"] == "cancelled"
    assert status["ex:P#1/main/2"] == "never_issued"
    measured = [r for r in result.requests if r.phase == "measure"]
    assert {_instance_of(r) for r in measured} == {"ex:P#0", "ex:P#1"}
    for record in measured:
        _check_instance_identity(record, corpus)
    never = next(r for r in result.requests if r.request_id == "ex:P#1/main/2")
    assert (never.conversation_id, never.turn_index, never.play_id) == ("ex:P#1/main", 2, "ex:P#1")
    assert (never.input_length, never.output_length, never.arrival_ms) == (128, 3, None)
    # The recycled instance is keyed by its own root, never by ex:P#0's.
    assert policy.keys["ex:P#1/main/0"] == "ex:P#1/main"
    assert policy.keys["ex:P#1/agent_001/0"] == "ex:P#1/main"
    assert {policy.keys[r.request_id] for r in measured if r.arrival_ms is not None} == {
        "ex:P#0/main",
        "ex:P#1/main",
    }


def test_primers_and_warmups_keep_their_source_conversation_in_the_instance_namespace(
    tmp_path: Path,
) -> None:
    result = _profile_run(tmp_path, duration_s=12.0, policy=SessionAffinity())
    prep = [r for r in result.requests if r.phase != "measure"]
    assert [(r.request_id, r.phase) for r in prep] == [
        ("ex:P#0/primer/0", "primer"),
        ("ex:P#0/warmup/0", "warmup"),
        ("ex:P#0/warmup/1", "warmup"),
    ]
    for record in prep:
        assert (record.conversation_id, record.turn_index, record.play_id) == (
            "ex:P#0/main",
            None,
            "ex:P#0",
        )
        assert record.lineage == {
            "schema": "conversation-lineage",
            "version": 1,
            "root_conversation_id": "ex:P#0/main",
        }


def test_skipped_instance_requests_carry_the_instance_identity(tmp_path: Path) -> None:
    # The subagent's second call (1,024 tokens) is refused by a 1,000-token context: the play
    # fails, the calls not yet released are skipped, and every record names its instance.
    workload = _weka(tmp_path, sub_size=1024)
    corpus = {r.id: r for r in workload.requests}
    result = run(
        workload,
        topology=_topology(context_length=1000),
        policy=SessionAffinity(),
        load=LoadMode(lanes=1),
    )
    status = {r.request_id: r.status for r in result.requests}
    assert status == {
        "ex:P#0/main/0": "completed",
        "ex:P#0/agent_001/0": "completed",
        "ex:P#0/agent_001/1": "rejected",
        "ex:P#0/main/1": "skipped",
        "ex:P#0/main/2": "skipped",
    }
    for record in result.requests:
        _check_instance_identity(record, corpus)
    skipped = next(r for r in result.requests if r.request_id == "ex:P#0/main/2")
    assert (skipped.input_length, skipped.output_length, skipped.turn_index) == (128, 3, 2)


def test_throughput_with_a_warmup_counts_the_measured_cohort_only(tmp_path: Path) -> None:
    # Duration 20 s: ex:P#0 (live part) and ex:P#1 complete, ex:P#2 is cut off. One primer and
    # two warm-ups completed too, from 0 to 150 ms; they count in the statuses only.
    result = _profile_run(tmp_path, duration_s=20.0, policy=SessionAffinity())
    records = result.requests
    summary = result.summary
    prep = [r for r in records if r.phase != "measure"]
    assert len(prep) == 3 and all(r.status == "completed" for r in prep)
    measured = [r for r in records if r.phase == "measure"]
    cohort = [r for r in measured if r.status == "completed"]
    assert len(cohort) == 7
    assert summary.status_counts["completed"] == len(cohort) + len(prep)
    assert summary.requests == len(records)
    assert summary.completed == len(cohort)

    first_arrival_ms = min(r.arrival_ms for r in measured if r.arrival_ms is not None)
    last_completion_ms = max(r.terminal_ms for r in cohort if r.terminal_ms is not None)
    assert summary.plays is not None and summary.plays.profile_start_ms == 150.0
    assert first_arrival_ms > 150.0  # not the primers' start at 0
    duration_s = (last_completion_ms - first_arrival_ms) / 1000
    assert summary.duration_s == pytest.approx(duration_s, rel=1e-12)
    input_tokens = sum(r.input_length for r in cohort)
    output_tokens = sum(r.output_tokens for r in cohort)
    assert (summary.total_input_tokens, summary.total_output_tokens) == (
        input_tokens,
        output_tokens,
    )
    assert summary.request_throughput == pytest.approx(len(cohort) / duration_s, rel=1e-12)
    assert summary.input_throughput == pytest.approx(input_tokens / duration_s, rel=1e-12)
    assert summary.output_throughput == pytest.approx(output_tokens / duration_s, rel=1e-12)
    assert summary.total_token_throughput == pytest.approx(
        (input_tokens + output_tokens) / duration_s, rel=1e-12
    )
    reused = sum(r.reused_input_tokens for r in cohort)
    assert summary.reused_input_tokens == reused
    assert summary.prefix_reuse_ratio == pytest.approx(reused / input_tokens, rel=1e-12)
    assert summary.ttft_ms.count == len(cohort)


def test_goodput_counts_the_measured_cohort_only(tmp_path: Path) -> None:
    # Every request meets a generous SLO, primers and warm-ups included; only the cohort is
    # good, and attainment is over measured requests.
    workload = _weka(tmp_path, sub_out=400)
    load = LoadMode(
        lanes=1,
        snapshots=True,
        snapshot_seed=42,
        warmup=True,
        warmup_repeats=2,
        profile=Profile(duration_s=20.0, grace_s=1.0),
    )
    result = run(
        workload,
        topology=_topology(),
        policy=SessionAffinity(),
        load=load,
        slo=SLO(e2e_ms=1e9),
    )
    goodput = result.summary.goodput
    assert goodput is not None
    measured = [r for r in result.requests if r.phase == "measure"]
    cohort = [r for r in measured if r.status == "completed"]
    duration_s = result.summary.duration_s
    assert duration_s is not None
    assert goodput.count == len(cohort) == 7
    assert goodput.request_goodput == pytest.approx(len(cohort) / duration_s, rel=1e-12)
    assert goodput.output_throughput == pytest.approx(
        sum(r.output_tokens for r in cohort) / duration_s, rel=1e-12
    )
    assert goodput.attainment == 1.0
    assert goodput.attainment_of_all == pytest.approx(len(cohort) / len(measured), rel=1e-12)
    assert all(r.meets_slo is None for r in result.requests if r.phase != "measure")


def test_without_plays_duration_starts_at_the_first_arrival_of_any_request(
    tmp_path: Path,
) -> None:
    # Without plays every request is measured, and duration keeps REFERENCE-engine §8:
    # latest completion of a completed request minus earliest arrival of any request, here a
    # request the engine refused (1,024 tokens into a 1,000-token context).
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 1000, "input_length": 128, "output_length": 3, "hash_ids": [3]},
        {"timestamp": 2000, "input_length": 256, "output_length": 5, "hash_ids": [4]},
    ]
    path = tmp_path / "mc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    workload = read_mooncake(path)
    result = run(workload, topology=_topology(context_length=1000), policy=SessionAffinity())
    assert [r.status for r in result.requests] == ["rejected", "completed", "completed"]
    assert all(r.phase == "measure" for r in result.requests)
    last = result.requests[2]
    assert last.terminal_ms == 2000.0 + 50.0 + 4 * 10.0
    assert result.summary.duration_s == pytest.approx(2.09, rel=1e-12)
    assert result.summary.completed == 2
    assert result.summary.request_throughput == pytest.approx(2 / 2.09, rel=1e-12)
    assert result.summary.total_input_tokens == 128 + 256


def test_pd_phases_leave_out_primers_and_warmups() -> None:
    handoff = Handoff(
        prefill_worker=0,
        decode_worker=1,
        prefill_admit_ms=1.0,
        prefill_done_ms=3.0,
        destination_reserved_ms=3.0,
        transfer_done_ms=4.0,
        decode_admit_ms=4.0,
    )
    record = RequestRecord(
        request_id="x",
        status="completed",
        engine=1,
        input_length=10,
        output_length=1,
        output_tokens=1,
        reused_input_tokens=0,
        num_preemptions=0,
        truncated=False,
        rejection_reason=None,
        failure_reason=None,
        arrival_ms=0.0,
        tokenize_start_ms=None,
        tokenized_ms=None,
        engine_arrival_ms=0.0,
        first_admit_ms=1.0,
        first_token_ms=5.0,
        last_token_ms=5.0,
        terminal_ms=5.0,
        ttft_ms=5.0,
        ttst_ms=None,
        tpot_ms=None,
        e2e_ms=5.0,
        queueing_delay_ms=1.0,
        meets_slo=None,
        admissions=(),
        token_times_ms=(5.0,),
        handoff=handoff,
    )
    primer = attrs.evolve(record, request_id="y", phase="primer")
    warmup = attrs.evolve(record, request_id="z", phase="warmup")
    phases = pd_phases([record, primer, warmup])
    assert phases.transfer_ms.count == 1
    assert pd_phases([primer, warmup]).prefill_compute_ms.count == 0


def test_an_instance_record_with_lineage_round_trips_through_json(tmp_path: Path) -> None:
    workload = _weka(tmp_path)
    result = run(workload, topology=_topology(2), policy=SessionAffinity(), load=LoadMode(lanes=2))
    by_id = {r.request_id: r for r in result.requests}
    sub = by_id["ex:P#1/agent_001/0"]
    line = _dumps(request_json(sub), indent=None)
    read = json.loads(line)
    assert read["lineage"] == {
        "schema": "conversation-lineage",
        "version": 1,
        "root_conversation_id": "ex:P#1/main",
        "parent_conversation_id": "ex:P#1/main",
    }
    assert list(read)[-1] == "lineage"
    lineage = lineage_from_json(read["lineage"])
    assert lineage is not None
    assert (lineage.root_conversation_id, lineage.parent_conversation_id) == (
        "ex:P#1/main",
        "ex:P#1/main",
    )
    assert _dumps(read, indent=None) == line  # written back byte for byte
    root = json.loads(_dumps(request_json(by_id["ex:P#1/main/0"]), indent=None))
    assert root["lineage"] == {
        "schema": "conversation-lineage",
        "version": 1,
        "root_conversation_id": "ex:P#1/main",
    }
    # A record without lineage has no lineage key at all.
    plain = attrs.evolve(sub, lineage=None)
    assert "lineage" not in request_json(plain)
    assert '"lineage"' not in _dumps(request_json(plain), indent=None)
