"""A timestamp run keeps its roots out of the run until released and its settled outcomes
as columns (``OutcomeLedger``), and accounts for every request as a run that keeps units.

A run limited to as many sessions as the workload has (``max_sessions``) releases the same
requests at the same instants, but keeps a unit for every request from the start and an
outcome object for every settled one: the two accountings must agree request by request.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadgen._driver
from loadgen import ArrivalRule, LoadMode, Request, Workload
from loadgen._outcomes import Outcomes

from .fake_engine import FakeRun
from .test_driver_properties import workloads


def _sessions(workload: Workload) -> int:
    return len({r.identity.conversation_id or r.id for r in workload.requests})


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    workloads(),
    st.sampled_from(
        [
            LoadMode(),
            LoadMode(speedup=2.0),
            LoadMode(max_requests=3),
            LoadMode(max_virtual_time_s=0.5),
        ]
    ),
    st.data(),
    st.booleans(),
)
def test_a_timestamp_run_accounts_as_a_run_that_keeps_every_unit(
    monkeypatch: pytest.MonkeyPatch,
    workload: Workload,
    mode: LoadMode,
    data: st.DataObject,
    compact: bool,
) -> None:
    ids = [r.id for r in workload.requests]
    rejected = frozenset(data.draw(st.lists(st.sampled_from(ids), max_size=2)))
    service = {r.id: float(data.draw(st.integers(1, 400))) for r in workload.requests}
    with monkeypatch.context() as patch:
        if compact:  # cut the roots' columns down at every release
            patch.setattr(loadgen._driver, "_COMPACT_ROOTS", 1)
        ledger = FakeRun(workload, mode=mode, service_ms=lambda r: service[r.id], reject=rejected)
        report = ledger.run()
    kept = FakeRun(
        workload,
        mode=attrs.evolve(mode, max_sessions=_sessions(workload)),
        service_ms=lambda r: service[r.id],
        reject=rejected,
    )
    reference = kept.run()
    assert isinstance(report.requests, Outcomes)
    assert isinstance(reference.requests, tuple)
    assert [o.request_id for o in report.requests] == ids  # workload order
    assert {o.request_id: o for o in report.requests} == {
        o.request_id: o for o in reference.requests
    }
    assert ledger.released == kept.released
    assert ledger.order == kept.order
    assert report.counts() == reference.counts()


def test_outcomes_read_like_a_tuple() -> None:
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=16,
            output_length=1,
            block_size=16,
            hash_ids=[i],
            arrival=ArrivalRule(not_before_ms=100.0 * i),
        )
        for i in range(4)
    )
    report = FakeRun(Workload(requests=requests, source="t", format="t")).run()
    outcomes = report.requests
    assert isinstance(outcomes, Outcomes)
    as_tuple = tuple(outcomes)
    assert outcomes == as_tuple and as_tuple == outcomes
    assert outcomes != as_tuple[:3]
    assert outcomes[-1] == as_tuple[3] and outcomes[1:3] == as_tuple[1:3]
    assert hash(outcomes) == hash(as_tuple)
    assert repr(outcomes) == repr(as_tuple)
    with pytest.raises(IndexError):
        outcomes[4]
    assert [o.released_ns for o in outcomes] == [0, 100_000_000, 200_000_000, 300_000_000]
    assert all(o.request is r for o, r in zip(outcomes, requests, strict=True))
