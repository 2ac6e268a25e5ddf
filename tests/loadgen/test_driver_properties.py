"""Property tests of the driver: every request ends with exactly one status, and no request
is released before its arrival rule allows (REFERENCE-workloads §1.1, §4.4)."""

from __future__ import annotations

from bisect import bisect_right

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import loadgen
from loadgen import ArrivalRule, Dep, Identity, LoadMode, Request, Workload

from .fake_engine import FakeRun


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    requests: list[Request] = []
    sessions = draw(st.integers(1, 6))
    for s in range(sessions):
        turns = draw(st.integers(1, 4))
        start = draw(st.integers(0, 2000))
        for k in range(turns):
            rid = f"w:s{s}/{k}"
            if k == 0:
                arrival = ArrivalRule(not_before_ms=float(start))
            else:
                on = draw(st.sampled_from(["completion", "completion", "start"]))
                arrival = ArrivalRule(
                    not_before_ms=None,
                    after=(Dep(f"w:s{s}/{k - 1}", on, float(draw(st.integers(0, 300)))),),
                )
            requests.append(
                Request(
                    id=rid,
                    input_length=draw(st.integers(1, 100)),
                    output_length=draw(st.integers(0, 30)),
                    block_size=16,
                    hash_ids=list(range(100 * s, 100 * s + 7)),
                    arrival=arrival,
                    identity=Identity(conversation_id=f"w:s{s}", turn_index=k),
                )
            )
    return Workload(requests=tuple(requests), source="w", format="test")


