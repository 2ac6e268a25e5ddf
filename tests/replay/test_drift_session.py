"""A session shows the requests of play instances, and a cancelled request as cancelled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engines import EngineConfig, EventKind, FixedTiming
from loadgen import Workload
from policies import RoundRobin
from replay import Aggregated, ReplaySession, run

from .cancel_play import CALL_3, CALL_4, LOAD, cancel_workload

MS = 1_000_000
TOPOLOGY = Aggregated(
    workers=1,
    engine=EngineConfig(num_blocks=100),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)


@pytest.fixture
def workload(tmp_path: Path) -> Workload:
    return cancel_workload(tmp_path)


@pytest.fixture
def session(workload: Workload) -> Iterator[ReplaySession]:
    s = ReplaySession.build(workload, topology=TOPOLOGY, policy=RoundRobin(), load=LOAD)
    yield s
    s.close()


def test_play_instance_requests_have_states_in_flight_and_a_description(
    session: ReplaySession,
) -> None:
    session.run_until(time_s=2.0)
    call_3 = session.request(CALL_3)
    assert (call_3.state, call_3.engine) == ("running", 0)
    assert call_3.history[0].kind is EventKind.ARRIVED
    assert call_3.history[0].time_ns == pytest.approx(1665.12 * MS, abs=0.01 * MS)
    assert session.request(CALL_4).state == "pending"  # in the run, waiting for call 3
    assert [r.request_id for r in session.in_flight()] == [CALL_3]
    assert session.describe().endswith("\nin flight: 1 (1 running)")
    assert session.prefix_hits(CALL_3) == (64,)  # at most input_length - 1, whole blocks


def test_an_instance_not_started_yet_is_refused_with_what_is_known(
    session: ReplaySession,
) -> None:
    with pytest.raises(ValueError) as error:
        session.request(CALL_3)
    assert str(error.value) == (
        f"no request {CALL_3!r} in the workload or in the play instances started so far"
    )


def test_a_cancelled_request_is_cancelled_and_no_longer_in_flight(
    session: ReplaySession,
) -> None:
    session.run_until(time_s=2.0)
    stop = session.run_until_request(CALL_3, "terminal")
    assert stop.reason == "request" and stop.now_ns == 8_000 * MS
    assert [e.kind for e in stop.events] == [EventKind.CANCELLED]
    assert session.request(CALL_3).state == "cancelled"
    assert session.in_flight() == ()
    assert session.describe().endswith("\nin flight: 0 (none)")
    again = session.run_until_request(CALL_3, "terminal")  # it has ended: at once
    assert again.description.startswith("stopped at 8.000000000 s: request")
    assert f"request {CALL_3!r} has ended (cancelled)" in again.description


def test_a_stepped_play_session_reports_what_run_reports(
    session: ReplaySession, workload: Workload
) -> None:
    session.run_until(time_s=2.0)
    session.in_flight()
    session.describe()
    stepped = session.run()
    plain = run(workload, topology=TOPOLOGY, policy=RoundRobin(), load=LOAD)
    assert stepped.summary.status_counts == plain.summary.status_counts
    assert {r.request_id: r.status for r in stepped.requests} == {
        CALL_3: "cancelled",
        CALL_4: "never_issued",
    }
