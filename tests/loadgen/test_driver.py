"""The release driver (REFERENCE-workloads §1.1, §4) against a fake engine; §8 (a)-(c)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loadgen
from loadgen import LoadMode, WorkloadConfigError

from .conftest import WriteLines
from .fake_engine import FakeRun
from .test_agentic import EXAMPLE_B
from .test_mooncake import EXAMPLE_A
from .test_weka import EXAMPLE_C


@pytest.fixture
def example_a(write_lines: WriteLines) -> loadgen.Workload:
    return loadgen.read_mooncake(write_lines("ex.jsonl", *EXAMPLE_A))


def test_example_a_releases_at_trace_times(example_a: loadgen.Workload) -> None:
    run = FakeRun(example_a)
    report = run.run()
    assert run.released == {"ex:1": 0.0, "ex:3": 200.0, "ex:2": 570.0}
    assert run.completed["ex:2"] == 630.0
    assert report.counts()["completed"] == 3


def test_example_a_speedup_two(example_a: loadgen.Workload) -> None:
    run = FakeRun(example_a, mode=LoadMode(speedup=2))
    run.run()
    assert run.released == {"ex:1": 0.0, "ex:3": 100.0, "ex:2": 320.0}


def test_example_a_concurrency_one_holds_the_slot_through_think_time(
    example_a: loadgen.Workload,
) -> None:
    run = FakeRun(example_a, mode=LoadMode(concurrency=1))
    run.run()
    assert run.released == {"ex:1": 0.0, "ex:2": 570.0, "ex:3": 630.0}


def test_example_a_timestamp_gap_variant(write_lines: WriteLines) -> None:
    rows = list(EXAMPLE_A)
    rows[1] = rows[1].replace('"delay":500', '"timestamp":1300')
    run = FakeRun(loadgen.read_mooncake(write_lines("ex.jsonl", *rows)))
    run.run()
    assert run.released["ex:2"] == 370.0


def test_example_b_agentic_dag(write_lines: WriteLines) -> None:
    workload = loadgen.read_agentic(write_lines("ex.jsonl", *EXAMPLE_B))
    service = {"ex:A/A": 70.0, "ex:A/B": 100.0, "ex:A/C": 180.0, "ex:A/D": 10.0, "ex:E/E": 10.0}
    run = FakeRun(workload, service_ms=lambda r: service[r.id])
    report = run.run()
    assert run.released == {
        "ex:A/A": 0.0,
        "ex:E/E": 100.0,
        "ex:A/C": 120.0,
        "ex:A/B": 170.0,
        "ex:A/D": 320.0,
    }
    assert (run.completed["ex:A/B"], run.completed["ex:A/C"]) == (270.0, 300.0)
    assert [(p.instance_id, p.outcome) for p in report.plays] == [
        ("ex:A", "completed"),
        ("ex:E", "completed"),
    ]
    assert report.plays[0].trajectory_ms == 330.0


def test_example_c_fast_engine_meets_the_floors(tmp_path: Path) -> None:
    path = tmp_path / "ex.json"
    path.write_text(json.dumps(EXAMPLE_C), encoding="utf-8")
    run = FakeRun(loadgen.read_weka(path), service_ms=lambda r: 1.0)
    run.run()
    assert list(run.released.values()) == [0.0, 5000.0, 7000.0, 8000.0, 12000.0]


@pytest.mark.parametrize(("join", "main_2"), [("none", 12000.0), ("recorded", 17090.0)])
def test_example_c_slow_subagent_and_the_recorded_join(
    tmp_path: Path, join: str, main_2: float
) -> None:
    path = tmp_path / "ex.json"
    path.write_text(json.dumps(EXAMPLE_C), encoding="utf-8")
    workload = loadgen.read_weka(path, subagent_join=join)  # type: ignore[arg-type]

    def service(request: loadgen.Request) -> float:
        # agent_001/1 (released at 7000) completes at 13090; main/1 (8000) at 8070.
        return {"ex:p1/agent_001/1": 6090.0, "ex:p1/main/1": 70.0}.get(request.id, 1.0)

    run = FakeRun(workload, service_ms=service)
    run.run()
    assert run.released["ex:p1/main/2"] == main_2


def test_same_instant_releases_go_in_workload_order(write_lines: WriteLines) -> None:
    rows = [
        {"timestamp": 0, "output_length": 1, "hash_ids": [1]},
        {"session_id": "s", "timestamp": 0, "output_length": 1, "hash_ids": [1]},
        {"session_id": "s", "delay": 0, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 50, "output_length": 1, "hash_ids": [1]},
    ]
    run = FakeRun(loadgen.read_mooncake(write_lines("o.jsonl", *rows)))
    run.run()
    # Row 3 is due at 50 (row 2 completes at 50), as is row 4: workload order.
    assert run.order == ["o:1", "o:2", "o:3", "o:4"]


def test_a_rejected_request_skips_its_dependents(example_a: loadgen.Workload) -> None:
    run = FakeRun(example_a, reject=frozenset({"ex:1"}))
    report = run.run()
    statuses = {o.request_id: o.status for o in report.requests}
    assert statuses == {"ex:1": "rejected", "ex:2": "skipped", "ex:3": "completed"}


def test_max_virtual_time_marks_in_flight_incomplete(example_a: loadgen.Workload) -> None:
    run = FakeRun(example_a, mode=LoadMode(max_virtual_time_s=0.25))
    report = run.run()
    statuses = {o.request_id: o.status for o in report.requests}
    assert statuses == {"ex:1": "completed", "ex:2": "never_issued", "ex:3": "incomplete"}


def test_max_requests_and_max_sessions(example_a: loadgen.Workload) -> None:
    report = FakeRun(example_a, mode=LoadMode(max_requests=1)).run()
    assert report.counts() == {
        **dict.fromkeys(loadgen.TERMINAL_STATUSES, 0),
        "completed": 1,
        "never_issued": 2,
    }
    run = FakeRun(example_a, mode=LoadMode(max_sessions=1))
    report = run.run()
    assert run.released == {"ex:1": 0.0, "ex:2": 570.0}
    assert {o.request_id: o.status for o in report.requests}["ex:3"] == "never_issued"


def test_every_request_gets_exactly_one_status(write_lines: WriteLines) -> None:
    rows: list[Any] = []
    for i in range(30):
        rows.append(
            {
                "session_id": f"s{i % 7}",
                "timestamp": i * 10,
                "output_length": i % 4,
                "hash_ids": [i],
            }
        )
    workload = loadgen.read_mooncake(write_lines("m.jsonl", *rows))
    for mode in (
        LoadMode(),
        LoadMode(concurrency=2),
        LoadMode(max_requests=9),
        LoadMode(max_virtual_time_s=0.2),
    ):
        report = FakeRun(workload, mode=mode, reject=frozenset({"m:5"})).run()
        ids = [o.request_id for o in report.requests]
        assert sorted(ids) == sorted(r.id for r in workload.requests)
        assert all(o.status in loadgen.TERMINAL_STATUSES for o in report.requests)


def test_rate_override_retimes_roots_in_queue_order(example_a: loadgen.Workload) -> None:
    run = FakeRun(example_a, mode=LoadMode(arrivals=loadgen.Constant(rate=10.0)))
    run.run(rng=np.random.default_rng(0))
    assert run.released == {"ex:1": 0.0, "ex:3": 100.0, "ex:2": 570.0}


def test_target_rate_sets_the_speedup(example_a: loadgen.Workload) -> None:
    # Two roots over 0.2 s: 10 per second; a target of 20 is speedup 2.
    run = FakeRun(example_a, mode=LoadMode(target_rate=20.0))
    run.run()
    assert run.released == {"ex:1": 0.0, "ex:3": 100.0, "ex:2": 320.0}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 2, "speedup": 2.0}, "speedup: not allowed with concurrency"),
        ({"speedup": 0}, "speedup: must be a finite number > 0, got 0"),
        ({"snapshots": True}, "snapshots: needs lanes"),
        ({"lanes": 1, "warmup": True}, "warmup: needs snapshots"),
        ({"lanes": 1, "profile": True}, "profile: needs lanes and snapshots"),
        (
            {"lanes": 1, "snapshots": True, "profile": True, "max_virtual_time_s": 5},
            "profile: cannot be combined with max_virtual_time_s",
        ),
        ({"colour": 1}, "colour: unknown load option"),
        ({"profile": {"duration_s": 0}}, "profile.duration_s: must be a finite number > 0, got 0"),
    ],
)
def test_load_mode_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadConfigError) as info:
        LoadMode.from_dict(options)
    assert str(info.value) == message


def test_load_mode_from_a_config_table() -> None:
    mode = LoadMode.from_dict({"arrivals": "gamma(5.53, 1.094)", "max_requests": 10})
    assert mode.arrivals == loadgen.Gamma(5.53, 1.094)
    assert mode.max_requests == 10


def test_concurrency_is_refused_for_agentic_workloads(write_lines: WriteLines) -> None:
    workload = loadgen.read_agentic(write_lines("ex.jsonl", *EXAMPLE_B))
    with pytest.raises(WorkloadConfigError) as info:
        loadgen.Driver(workload, lambda r: None, mode=LoadMode(concurrency=1))
    assert str(info.value) == "concurrency: agentic workloads use lanes instead"
