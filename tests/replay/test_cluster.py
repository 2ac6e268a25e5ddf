"""A cluster whose engines join, drain and leave during a run, addressed by stable id."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import simclock
from engines import EngineConfig, EngineView, EventKind, FixedTiming
from loadgen import Request
from policies import (
    BasePolicy,
    ChoicePolicy,
    InactivePlacement,
    KVAware,
    LeastLoaded,
    PDPolicy,
    Policy,
    PolicyContext,
    Random,
    RoundRobin,
    SessionAffinity,
    pd_policy,
)
from replay import (
    Cluster,
    ClusterError,
    ClusterEvent,
    EngineSpec,
    EngineSummary,
    ReplayFailedError,
    ReplayResult,
    Run,
    ServedEngineSummary,
    request_json,
    run,
    summary_json,
)

from ..policies.support import req, topology, workload
from .pd_helpers import example_d
from .pd_helpers import request as pd_request

REPO = Path(__file__).resolve().parents[2]
MS = 1_000_000
S = 1_000_000_000

# engines 0, 1 from the start; 2 joins at 1 s; 0 drains at 2 s and is removed at 3 s; 1 is
# removed at 3.5 s (busy then: it drains first and leaves once idle)
EVENTS = (
    ClusterEvent(at_s=1.0, action="add"),
    ClusterEvent(at_s=2.0, action="drain", engine=0),
    ClusterEvent(at_s=3.0, action="remove", engine=0),
    ClusterEvent(at_s=3.5, action="remove", engine=1),
)

BUILT_INS: dict[str, Callable[[], Policy]] = {
    "round_robin": RoundRobin,
    "random": Random,
    "least_loaded": LeastLoaded,
    "kv_aware": KVAware,
    "kv_aware_softmax": lambda: KVAware(temperature=0.5),
    "session_affinity": SessionAffinity,
}


def requests(n: int = 60, *, every_ms: float = 100.0) -> list[Request]:
    """``n`` requests, one every ``every_ms``, in three conversations sharing prefixes."""
    return [
        req(
            f"r{i}",
            prompt=256,
            output=40,
            at_ms=every_ms * i,
            ids=[10 * (i % 3) + k for k in range(4)],
            conversation=f"c{i % 3}",
        )
        for i in range(n)
    ]


def replay_run(policy: Policy, events: Sequence[ClusterEvent] = EVENTS, **options: Any) -> Run:
    run_ = Run.build(
        workload(requests()),
        topology=topology(2),
        policy=policy,
        cluster_events=events,
        keep_events=True,
        **options,
    )
    run_.result_or_raise()
    return run_


def commits(run_: Run) -> list[tuple[int, str, int]]:
    """(time, request, engine) of every COMMITTED event."""
    return [
        (e.time_ns, e.request_id, e.engine)
        for e in run_.journal.events
        if e.kind is EventKind.COMMITTED and e.engine is not None
    ]


def outputs(result: ReplayResult) -> bytes:
    lines = [json.dumps(request_json(r), sort_keys=True) for r in result.requests]
    return ("\n".join(lines) + json.dumps(summary_json(result), sort_keys=True)).encode()


# -- every built-in, under joins and leaves ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILT_INS))
def test_built_ins_place_only_on_engines_accepting_placements(name: str) -> None:
    run_ = replay_run(BUILT_INS[name]())
    result = run_.finish()
    # conservation: every request ends once, completed
    assert len(result.requests) == 60
    assert {r.status for r in result.requests} == {"completed"}
    assert sum(result.summary.status_counts.values()) == 60
    # every placement falls inside its engine's accepting interval
    for time_ns, rid, engine in commits(run_):
        interval = run_.cluster.interval(engine)
        assert interval.joined_ns <= time_ns, (rid, engine)
        assert interval.draining_ns is None or time_ns < interval.draining_ns, (rid, engine)
    assert run_.cluster.inactive_placements() == ()
    # the added engine served, and the drained ones stopped taking work
    engines_used = {r.engine for r in result.requests}
    assert 2 in engines_used
    late = [r.engine for r in result.requests if r.arrival_ms is not None and r.arrival_ms >= 3500]
    assert late and set(late) == {2}


def test_states_and_intervals_follow_the_schedule() -> None:
    run_ = replay_run(RoundRobin())
    cluster = run_.cluster
    assert [cluster.state(i) for i in (0, 1, 2)] == ["removed", "removed", "active"]
    zero, one, two = cluster.intervals()
    assert (zero.joined_ns, zero.draining_ns, zero.removed_ns) == (0, 2 * S, 3 * S)
    assert zero.drained_ns is not None and 2 * S <= zero.drained_ns <= 3 * S
    # engine 1 was busy at 3.5 s: it drained then and left when its last request finished
    assert (one.draining_ns, one.drained_ns) == (3500 * MS, one.removed_ns)
    assert one.removed_ns is not None and one.removed_ns > 3500 * MS
    last_finish = max(
        r.terminal_ms for r in run_.finish().requests if r.engine == 1 and r.terminal_ms
    )
    assert one.removed_ns == round(last_finish * MS)
    assert (two.joined_ns, two.draining_ns, two.removed_ns) == (1 * S, None, None)
    assert run_.engines[2].closed is True  # closed at the end of the run
    assert cluster.ids("active") == (2,)
    assert cluster.ids() == (0, 1, 2)


def test_ids_stay_in_the_report_with_the_interval_each_engine_served() -> None:
    result = replay_run(RoundRobin()).finish()
    engines = summary_json(result)["engines"]
    assert [e["index"] for e in engines] == [0, 1, 2]  # type: ignore[index]
    assert [(e["joined_ms"], e["removed_ms"]) for e in engines] == [  # type: ignore[index]
        (0.0, 3000.0),
        (0.0, result.summary.engines[1].removed_ms),  # type: ignore[attr-defined]
        (1000.0, None),
    ]
    assert all(isinstance(e, ServedEngineSummary) for e in result.summary.engines)
    assert sum(e.completed for e in result.summary.engines) == 60
    assert {r.engine for r in result.requests} == {0, 1, 2}


def test_a_cluster_that_never_changes_reports_as_before() -> None:
    result = run(workload(requests(10)), topology=topology(2), policy=RoundRobin())
    assert all(type(e) is EngineSummary for e in result.summary.engines)
    assert "joined_ms" not in summary_json(result)["engines"][0]  # type: ignore[index]
    assert "cluster" not in result.meta.config
    assert [r.engine for r in result.requests] == [0, 1] * 5


def test_the_schedule_is_echoed_in_the_config() -> None:
    result = replay_run(RoundRobin()).finish()
    assert result.meta.config["cluster"] == {
        "events": [
            {"at_s": 1.0, "action": "add"},
            {"at_s": 2.0, "action": "drain", "engine": 0},
            {"at_s": 3.0, "action": "remove", "engine": 0},
            {"at_s": 3.5, "action": "remove", "engine": 1},
        ]
    }


# -- session affinity re-homes -----------------------------------------------------------------


def test_session_affinity_rehomes_the_sessions_of_a_draining_engine() -> None:
    run_ = replay_run(SessionAffinity(fallback=RoundRobin()), events=EVENTS[1:2])
    homes: dict[str, list[tuple[float, int | None]]] = {}
    for r in run_.finish().requests:
        conversation = f"c{int(r.request_id[1:]) % 3}"
        homes.setdefault(conversation, []).append((r.arrival_ms or 0.0, r.engine))
    # round robin homes c0 on 0, c1 on 1, c2 on 0; at 2 s engine 0 drains: c0 and c2 move to
    # engine 1 (the only one left) and stay there; c1 never moves
    for conversation in ("c0", "c2"):
        before = {e for t, e in homes[conversation] if t < 2000}
        after = {e for t, e in homes[conversation] if t >= 2000}
        assert (before, after) == ({0}, {1})
    assert {e for _, e in homes["c1"]} == {1}


# -- hooks and the context -----------------------------------------------------------------------


class Watching(RoundRobin):
    """Round robin that records the cluster hooks and what ``ctx.engines`` shows then."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int, tuple[int, ...]]] = []
        self.ctx: PolicyContext | None = None

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        self.ctx = ctx
        return super().choose(request, ctx)

    def _note(self, hook: str, view: EngineView) -> None:
        assert self.ctx is not None
        ids = tuple(v.id for v in self.ctx.engines)
        self.calls.append((hook, self.ctx.now_ns(), view.id, ids))

    def on_engine_added(self, view: EngineView) -> None:
        self._note("added", view)

    def on_engine_draining(self, view: EngineView) -> None:
        self._note("draining", view)

    def on_engine_removed(self, view: EngineView) -> None:
        self._note("removed", view)


