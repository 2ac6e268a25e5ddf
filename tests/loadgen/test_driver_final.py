"""The driver lets its units go once the run ended, and its accounting stays the same.

When :meth:`Driver.run` returns, the outcomes are built from the units while the units are
dropped (a long run holds one or the other, not both); :meth:`Driver.report` then returns
that final accounting. These tests compare it with the accounting built the usual way from
the units, just before they are dropped, over timestamp, closed-loop and lane runs.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen import (
    ArrivalRule,
    DriverReport,
    LoadMode,
    Request,
    RequestOutcome,
    Workload,
    WorkloadConfigError,
)
from loadgen._driver import Driver
from loadgen._outcomes import Outcomes

from .fake_engine import FakeRun
from .test_driver_properties import workloads
from .test_driver_settled import _PLAY_MODES, _plays


def _compare(run: FakeRun, monkeypatch: pytest.MonkeyPatch) -> DriverReport:
    live: list[DriverReport] = []
    final = Driver._final_report

    def spy(self: Driver) -> DriverReport:
        live.append(self.report())  # built from the units, as before they are dropped
        return final(self)

    with monkeypatch.context() as patch:
        patch.setattr(Driver, "_final_report", spy)
        report = run.run()
    driver = run.driver
    assert driver is not None
    assert live == [report]
    assert report.requests == live[0].requests
    assert report.plays == live[0].plays
    assert driver._units == {}
    assert driver.report() is report
    # a terminal event after the end changes nothing and is not an error
    for outcome in report.requests[:3]:
        driver.on_terminal(outcome.request_id, "completed")
    assert driver.report() is report
    return report


@pytest.mark.parametrize(
    ("mode", "reject"),
    [pytest.param(m, r, id=name) for name, m, r in _PLAY_MODES],
)
def test_lane_runs_keep_their_accounting_when_units_are_dropped(
    tmp_path: Path, mode: LoadMode, reject: frozenset[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _compare(FakeRun(_plays(tmp_path), mode=mode, reject=reject), monkeypatch)
    assert report.plays


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    workloads(),
    st.sampled_from(
        [
            LoadMode(),
            LoadMode(concurrency=2),
            LoadMode(max_requests=3),
            LoadMode(max_sessions=2),
            LoadMode(max_virtual_time_s=0.5),
        ]
    ),
    st.data(),
)
def test_timestamp_and_session_runs_keep_their_accounting_when_units_are_dropped(
    monkeypatch: pytest.MonkeyPatch, workload: Workload, mode: LoadMode, data: st.DataObject
) -> None:
    ids = [r.id for r in workload.requests]
    rejected = frozenset(data.draw(st.lists(st.sampled_from(ids), max_size=2)))
    service = {r.id: float(data.draw(st.integers(1, 400))) for r in workload.requests}
    run = FakeRun(workload, mode=mode, service_ms=lambda r: service[r.id], reject=rejected)
    report = _compare(run, monkeypatch)
    assert len(report.requests) == len(workload.requests)


def _req(rid: str, at_ms: float) -> Request:
    return Request(
        id=rid,
        input_length=16,
        output_length=2,
        block_size=16,
        hash_ids=[1],
        arrival=ArrivalRule(not_before_ms=at_ms),
    )


@attrs.define(eq=False)
class _Watching(FakeRun):
    """Notes the kinds of the driver's units at each release; adds a unit named "a" at
    "b"'s release, noting the error."""

    seen: list[tuple[str, list[str]]] = attrs.field(factory=list)
    duplicate: list[str] = attrs.field(factory=list)
    poke: bool = True

    def _submit(self, request: Request) -> None:
        driver = self.driver
        assert driver is not None
        kinds = [type(u).__name__ for u in driver._units.values()]
        self.seen.append((request.id, kinds))
        if request.id == "b" and self.poke:
            try:
                driver._add(_req("a", 0.0), (0, 9), 0, None, None)
            except WorkloadConfigError as error:
                self.duplicate.append(str(error))
        super()._submit(request)


def test_a_settled_session_request_is_held_as_its_outcome_and_its_id_stays_taken() -> None:
    workload = Workload(requests=(_req("a", 0.0), _req("b", 1000.0)), source="t", format="t")
    run = _Watching(workload, mode=LoadMode(concurrency=1))
    report = run.run()
    # "a" ended before "b" was released: only its outcome is left
    assert run.seen == [("a", ["_Unit"]), ("b", ["RequestOutcome", "_Unit"])]
    assert run.duplicate == ["requests: duplicate request id 'a'"]
    assert [(o.request_id, o.status) for o in report.requests] == [
        ("a", "completed"),
        ("b", "completed"),
    ]
    assert report.requests[0].request is not None
    assert report.requests[0].request.id == "a"


def test_a_timestamp_run_makes_a_roots_unit_at_its_release_and_keeps_its_outcome_as_numbers() -> (
    None
):
    workload = Workload(requests=(_req("a", 0.0), _req("b", 1000.0)), source="t", format="t")
    run = _Watching(workload, poke=False)
    report = run.run()
    # no unit before a root's release; none left once it settled
    assert run.seen == [("a", ["_Unit"]), ("b", ["_Unit"])]
    driver = run.driver
    assert driver is not None and driver._ledger is not None
    assert driver._ledger.outcome(0) == RequestOutcome(
        "a", "completed", 0, 60_000_000, "measure", None, workload.requests[0]
    )
    assert isinstance(report.requests, Outcomes)
    assert report.requests == (
        RequestOutcome("a", "completed", 0, 60_000_000, "measure", None, workload.requests[0]),
        RequestOutcome(
            "b", "completed", 10**9, 10**9 + 60_000_000, "measure", None, workload.requests[1]
        ),
    )
    assert report.requests[0].request is workload.requests[0]


def test_a_timestamp_run_refuses_a_workload_naming_an_id_twice() -> None:
    workload = Workload(requests=(_req("a", 0.0), _req("a", 1000.0)), source="t", format="t")
    with pytest.raises(WorkloadConfigError) as info:
        FakeRun(workload).run()
    assert str(info.value) == "requests: duplicate request id 'a'"
