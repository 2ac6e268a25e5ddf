"""Agentic plays: lanes, instances, outcomes, snapshots, warm-up (REFERENCE-workloads §5, §8 d)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loadgen
from loadgen import Dep, Lineage, LoadMode

from .fake_engine import FakeRun
from .test_weka import _call, _marker, _play


def _corpus(tmp_path: Path, *plays: dict[str, Any], name: str = "ex.jsonl") -> loadgen.Workload:
    path = tmp_path / name
    path.write_text("".join(json.dumps(p) + "\n" for p in plays), encoding="utf-8")
    return loadgen.read_weka(path)


def _example_d(tmp_path: Path) -> loadgen.Workload:
    main = [
        _call(float(t), 1, size=size)
        for t, size in zip(range(0, 50, 10), range(128, 448, 64), strict=True)
    ]
    sub = _marker(
        12, "agent_001", [_call(0, 1, size=128), _call(15, 1, size=192), _call(23, 1, size=256)]
    )
    return _corpus(tmp_path, _play([main[0], main[1], sub, *main[2:]], "P"))


def test_one_lane_runs_plays_back_to_back(tmp_path: Path) -> None:
    a = _play([_call(0, 1, out=2), _call(3, 1, out=2), _call(6, 1, out=2)], "A")
    b = _play([_call(0, 1, out=2)], "B")
    run = FakeRun(_corpus(tmp_path, a, b), mode=LoadMode(lanes=1))
    report = run.run()
    assert run.released["ex:B#0/main/0"] == 6060.0
    assert [p.instance_id for p in report.plays] == ["ex:A#0", "ex:B#0"]
    assert [p.lane for p in report.plays] == [0, 0]


def test_more_lanes_than_plays_start_second_instances_with_fresh_ids(tmp_path: Path) -> None:
    a = _play([_call(0, 1)], "A")
    run = FakeRun(_corpus(tmp_path, a), mode=LoadMode(lanes=2))
    report = run.run()
    assert sorted(run.released) == ["ex:A#0/main/0", "ex:A#1/main/0"]
    assert [p.instance_id for p in report.plays] == ["ex:A#0", "ex:A#1"]


def test_later_instances_take_content_ids_above_every_id_of_the_workload(
    tmp_path: Path,
) -> None:
    """A play started again takes fresh content ids from the first id no request of the
    workload uses (worked out when it is first needed), one instance after the other."""
    a = _play([_call(0, 1, size=128), _call(3, 1, size=192)], "A")
    b = _play([_call(0, 1, size=256)], "B")
    workload = _corpus(tmp_path, a, b)
    top = max(int(r.hash_ids.max()) for r in workload.requests) + 1
    seen: dict[str, list[int]] = {}

    class Keeping(FakeRun):
        def _submit(self, request: loadgen.Request) -> None:
            seen[request.id] = request.hash_ids.tolist()
            super()._submit(request)

    Keeping(workload, mode=LoadMode(lanes=5)).run()
    a_span = workload.plays[0].content_ids
    b_span = workload.plays[1].content_ids
    assert seen["ex:A#0/main/0"] == workload.requests[0].hash_ids.tolist()
    # lanes 2..4 start A#1, B#1, A#2 at 0, in that order, each above the one before
    assert seen["ex:A#1/main/0"][0] == top
    assert seen["ex:B#1/main/0"][0] == top + a_span[1] - a_span[0]
    assert seen["ex:A#2/main/0"][0] == top + (a_span[1] - a_span[0]) + (b_span[1] - b_span[0])


def test_instance_rewrites_ids_lineage_and_content(tmp_path: Path) -> None:
    workload = _example_d(tmp_path)
    play = workload.plays[0]
    requests = [workload.requests[i] for i in play.request_indices]
    first = loadgen.instance_requests(requests, play, 0, 0, None)
    second = loadgen.instance_requests(requests, play, 1, 3, 1000)
    sub = second[3]
    assert sub.id == "ex:P#1/agent_001/1"
    assert sub.identity.conversation_id == "ex:P#1/agent_001"
    assert sub.identity.play_id == "ex:P#1"
    assert sub.identity.lane == 3
    assert sub.identity.lineage == Lineage("ex:P#1/main", "ex:P#1/main")
    assert sub.arrival.after == (Dep("ex:P#1/agent_001/0", "completion", 14000.0),)
    assert first[0].hash_ids.tolist() == requests[0].hash_ids.tolist()
    assert second[0].hash_ids.tolist() == [1000, 1001]


def test_a_failed_request_fails_the_play_and_skips_the_rest(tmp_path: Path) -> None:
    a = _play([_call(0, 1), _call(3, 1), _call(6, 1)], "A")
    workload = _corpus(tmp_path, a)
    report = FakeRun(workload, reject=frozenset({"ex:A/main/1"})).run()
    assert [(o.request_id, o.status) for o in report.requests] == [
        ("ex:A/main/0", "completed"),
        ("ex:A/main/1", "rejected"),
        ("ex:A/main/2", "skipped"),
    ]
    assert report.plays[0].outcome == "failed"
    assert report.plays[0].failed_request == "ex:A/main/1"
    assert report.plays[0].trajectory_ms is None


def test_snapshot_u_for_seed_42_lane_0() -> None:
    assert loadgen.snapshot_u(42, 0) == pytest.approx(0.916744, abs=1e-6)


def test_worked_example_d_snapshot_cut(tmp_path: Path) -> None:
    workload = _example_d(tmp_path)
    play = workload.plays[0]
    requests = loadgen.instance_requests(
        [workload.requests[i] for i in play.request_indices], play, 0, 0, None
    )
    snapshot = loadgen.snapshot_cut(requests, snapshot_seed=42, lane=0)
    assert snapshot.cut_ms == pytest.approx(28334.88, abs=0.01)
    assert [r.id for r in snapshot.history] == [
        "ex:P#0/main/0",
        "ex:P#0/main/1",
        "ex:P#0/agent_001/0",
        "ex:P#0/agent_001/1",
        "ex:P#0/main/2",
    ]
    live = {r.id: r for r in snapshot.live}
    assert list(live) == ["ex:P#0/agent_001/2", "ex:P#0/main/3", "ex:P#0/main/4"]
    assert live["ex:P#0/main/3"].arrival.not_before_ms == pytest.approx(1665.12, abs=0.01)
    assert live["ex:P#0/main/3"].arrival.after == ()
    assert live["ex:P#0/agent_001/2"].arrival.not_before_ms == pytest.approx(6665.12, abs=0.01)
    main4 = live["ex:P#0/main/4"]
    assert main4.arrival.not_before_ms == pytest.approx(11665.12, abs=0.01)
    assert main4.arrival.after == (Dep("ex:P#0/main/3", "completion", 9000.0),)
    assert live["ex:P#0/agent_001/2"].identity.lineage == Lineage("ex:P#0/main", "ex:P#0/main")


def test_worked_example_d_primers_and_warmups(tmp_path: Path) -> None:
    workload = _example_d(tmp_path)
    play = workload.plays[0]
    requests = loadgen.instance_requests(
        [workload.requests[i] for i in play.request_indices], play, 0, 0, None
    )
    snapshot = loadgen.snapshot_cut(requests, snapshot_seed=42, lane=0)
    primers, warmups = loadgen.preparation_requests(snapshot, "ex:P#0", repeats=10)
    assert [(r.id, r.input_length, r.output_length, r.identity.phase) for r in primers] == [
        ("ex:P#0/primer/0", 256, 1, "primer"),
        ("ex:P#0/primer/1", 192, 1, "primer"),
    ]
    assert [r.input_length for r in warmups] == [256, 192] * 5
    assert warmups[3].id == "ex:P#0/warmup/3"
    assert warmups[0].hash_ids.tolist() == primers[0].hash_ids.tolist()


def test_history_depending_on_live_is_an_error(tmp_path: Path) -> None:
    requests = (
        loadgen.Request("p/a", 1, 1, 1, [1], loadgen.ArrivalRule(None, (Dep("p/b", "start", 0),))),
        loadgen.Request("p/b", 1, 1, 1, [2], loadgen.ArrivalRule(100.0)),
        loadgen.Request("p/c", 1, 1, 1, [3], loadgen.ArrivalRule(0.0)),
    )
    # p/a has no floor: its recorded start is its nominal release, 100 (like p/b).
    snapshot = loadgen.snapshot_cut(requests[1:], snapshot_seed=42, lane=0)
    assert [r.id for r in snapshot.live] == ["p/b"]
    bad = (
        loadgen.Request("p/x", 1, 1, 1, [1], loadgen.ArrivalRule(0.0, (Dep("p/y", "start", 0),))),
        loadgen.Request("p/y", 1, 1, 1, [2], loadgen.ArrivalRule(100.0)),
    )
    with pytest.raises(loadgen.WorkloadConfigError) as info:
        loadgen.snapshot_cut(bad, snapshot_seed=42, lane=0)
    assert str(info.value) == ("snapshot: historical request 'p/x' depends on live request 'p/y'")


def test_snapshot_run_releases_only_live_requests_relative_to_the_lane(tmp_path: Path) -> None:
    run = FakeRun(_example_d(tmp_path), mode=LoadMode(lanes=1, snapshots=True, snapshot_seed=42))
    report = run.run()
    assert run.released == pytest.approx(
        {"ex:P#0/main/3": 1665.12, "ex:P#0/agent_001/2": 6665.12, "ex:P#0/main/4": 11665.12},
        abs=0.01,
    )
    assert len(report.history) == 5
    assert report.plays[0].outcome == "completed"


def test_warmup_barrier_waits_for_preparation_then_quiescence(tmp_path: Path) -> None:
    quiet_after = 650.0
    runner: list[FakeRun] = []

    def quiescent() -> bool:
        return runner[0].driver is not None and _now_ms() >= quiet_after

    run = FakeRun(
        _example_d(tmp_path),
        mode=LoadMode(lanes=1, snapshots=True, snapshot_seed=42, warmup=True),
        service_ms=lambda r: 50.0,
        quiescent=quiescent,
    )
    runner.append(run)
    report = run.run()
    # 2 primers + 10 warm-ups of 50 ms back to back end at 600; quiet from 650 (1 ms polls).
    assert run.released["ex:P#0/warmup/9"] == 550.0
    assert report.profile_start_ms == 650.0
    assert run.released["ex:P#0/main/3"] == pytest.approx(650.0 + 1665.12, abs=0.01)
    phases = {o.phase for o in report.requests}
    assert phases == {"primer", "warmup", "measure"}


def test_warmup_barrier_is_600_with_quiet_engines(tmp_path: Path) -> None:
    run = FakeRun(
        _example_d(tmp_path),
        mode=LoadMode(lanes=1, snapshots=True, snapshot_seed=42, warmup=True),
        service_ms=lambda r: 50.0,
        quiescent=lambda: True,
    )
    assert run.run().profile_start_ms == 600.0


def test_a_failed_warmup_aborts_the_run(tmp_path: Path) -> None:
    run = FakeRun(
        _example_d(tmp_path),
        mode=LoadMode(lanes=1, snapshots=True, snapshot_seed=42, warmup=True),
        reject=frozenset({"ex:P#0/warmup/2"}),
    )
    with pytest.raises(loadgen.WorkloadRunError) as info:
        run.run()
    assert str(info.value) == (
        "warm-up: request 'ex:P#0/warmup/2' ended rejected; nothing is measured"
    )


def test_profile_refills_lanes_until_the_cutoff_and_cancels_after_grace(tmp_path: Path) -> None:
    a = _play([_call(0, 1), _call(2, 1), _call(4, 1)], "A")
    b = _play([_call(0, 1), _call(1, 1)], "B")
    cancelled: list[str] = []
    mode = LoadMode(
        lanes=1,
        snapshots=True,
        snapshot_seed=42,
        profile=loadgen.Profile(duration_s=10.0, grace_s=0.2),
    )
    run = FakeRun(_corpus(tmp_path, a, b), mode=mode, service_ms=lambda r: 800.0)
    report = run.run(cancel=cancelled.append)
    starts = [p.instance_id for p in report.plays]
    assert starts[:3] == ["ex:A#0", "ex:B#0", "ex:A#1"]
    assert report.cutoff_ms == 10000.0
    assert all(t <= 10000.0 for t in run.released.values())
    statuses = {o.request_id: o.status for o in report.requests}
    # B#1's last call is released at 9566.5 and would complete at 10366.5, after the
    # grace (10200): it is cancelled and its play is incomplete.
    assert cancelled == ["ex:B#1/main/1"]
    assert statuses["ex:B#1/main/1"] == "cancelled"
    assert report.plays[-1].instance_id == "ex:B#1"
    assert report.plays[-1].outcome == "incomplete"


def _now_ms() -> float:
    import simclock

    return simclock.now_ns() / 1e6


def test_global_idle_cap_moves_timers_when_nothing_is_in_flight(tmp_path: Path) -> None:
    a = _play([_call(0, 1), _call(10, 1), _call(20, 1), _call(500, 1)], "A")
    profile = loadgen.Profile(duration_s=12.0)
    mode = LoadMode(lanes=1, snapshots=True, snapshot_seed=42, profile=profile)
    run = FakeRun(_corpus(tmp_path, a), mode=mode, service_ms=lambda r: 1.0)
    report = run.run()
    # The live call's floor is 500000 - t* (t* = 354186.08 ms): 145813.92 ms, far beyond the
    # global cap of 10 s with nothing in flight, so it moves to 10 s. The lane then restarts
    # the play from turn zero (A#1) until the cutoff at 12 s.
    assert run.released == {"ex:A#0/main/3": 10000.0, "ex:A#1/main/0": 10001.0}
    assert [p.outcome for p in report.plays] == ["completed", "incomplete"]
    shift = report.idle_shifts[0]
    assert (shift.time_ns, shift.scope, shift.timers) == (10_000_000_000, "global", 1)
    assert shift.shift_ns == pytest.approx(135_813_920_000, abs=1_000_000)


def test_tree_idle_cap_moves_one_idle_play_while_another_works(tmp_path: Path) -> None:
    a = _play([_call(0, 1), _call(10, 1), _call(20, 1), _call(500, 1)], "A")
    b = _play([_call(float(t), 1) for t in range(0, 600)], "B")
    mode = LoadMode(
        lanes=2,
        snapshots=True,
        snapshot_seed=42,
        profile=loadgen.Profile(duration_s=200.0, tree_idle_cap_s=60.0),
    )
    run = FakeRun(_corpus(tmp_path, a, b), mode=mode, service_ms=lambda r: 900.0)
    report = run.run()
    assert run.released["ex:A#0/main/3"] == 60000.0
    scopes = [s.scope for s in report.idle_shifts]
    assert scopes[0] == "ex:A#0"
    assert "global" not in scopes