def test_hooks_run_at_the_change_with_the_context_already_changed() -> None:
    policy = Watching()
    run_ = replay_run(policy)
    removed_1 = run_.cluster.interval(1).removed_ns
    assert policy.calls == [
        ("added", 1 * S, 2, (0, 1, 2)),
        ("draining", 2 * S, 0, (1, 2)),
        ("removed", 3 * S, 0, (1, 2)),
        ("draining", 3500 * MS, 1, (2,)),
        ("removed", removed_1, 1, (2,)),
    ]
    assert policy.ctx is not None
    assert [policy.ctx.engine_state(i) for i in (0, 1, 2, 3)] == [
        "removed",
        "removed",
        "active",
        None,
    ]


# -- a policy that ignores drains ------------------------------------------------------------------


class Stubborn(ChoicePolicy):
    """Always engine 0, whatever its state."""

    name = "stubborn"

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        return 0


def test_offers_to_a_draining_or_removed_engine_are_refused_and_recorded() -> None:
    run_ = replay_run(Stubborn())
    result = run_.finish()
    refused = run_.cluster.inactive_placements()
    assert all(isinstance(r, InactivePlacement) and r.outcome == "refused" for r in refused)
    by_state = {
        state: [r for r in refused if r.state == state] for state in ("draining", "removed")
    }
    assert [r.request_id for r in by_state["draining"]] == [f"r{i}" for i in range(20, 30)]
    assert [r.request_id for r in by_state["removed"]] == [f"r{i}" for i in range(30, 60)]
    assert all(r.engine == 0 for r in refused)
    rejected = [r for r in result.requests if r.status == "rejected"]
    assert [r.request_id for r in rejected] == [f"r{i}" for i in range(20, 60)]
    assert {r.rejection_reason for r in rejected} == {"engine_draining", "engine_removed"}
    assert {r.status for r in result.requests[:20]} == {"completed"}


