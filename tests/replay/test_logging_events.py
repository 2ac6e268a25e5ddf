"""A replay's story at debug level: release, dispatch, admission, preemption; nothing when off."""

from __future__ import annotations

from engines import Journal
from policies import RoundRobin
from replay import Run, run
from replay._logging_events import subscribe_story
from simclock.testing import capture_logs
from tests.replay.test_session import ONE_ENGINE, preemption_workload


def story(events: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [
        (e["logger"], e["event"], e.get("request_id"), e.get("virtual_time_ns"))
        for e in events
        if e["logger"] in ("loadgen.release", "policies.dispatch", "engines.lifecycle")
    ]


def test_a_debug_run_tells_release_dispatch_admission_and_preemption() -> None:
    with capture_logs(level="debug") as events:
        result = run(preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin())
    told = story(events)
    assert told[:9] == [
        ("loadgen.release", "request released", "A", 0),
        ("policies.dispatch", "offer", "A", 0),
        ("policies.dispatch", "commit", "A", 0),
        ("engines.lifecycle", "queued", "A", 0),
        ("engines.lifecycle", "admission", "A", 0),
        ("loadgen.release", "request released", "B", 1_000_000),
        ("policies.dispatch", "offer", "B", 1_000_000),
        ("policies.dispatch", "commit", "B", 1_000_000),
        ("engines.lifecycle", "queued", "B", 1_000_000),
    ]
    preemption = next(e for e in events if e["event"] == "preemption")
    assert (preemption["request_id"], preemption["engine"], preemption["num_output"]) == (
        "B",
        0,
        40,
    )
    assert preemption["virtual_time_ns"] == 500_000_000
    readmission = [e for e in events if e["event"] == "admission" and e["is_readmission"]]
    assert [(e["request_id"], e["virtual_time_ns"]) for e in readmission] == [("B", 2_090_000_000)]
    assert sum(1 for e in told if e[1] == "finished") == 2
    quiet = run(preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin())
    assert quiet.summary == result.summary and quiet.requests == result.requests


def test_with_debug_off_nothing_is_subscribed() -> None:
    with capture_logs(level="info") as events:
        built = Run.build(preemption_workload(), topology=ONE_ENGINE, policy=RoundRobin())
        assert not built.journal.observed  # no subscriber: the engines' fast path
        built.finish()
    assert story(events) == []
    assert subscribe_story(Journal()) is False
