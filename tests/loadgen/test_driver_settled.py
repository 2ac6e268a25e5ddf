"""The driver's count of unsettled units (neither released nor settled) stays exact.

``Driver.finished`` asks on every terminal event whether every unit was released or
settled; it reads a counter kept up to date where units are added, released and settled.
These tests compare that counter, and ``finished``, with a scan of every unit, at every
release and after every terminal event, over timestamp, closed-loop and lane runs (with
rejections, snapshots, warm-ups, profiles and stops).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen import LoadMode, Profile, Request, Workload

from .fake_engine import FakeRun
from .test_driver_properties import workloads
from .test_plays import _corpus
from .test_weka import _call, _marker, _play


@attrs.define(eq=False)
class _CheckedRun(FakeRun):
    """A fake run that checks the driver's unsettled count at every release and terminal."""

    checks: int = 0

    def _submit(self, request: Request) -> None:
        self._check()
        super()._submit(request)

    async def _serve(self, request: Request) -> None:
        await super()._serve(request)
        self._check()

    def _check(self) -> None:
        driver = self.driver
        assert driver is not None
        units = driver._units.values()
        unsettled = sum(1 for u in units if u.status is None and u.released_ns is None)
        # roots not yet released have no unit yet (timestamp runs)
        roots = 0 if driver._roots is None else len(driver._roots)
        unsettled += roots
        assert driver._unsettled == unsettled
        scanned = (
            driver._closed
            or driver._no_more_releases
            or (not driver._heap and not roots and not driver._pending_starts() and unsettled == 0)
        )
        assert driver.finished == scanned
        self.checks += 1


def _checked(run: _CheckedRun) -> None:
    report = run.run()
    assert run.driver is not None
    assert run.driver._unsettled == 0  # every unit ends settled
    assert run.checks >= len(run.released)
    assert len(report.requests) > 0


def _plays(tmp_path: Path) -> Workload:
    sub = _marker(5, "agent_001", [_call(0, 1), _call(2, 1, out=300)])
    a = _play([_call(0, 2), sub, _call(8, 1), _call(12, 1)], "A")
    b = _play([_call(0, 1), _call(3, 1), _call(6, 1)], "B")
    return _corpus(tmp_path, a, b)


_PLAY_MODES: list[tuple[str, LoadMode, frozenset[str]]] = [
    ("one lane", LoadMode(lanes=1), frozenset()),
    ("three lanes", LoadMode(lanes=3), frozenset()),
    ("a rejection skips the rest", LoadMode(lanes=1), frozenset({"ex:A#0/agent_001/0"})),
    ("snapshots", LoadMode(lanes=2, snapshots=True, snapshot_seed=42), frozenset()),
    (
        "warm-up",
        LoadMode(lanes=2, snapshots=True, snapshot_seed=42, warmup=True, warmup_repeats=3),
        frozenset(),
    ),
    (
        "profile with grace cancellations",
        LoadMode(
            lanes=1,
            snapshots=True,
            snapshot_seed=7,
            profile=Profile(duration_s=20.0, grace_s=0.5),
        ),
        frozenset(),
    ),
    ("deadline", LoadMode(lanes=1, max_virtual_time_s=4.0), frozenset()),
    ("max requests", LoadMode(lanes=2, max_requests=4), frozenset()),
]


@pytest.mark.parametrize(
    ("mode", "reject"),
    [pytest.param(m, r, id=name) for name, m, r in _PLAY_MODES],
)
def test_unsettled_count_matches_a_scan_in_lane_runs(
    tmp_path: Path, mode: LoadMode, reject: frozenset[str]
) -> None:
    _checked(_CheckedRun(_plays(tmp_path), mode=mode, reject=reject))


def test_a_profile_run_checks_cancelled_and_never_issued_units(tmp_path: Path) -> None:
    run = _CheckedRun(_plays(tmp_path), mode=_PLAY_MODES[5][1])
    report = run.run()
    statuses = {o.status for o in report.requests}
    assert {"completed", "cancelled", "never_issued"} <= statuses
    assert run.driver is not None and run.driver._unsettled == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
def test_unsettled_count_matches_a_scan_in_timestamp_and_session_runs(
    workload: Workload, mode: LoadMode, data: st.DataObject
) -> None:
    ids = [r.id for r in workload.requests]
    rejected = frozenset(data.draw(st.lists(st.sampled_from(ids), max_size=2)))
    service = {r.id: float(data.draw(st.integers(1, 400))) for r in workload.requests}
    run = _CheckedRun(workload, mode=mode, service_ms=lambda r: service[r.id], reject=rejected)
    _checked(run)