def test_dispatch_to_an_unknown_engine_names_the_ids() -> None:
    class Far(ChoicePolicy):
        def choose(self, request: Request, ctx: PolicyContext) -> int:
            return 7

    with pytest.raises(ReplayFailedError) as caught:
        replay_run(Far(), events=EVENTS[:1])
    assert str(caught.value.__cause__) == "unknown engine 7; engines are 0..1"


# -- the Python API -------------------------------------------------------------------------


def test_a_cluster_task_changes_the_cluster_from_a_coroutine() -> None:
    seen: list[tuple[int, int]] = []

    async def scale(cluster: Cluster) -> None:
        await simclock.sleep_until_ns(500 * MS, waiter="test")
        new = cluster.add_engine()
        seen.append((simclock.now_ns(), new))
        await simclock.sleep_until_ns(1500 * MS, waiter="test")
        cluster.remove(0)
        slow = EngineSpec(
            config=EngineConfig(num_blocks=64), timing=FixedTiming(prefill_ms=5.0, decode_ms=1.0)
        )
        seen.append((simclock.now_ns(), cluster.add_engine(slow)))

    result = run(
        workload(requests(30)), topology=topology(2), policy=LeastLoaded(), cluster_tasks=[scale]
    )
    assert seen == [(500 * MS, 2), (1500 * MS, 3)]
    assert {r.status for r in result.requests} == {"completed"}
    assert [e.index for e in result.summary.engines] == [0, 1, 2, 3]
    assert result.summary.engines[3].joined_ms == 1500.0  # type: ignore[attr-defined]


def test_a_failing_cluster_task_fails_the_run() -> None:
    async def bad(cluster: Cluster) -> None:
        await simclock.sleep_until_ns(200 * MS, waiter="test")
        cluster.drain(9)

    with pytest.raises(ReplayFailedError) as caught:
        run(workload(requests(10)), topology=topology(2), policy=RoundRobin(), cluster_tasks=[bad])
    assert isinstance(caught.value.__cause__, ClusterError)
    assert str(caught.value.__cause__) == "unknown engine 9; engines are 0..1"
    assert sum(caught.value.result.summary.status_counts.values()) == 10