modes = st.sampled_from(
    [
        LoadMode(),
        LoadMode(speedup=3.0),
        LoadMode(concurrency=1),
        LoadMode(concurrency=3),
        LoadMode(max_requests=3),
        LoadMode(max_sessions=2),
        LoadMode(max_virtual_time_s=0.5),
    ]
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
@given(workloads(), modes, st.data())
def test_accounting_is_complete_and_rules_hold(
    workload: Workload, mode: LoadMode, data: st.DataObject
) -> None:
    ids = [r.id for r in workload.requests]
    rejected = frozenset(data.draw(st.lists(st.sampled_from(ids), max_size=2)))
    service = {r.id: float(data.draw(st.integers(1, 400))) for r in workload.requests}
    run = FakeRun(workload, mode=mode, service_ms=lambda r: service[r.id], reject=rejected)
    report = run.run()
    statuses = {o.request_id: o.status for o in report.requests}
    assert sorted(statuses) == sorted(ids)
    assert len(report.requests) == len(ids)
    assert set(statuses.values()) <= set(loadgen.TERMINAL_STATUSES)
    by_id = {r.id: r for r in workload.requests}
    for rid, at in run.released.items():
        request = by_id[rid]
        for dep in request.arrival.after:
            event = (
                run.completed[dep.request_id]
                if dep.on == "completion"
                else (run.released[dep.request_id])
            )
            assert at >= event + dep.delay_ms / mode.speedup - 1e-6
        floor = request.arrival.not_before_ms
        if floor is not None and mode.concurrency is None:
            assert at >= floor / mode.speedup - 1e-6
        if mode.max_virtual_time_s is not None:
            assert at <= mode.max_virtual_time_s * 1000
    released = [rid for rid in ids if rid in run.released]
    for rid in released:
        assert statuses[rid] in ("completed", "rejected", "incomplete")
    if mode.max_requests is not None:
        assert len(released) <= mode.max_requests
    if mode.concurrency is not None:
        _check_concurrency(workload, run, mode.concurrency)


def _check_concurrency(workload: Workload, run: FakeRun, limit: int) -> None:
    spans: dict[str, list[float]] = {}
    for r in workload.requests:
        conversation = r.identity.conversation_id or r.id
        if r.id in run.released:
            span = spans.setdefault(conversation, [run.released[r.id], run.released[r.id]])
            span[0] = min(span[0], run.released[r.id])
            span[1] = max(span[1], run.completed.get(r.id, span[1]))
    for at, _ in spans.values():
        active = sum(1 for a, b in spans.values() if a <= at < b)
        assert active <= limit


@st.composite
def corpora(draw: st.DrawFn) -> Workload:
    """Agentic workloads: a few plays, each a main chain with an optional side branch."""
    requests: list[Request] = []
    plays: list[loadgen.Play] = []
    for p in range(draw(st.integers(1, 3))):
        play_id = f"c:P{p}"
        start = len(requests)
        calls = draw(st.integers(1, 5))
        for k in range(calls):
            after: tuple[Dep, ...] = ()
            if k:
                after = (Dep(f"{play_id}/main/{k - 1}", "completion", 100.0),)
            requests.append(
                Request(
                    id=f"{play_id}/main/{k}",
                    input_length=64,
                    output_length=1,
                    block_size=64,
                    hash_ids=[start + k],
                    arrival=ArrivalRule(not_before_ms=float(1000 * k), after=after),
                    identity=Identity(
                        conversation_id=f"{play_id}/main", turn_index=k, play_id=play_id
                    ),
                    recorded_service_ms=50.0,
                )
            )
        if draw(st.booleans()):
            requests.append(
                Request(
                    id=f"{play_id}/a/0",
                    input_length=64,
                    output_length=1,
                    block_size=64,
                    hash_ids=[start + calls],
                    arrival=ArrivalRule(
                        not_before_ms=1.0, after=(Dep(f"{play_id}/main/0", "start", 1.0),)
                    ),
                    identity=Identity(
                        conversation_id=f"{play_id}/a", turn_index=0, play_id=play_id
                    ),
                )
            )
        plays.append(
            loadgen.Play(
                id=play_id,
                request_indices=tuple(range(start, len(requests))),
                conversations=(f"{play_id}/main",),
                content_ids=(start, len(requests)),
            )
        )
    return Workload(requests=tuple(requests), source="c", format="test", plays=tuple(plays))


lane_modes = st.sampled_from(
    [
        LoadMode(),
        LoadMode(lanes=1),
        LoadMode(lanes=2),
        LoadMode(lanes=4),
        LoadMode(lanes=2, snapshots=True, snapshot_seed=3),
        LoadMode(lanes=1, snapshots=True, warmup=True, warmup_repeats=2),
        LoadMode(lanes=2, snapshots=True, profile=loadgen.Profile(duration_s=5, grace_s=0.1)),
    ]
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
@given(corpora(), lane_modes, st.data())
def test_play_accounting_is_complete(
    workload: Workload, mode: LoadMode, data: st.DataObject
) -> None:
    ids = [r.id.replace("c:", "") for r in workload.requests]
    fail = data.draw(st.lists(st.sampled_from(ids), max_size=2))
    service = float(data.draw(st.integers(1, 1500)))
    run = FakeRun(workload, mode=mode, service_ms=lambda r: service)
    run.reject = frozenset(
        f"c:{rid.split('/')[0]}#{k}/{rid.split('/', 1)[1]}" if mode.lanes else f"c:{rid}"
        for rid in fail
        for k in range(3)
    )
    run.quiescent = lambda: True
    report = run.run()
    outcomes = report.requests
    seen = [o.request_id for o in outcomes]
    assert len(seen) == len(set(seen))
    assert not set(seen) & set(report.history)
    assert {o.status for o in outcomes} <= set(loadgen.TERMINAL_STATUSES)
    # Every released request is accounted once, and every started instance's requests too.
    assert set(run.released) <= set(seen)
    # (grouped and counted without a pass per play: a profile run starts tens of thousands)
    statuses: dict[str | None, set[str]] = {}
    for o in outcomes:
        statuses.setdefault(o.play_id, set()).add(o.status)
    for play in report.plays:
        if play.outcome == "completed":
            assert statuses.get(play.instance_id) == {"completed"}
        if play.outcome == "failed":
            assert "rejected" in statuses.get(play.instance_id, set())
    if mode.lanes:
        active: list[tuple[float, float]] = []
        for play in report.plays:
            if play.first_release_ns is not None and play.last_terminal_ns is not None:
                active.append((play.first_release_ns, play.last_terminal_ns))
        # The plays active at each start (a <= start < b): among non-empty spans, those
        # begun by then less those ended by then.
        begun = sorted(a for a, b in active if a < b)
        ended = sorted(b for a, b in active if a < b)
        for start, _ in active:
            running = bisect_right(begun, start) - bisect_right(ended, start)
            assert running <= mode.lanes