def test_cluster_errors_are_exact() -> None:
    messages: list[str] = []

    async def probe(cluster: Cluster) -> None:
        await simclock.sleep_until_ns(100 * MS, waiter="test")
        cluster.remove(1)
        for attempt in (
            lambda: cluster.remove(1),
            lambda: cluster.drain(1),
            lambda: cluster.add_engine(pool="decode"),
            lambda: cluster.add_engine(
                EngineSpec(
                    config=EngineConfig(num_blocks=64, block_size=32), timing=FixedTiming(1.0, 1.0)
                )
            ),
            lambda: cluster.state(True),  # type: ignore[arg-type]
        ):
            try:
                attempt()
            except ClusterError as error:
                messages.append(str(error))

    run_ = Run.build(
        workload(requests(3)), topology=topology(2), policy=RoundRobin(), cluster_tasks=[probe]
    )
    with pytest.raises(ClusterError, match=r"^Cluster.drain: call it on the run's loop"):
        run_.cluster.drain(0)
    run_.result_or_raise()
    assert messages == [
        "engine 1 was removed already",
        "engine 1 was removed; it cannot be drained",
        "pool: an aggregated topology has no pools, got 'decode'",
        "an added engine's block_size 32 differs from the topology's 64",
        "unknown engine True; engines are 0..1",
    ]


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            lambda: ClusterEvent(at_s=-1, action="add"),
            "at_s: must be a finite number >= 0, got -1",
        ),
        (
            lambda: ClusterEvent(at_s=1, action="grow"),  # type: ignore[arg-type]
            "action: must be one of 'add', 'drain', 'remove', got 'grow'",
        ),
        (lambda: ClusterEvent(at_s=1, action="drain"), "engine: drain needs the id of an engine"),
        (
            lambda: ClusterEvent(at_s=1, action="add", engine=3),
            "engine: an added engine gets the next id; do not give one",
        ),
    ],
)
def test_bad_cluster_events_are_refused(event: Callable[[], object], message: str) -> None:
    with pytest.raises(ClusterError) as caught:
        event()
    assert str(caught.value) == message


def test_a_schedule_naming_an_engine_that_does_not_exist_yet_is_refused() -> None:
    events = [ClusterEvent(at_s=2, action="add"), ClusterEvent(at_s=1, action="remove", engine=2)]
    with pytest.raises(ClusterError) as caught:
        Run.build(
            workload(requests(3)), topology=topology(2), policy=RoundRobin(), cluster_events=events
        )
    assert str(caught.value) == "cluster_events[1]: engine 2 does not exist at 1 s (engines 0..1)"


# -- determinism ----------------------------------------------------------------------------------


def test_reruns_are_byte_identical() -> None:
    first = outputs(replay_run(KVAware(temperature=0.5)).finish())
    second = outputs(replay_run(KVAware(temperature=0.5)).finish())
    assert first == second


def test_both_steppings_agree_under_cluster_changes() -> None:
    macro = outputs(replay_run(SessionAffinity(), stepping="macro").finish())
    per_pass = outputs(replay_run(SessionAffinity(), stepping="pass").finish())
    assert macro == per_pass


_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from tests.replay.test_cluster import BUILT_INS, outputs, replay_run
    import hashlib
    for name in sorted(BUILT_INS):
        print(name, hashlib.sha256(outputs(replay_run(BUILT_INS[name]()).finish())).hexdigest())
    """
)


def test_results_do_not_depend_on_the_hash_seed() -> None:
    runs = []
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT.format(repo=str(REPO))],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(done.stdout)
    assert runs[0] == runs[1]
    here = {
        name: hashlib.sha256(outputs(replay_run(BUILT_INS[name]()).finish())).hexdigest()
        for name in ("round_robin",)
    }
    assert f"round_robin {here['round_robin']}" in runs[0]


# -- prefill/decode pools -------------------------------------------------------------------


@pytest.mark.parametrize("order", ["source_first", "destination_first"])
@pytest.mark.parametrize("name", ["round_robin", "least_loaded", "kv_aware", "session_affinity"])
def test_pd_pools_take_joins_and_drains(name: str, order: str) -> None:
    # prefill 0, 1; decode 2, 3. Decode 4 joins at 1 s; prefill 5 at 1.5 s; decode 2 drains at
    # 2 s and leaves when idle; prefill 0 is removed at 2.5 s
    events = [
        ClusterEvent(at_s=1.0, action="add", pool="decode"),
        ClusterEvent(at_s=1.5, action="add", pool="prefill"),
        ClusterEvent(at_s=2.0, action="remove", engine=2),
        ClusterEvent(at_s=2.5, action="remove", engine=0),
    ]
    wl = workload(
        [pd_request(f"r{i}", at_ms=100.0 * i, p=600, n=20, ids=[i % 4, 9]) for i in range(40)]
    )
    run_ = Run.build(
        wl,
        topology=example_d(prefill_workers=2, decode_workers=2, order=order),
        policy=pd_policy(name),
        cluster_events=events,
        keep_events=True,
    )
    result = run_.result_or_raise()
    assert {r.status for r in result.requests} == {"completed"}
    pairs = [
        (r.handoff.prefill_worker, r.handoff.decode_worker) for r in result.requests if r.handoff
    ]
    assert len(pairs) == 40
    assert {p for p, _ in pairs} <= {0, 1, 5} and {d for _, d in pairs} <= {2, 3, 4}
    for time_ns, rid, engine in commits(run_):
        interval = run_.cluster.interval(engine)
        assert interval.joined_ns <= time_ns
        assert interval.draining_ns is None or time_ns < interval.draining_ns, (rid, engine)
    assert [i.pool for i in run_.cluster.intervals()] == [
        "prefill",
        "prefill",
        "decode",
        "decode",
        "decode",
        "prefill",
    ]
    assert run_.cluster.state(2) == "removed" and run_.cluster.state(0) == "removed"
    assert any(d == 4 for _, d in pairs), pairs
    late = [r.handoff.prefill_worker for r in result.requests if r.handoff and r.arrival_ms >= 2500]
    assert late and set(late) <= {1, 5}
    if name == "round_robin":  # the others prefer the lowest id among idle prefill engines
        assert any(p == 5 for p, _ in pairs), pairs
    assert isinstance(run_.runtime.policy, PDPolicy)  # type: ignore[attr-defined]


def test_a_pd_pool_refuses_an_added_engine_without_a_pool() -> None:
    events = [ClusterEvent(at_s=0.1, action="add")]
    with pytest.raises(ReplayFailedError) as caught:
        run(
            workload([pd_request("a")]),
            topology=example_d(),
            policy=pd_policy("round_robin"),
            cluster_events=events,
        )
    assert str(caught.value.__cause__) == (
        "pool: a disaggregated topology adds to 'prefill' or 'decode', got None"
    )


class Everything(BasePolicy):
    """Not a choice policy: checks that BasePolicy's cluster hooks are no-ops."""

    async def run(self, requests: Any, ctx: PolicyContext) -> None:
        async for request in requests:
            await ctx.dispatch(request, ctx.engines[-1].id)


def test_base_policy_hooks_are_no_ops() -> None:
    result = replay_run(Everything()).finish()
    assert {r.status for r in result.requests} == {"completed"}


@pytest.mark.parametrize("name", sorted(BUILT_INS))
def test_built_ins_wait_while_no_engine_accepts_placements(name: str) -> None:
    # both engines drain at 1 s; engine 2 joins at 2 s: the requests released in between wait
    events = [
        ClusterEvent(at_s=1.0, action="remove", engine=0),
        ClusterEvent(at_s=1.0, action="remove", engine=1),
        ClusterEvent(at_s=2.0, action="add"),
    ]
    run_ = replay_run(BUILT_INS[name](), events=events)
    result = run_.finish()
    assert {r.status for r in result.requests} == {"completed"}
    waited = [
        r for r in result.requests if r.arrival_ms is not None and 1000 <= r.arrival_ms < 2000
    ]
    assert len(waited) == 10
    assert {r.engine for r in waited} == {2}
    assert min(r.engine_arrival_ms or 0.0 for r in waited) == 2000.0


def test_requests_wait_unplaced_when_no_engine_ever_returns() -> None:
    events = [ClusterEvent(at_s=1.0, action="drain", engine=i) for i in (0, 1)]
    result = replay_run(RoundRobin(), events=events).finish()
    statuses = [r.status for r in result.requests]
    assert statuses[:10] == ["completed"] * 10
    assert set(statuses[10:]) == {"unplaced"}


def test_timelines_name_engines_by_id() -> None:
    from replay import timeline_from_events

    run_ = replay_run(RoundRobin())
    timeline = timeline_from_events(run_.journal.events)
    names = {
        e["pid"]: e["args"]["name"]
        for e in timeline.events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    assert {names[pid] for pid in (1, 2, 3)} == {"engine 0", "engine 1", "engine 2"}
