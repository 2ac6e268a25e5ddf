"""Macro-stepping is indistinguishable from one deadline per pass: the harder cases.

As in ``test_macro_differential.py``, every scenario is replayed with ``stepping="pass"`` (the
oracle) and ``stepping="macro"`` and must give equal ``requests.jsonl``, ``summary.json`` and
``config.json`` bytes, equal lifecycle events in order, and equal engine views wherever a
policy looks. This file covers what that one does not:

- agentic plays (random Weka plays with subagents, and plays of the bundled WEKA Claude Code
  corpus) run in lanes, with snapshots, warm-up and continuous profiles;
- profile-mode cancellation: requests still decoding at the end of the grace are cancelled,
  in random profiles and at an exact pass boundary (and one nanosecond either side);
- a policy that reads ``EngineView.prefix_overlap`` with the run's block keys, and every
  other view property, at random instants, on a 1 ms grid that holds every pass boundary of
  fixed timing, at predicted pass boundaries of any timing model, and from its hooks (the
  mid-commit view of a finishing pass);
- random P/D scenarios (pool sizes, both reservation orders, every built-in P/D policy and
  the probing policy on each pool, decode pools under KV pressure);
- random closed-loop and dependency-driven sessions (``after=`` edges on completion and on
  start, with delays) under random arrival processes and every timing model;
- ``ReplaySession`` stepping and breakpoints: instants, predicates on engine state, request
  and event breakpoints, ``step()``; the stops and the state seen at each (snapshots, engine
  and request states, traces, policy state, prefix hits) are equal in both modes.

The fixed tests at the end of the file pin cases once found to differ.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import (
    EngineConfig,
    EventKind,
    FixedTiming,
    LinearTiming,
    PolynomialTiming,
    RequestTrace,
    RooflineTiming,
    TableTiming,
    TokenizerStage,
    gpu_spec,
    model_arch,
)
from engines._engine import overlap_by_key
from loadgen import (
    ArrivalRule,
    Dep,
    Identity,
    LoadMode,
    Profile,
    Request,
    Workload,
    dataset_path,
    parse_arrivals,
    read_weka,
)
from policies import (
    PD_POLICIES,
    ChoicePolicy,
    KVAware,
    LeastLoaded,
    PDPolicy,
    Placement,
    PolicyContext,
    Random,
    RequestStream,
    RoundRobin,
    SessionAffinity,
    pd_policy,
)
from replay import (
    Aggregated,
    Disaggregated,
    KVLink,
    ReplayFailedError,
    ReplaySession,
    Stop,
)
from simclock import SimulationError

from ..policies.support import req, workload
from .test_macro_differential import QUIET, OwnTiming, _outputs

MS = 1_000_000
S = 1_000_000_000

TIMINGS: list[Callable[[], Any]] = [
    lambda: FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    lambda: FixedTiming(prefill_ms=20.0, decode_ms=7.25),
    PolynomialTiming,
    lambda: LinearTiming(c0=4.0, c_p=0.02, c_d=0.3, c_kv=0.0001),
    lambda: RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b"), overhead_ms=0.5),
    lambda: TableTiming(
        prefill_tokens=[128, 1024, 8192],
        prefill_ms=[12.0, 30.0, 180.0],
        decode_batch=[1, 16, 256],
        decode_context=[512, 8192, 65536],
        decode_ms=[[6, 7, 12], [7, 10, 30], [12, 30, 200]],
    ),
    OwnTiming,
]
AGGREGATED_POLICIES: list[Callable[[], Any]] = [
    RoundRobin,
    KVAware,
    LeastLoaded,
    Random,
    SessionAffinity,
    lambda: Prober(instants=(), grid_ns=MS, horizon_ns=3 * S),
    lambda: Prober(instants=tuple(range(3 * MS, 2 * S, 37 * MS + 1)), grid_ns=None, horizon_ns=0),
]


# -- the comparison ------------------------------------------------------------------------


@attrs.frozen
class Replayed:
    """One replay: its output bytes, the lifecycle events seen, what the policy read."""

    outputs: dict[str, bytes]
    events: list[Any]
    seen: list[tuple[object, ...]]
    failure: str | None
    failure_from: str | None
    result: Any


def replay_once(
    wl: Workload, make_policy: Callable[[], Any], stepping: str, **options: Any
) -> Replayed:
    """Replay ``wl`` with ``stepping``, watching what ``replay.run`` watches."""
    policy = make_policy()
    with ReplaySession.build(
        wl, policy=policy, history=False, stepping=stepping, **options
    ) as session:
        events: list[Any] = []
        session.journal.subscribe(events.append, kinds=QUIET)
        try:
            result = session.run()
        except ReplayFailedError as failed:  # a failing run must fail the same way
            result = failed.result
        failure = session.failure
    seen = list(getattr(policy, "seen", []))
    if isinstance(policy, PDPolicy):
        seen = [*getattr(policy.prefill, "seen", []), *getattr(policy.decode, "seen", [])]
    return Replayed(
        _outputs(result),
        events,
        seen,
        None if failure is None else repr(failure),
        None if failure is None else type(failure).__module__.split(".")[0],
        result,
    )


def check_same(wl: Workload, make_policy: Callable[[], Any], **options: Any) -> Replayed:
    """Replay both ways, assert equal bytes, events and views; return the oracle's replay.

    A run may fail only for a reason of the workload, the engines or the loop (a warm-up
    request rejected, a deadlock): a policy that raised would make both modes agree on
    nothing worth comparing.
    """
    oracle = replay_once(wl, make_policy, "pass", **options)
    macro = replay_once(wl, make_policy, "macro", **options)
    for name in ("requests.jsonl", "summary.json", "config.json"):
        assert macro.outputs[name] == oracle.outputs[name], name
    assert macro.events == oracle.events
    assert macro.seen == oracle.seen
    assert macro.failure == oracle.failure
    # a loop failure (a deadlock) is reported in the result, as replay.run reports it
    allowed = ("loadgen", "engines", "simclock")
    assert oracle.failure is None or oracle.failure_from in allowed, oracle.failure
    return oracle


# -- a policy that reads every view, prefix overlaps included ---------------------------------


class Prober(ChoicePolicy):
    """Places each request where ``view.prefix_overlap`` (of the run's block keys) and the
    outstanding tokens make it cheapest, after reading every view; records what it reads.

    It reads at every arrival, in its ``on_committed`` / ``on_finished`` hooks (the latter
    sees the mid-commit view of the pass that finished the request; it reads only that
    request's engine unless ``hooks_read_all``), at ``instants``, on a
    grid of ``grid_ns`` up to ``horizon_ns``, and at the pass boundaries a finishing
    request's token times predict (its last token time plus whole multiples of its last
    inter-token gap: exact for a steady run of equal passes, whatever the timing model).
    The probed keys are those of every request it has received (finished ones included,
    whose cached blocks later passes may evict).
    """

    name = "prober"

    def __init__(
        self,
        *,
        instants: Sequence[int],
        grid_ns: int | None,
        horizon_ns: int,
        hooks_read_all: bool = True,
        overlaps: bool = True,
    ) -> None:
        self.hooks_read_all = hooks_read_all
        self.overlaps = overlaps
        self.instants = tuple(sorted(set(instants)))
        self.grid_ns = grid_ns
        self.horizon_ns = horizon_ns
        self.seen: list[tuple[object, ...]] = []
        self._ctx: PolicyContext | None = None
        self._received: list[Request] = []

    def _look(self, ctx: PolicyContext, tag: str, only: int | None = None) -> None:
        now = ctx.now_ns()
        for v in ctx.engines:
            if only is not None and v.index != only:
                continue
            overlaps = tuple(
                v.prefix_overlap(ctx.block_keys(r, v.block_size))
                for r in (self._received[-8:] if self.overlaps else ())
            )
            self.seen.append(
                (
                    tag,
                    now,
                    v.index,
                    v.role,
                    v.waiting_count,
                    v.running_count,
                    v.outstanding_prefill_tokens,
                    v.outstanding_decode_tokens,
                    v.kv_blocks_free,
                    v.kv_blocks_used,
                    v.kv_blocks_total,
                    v.pending_offers,
                    overlaps,
                )
            )

    async def _sleeper(self, ctx: PolicyContext, instants: Sequence[int], tag: str) -> None:
        for t in instants:
            if t >= ctx.now_ns():
                await ctx.sleep_until_ns(t)
                self._look(ctx, tag)

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        self._ctx = ctx
        if self.instants:
            ctx.spawn(self._sleeper(ctx, self.instants, "instant"), name="instants")
        if self.grid_ns is not None:
            grid = range(self.grid_ns, self.horizon_ns, self.grid_ns)
            ctx.spawn(self._sleeper(ctx, grid, "grid"), name="grid")
        await super().run(requests, ctx)

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        self._received.append(request)
        self._look(ctx, "arrival")
        costs = []
        for v in ctx.engines:
            cached = v.prefix_overlap(ctx.block_keys(request, v.block_size)) * v.block_size
            todo = request.input_length - min(cached, request.input_length - 1)
            costs.append(v.outstanding_prefill_tokens + todo + v.outstanding_decode_tokens)
        return ctx.engines[costs.index(min(costs))].id

    def on_committed(self, placement: Placement) -> None:
        if self._ctx is not None:
            self._look(self._ctx, f"committed {placement.request_id}")

    def on_finished(self, trace: RequestTrace) -> None:
        ctx = self._ctx
        if ctx is None:
            return
        only = None if self.hooks_read_all else trace.engine
        self._look(ctx, f"finished {trace.request_id}", only)
        times = trace.token_times_ns
        if len(times) >= 2 and trace.terminal_status == "completed":
            last, gap = times[-1], times[-1] - times[-2]
            if gap > 0:
                echo = [last + k * gap for k in (1, 2, 3, 5, 8)]
                ctx.spawn(self._sleeper(ctx, echo, f"echo {trace.request_id}"))


# -- random requests --------------------------------------------------------------------


@st.composite
def engine_configs(draw: st.DrawFn, *, role: str = "aggregated") -> EngineConfig:
    return EngineConfig(
        num_blocks=draw(st.sampled_from([14, 24, 60, 400])),
        block_size=64,
        max_num_batched_tokens=draw(st.sampled_from([128, 512, 2048])),
        max_num_seqs=draw(st.sampled_from([2, 4, 256])),
        enable_chunked_prefill=draw(st.booleans()),
        enable_prefix_caching=draw(st.booleans()),
        watermark_fraction=draw(st.sampled_from([0.0, 0.0, 0.1])),
        role=role,  # type: ignore[arg-type]
    )


def _prefix_ids(family: int, prompt: int) -> list[int]:
    return [100 * family + k for k in range(-(-prompt // 64))]


@st.composite
def request_lists(draw: st.DrawFn, *, most: int = 12) -> list[Request]:
    requests = []
    for i in range(draw(st.integers(1, most))):
        prompt = draw(st.integers(1, 900))
        family = draw(st.integers(0, 2))
        requests.append(
            req(
                f"r{i}",
                prompt=prompt,
                output=draw(st.integers(0, 150)),
                at_ms=float(draw(st.integers(0, 400))),
                ids=_prefix_ids(family, prompt) if draw(st.booleans()) else None,
                conversation=f"c{family}",
            )
        )
    return requests


# -- 1. probing views, prefix overlaps included -----------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=request_lists(),
    config=engine_configs(),
    workers=st.integers(1, 3),
    timing=st.integers(0, len(TIMINGS) - 1),
    instants=st.lists(st.integers(0, 2500 * MS), max_size=40),
    grid=st.sampled_from([None, MS, 10 * MS]),
)
def test_a_policy_reading_prefix_overlaps_inside_runs_sees_the_same(
    requests: list[Request],
    config: EngineConfig,
    workers: int,
    timing: int,
    instants: list[int],
    grid: int | None,
) -> None:
    topology = Aggregated(workers=workers, engine=config, timing=TIMINGS[timing]())
    check_same(
        workload(requests),
        lambda: Prober(instants=instants, grid_ns=grid, horizon_ns=2500 * MS),
        topology=topology,
    )


class _OverlapChecker(Prober):
    """A :class:`Prober` that also reads each prefix overlap one key at a time, as the
    last publication has it (``engines._engine.overlap_by_key``), and checks that the
    view's reading (the cache's prefix lookup when no key of the chain has a transition
    pending) says the same."""

    def _look(self, ctx: PolicyContext, tag: str, only: int | None = None) -> None:
        for v in ctx.engines:
            for r in self._received[-8:]:
                keys = ctx.block_keys(r, v.block_size)
                fast = v.prefix_overlap(keys)
                engine = v._engine  # (the view has synced the engine)
                pending = engine._core.kv.pending_keys
                # reads where a key of the chain has a transition not yet published
                self.pending_chains += not set(pending).isdisjoint(keys)
                assert fast == overlap_by_key(engine._published_keys(), keys), tag
        super()._look(ctx, tag, only)

    pending_chains = 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=request_lists(),
    config=engine_configs(),
    workers=st.integers(1, 3),
    stepping=st.sampled_from(["macro", "pass"]),
    grid=st.sampled_from([MS, 10 * MS]),
)
def test_prefix_overlap_reads_what_a_walk_of_the_published_keys_reads(
    requests: list[Request], config: EngineConfig, workers: int, stepping: str, grid: int
) -> None:
    topology = Aggregated(workers=workers, engine=config, timing=TIMINGS[0]())
    done = replay_once(
        workload(requests),
        lambda: _OverlapChecker(instants=(), grid_ns=grid, horizon_ns=2500 * MS),
        stepping,
        topology=topology,
    )
    # (a check that failed in the policy fails the run)
    assert done.failure is None or done.failure_from in ("loadgen", "engines", "simclock"), (
        done.failure
    )


def test_prefix_overlap_of_a_chain_with_transitions_pending_reads_the_published_keys() -> None:
    # Long prompts computed two blocks a pass in macro runs: a read inside a run sees the
    # blocks of the chunk in flight cached, but not yet published.
    requests = [
        req(f"p{i}", prompt=1200, output=40, at_ms=float(i), ids=_prefix_ids(1, 1200))
        for i in range(3)
    ]
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=400, block_size=64, max_num_batched_tokens=128),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    made: list[_OverlapChecker] = []

    def make() -> _OverlapChecker:
        made.append(_OverlapChecker(instants=(), grid_ns=MS, horizon_ns=30 * S))
        return made[-1]

    done = replay_once(workload(requests), make, "macro", topology=topology)
    assert done.failure is None, done.failure
    assert made[0].pending_chains > 0


def test_prefix_overlaps_change_inside_decode_runs_and_agree() -> None:
    # Finished requests leave their prompt blocks cached and free; later decode steps of a
    # long run take free blocks and evict them, so what prefix_overlap reports changes in
    # the middle of runs. The grid of 1 ms lands on every pass boundary (fixed timing, whole
    # ms arrivals).
    requests = [
        req(f"a{i}", prompt=640, output=1, at_ms=0.0, ids=_prefix_ids(i + 1, 640)) for i in range(3)
    ] + [req(f"b{i}", prompt=100, output=400 + 30 * i, at_ms=60.0 + i) for i in range(3)]
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=48, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )

    def make() -> Prober:
        return Prober(instants=(), grid_ns=MS, horizon_ns=6 * S)

    seen = check_same(workload(requests), make, topology=topology).seen
    # the overlap of a0's prompt (10 blocks) fell while b* were decoding, between arrivals
    grid = [s for s in seen if s[0] == "grid"]
    first = [s[12][0] for s in grid if s[12]]
    assert max(first) == 10 and min(first) < 10
    print(sorted(set(first)))


# -- 2. agentic plays in lanes, profiles and their cancellations ---------------------------


def _call(t_s: float, tokens: int, out: int, api_s: float, base: int) -> dict[str, object]:
    return {
        "t": round(t_s, 3),
        "type": "n",
        "model": "m",
        "in": tokens,
        "out": out,
        "api_time": round(api_s, 3),
        "hash_ids": list(range(base, base + -(-tokens // 64))),
    }


@st.composite
def weka_plays(draw: st.DrawFn, index: int) -> dict[str, object]:
    """A Weka play: main calls whose prompts grow, and maybe subagents (nested too)."""

    def conversation(base: int, depth: int) -> list[dict[str, object]]:
        items: list[dict[str, object]] = []
        t = 0.0
        tokens = draw(st.integers(64, 400))
        for k in range(draw(st.integers(1, 4))):
            api = draw(st.sampled_from([0.05, 0.3, 1.0, 2.5]))
            items.append(_call(t, tokens, draw(st.integers(1, 120)), api, base))
            if depth < 2 and draw(st.integers(0, 3)) == 0:
                agent = f"agent_{base}_{k}"
                items.append(
                    {
                        "t": round(t + api + 0.01, 3),
                        "type": "subagent",
                        "agent_id": agent,
                        "status": "completed",
                        "requests": conversation(base + 1000 * (k + 1), depth + 1),
                    }
                )
            # a negative gap: the next call overlaps this one (by more than 1 s if api > 1)
            t += max(0.0, api + draw(st.sampled_from([0.0, 0.1, 0.5, 2.0, -1.5])))
            tokens += draw(st.integers(0, 300))
        return items

    return {
        "id": f"p{index}",
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": conversation(1, 0),
    }


def _read_plays(plays: Sequence[dict[str, object]]) -> Workload:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "plays.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in plays), encoding="utf-8")
        return read_weka(path, source="plays")


@st.composite
def play_modes(draw: st.DrawFn) -> LoadMode:
    lanes = draw(st.integers(1, 3))
    snapshots = draw(st.booleans())
    warmup = snapshots and draw(st.booleans())
    profile = None
    if snapshots and draw(st.booleans()):
        profile = Profile(
            duration_s=draw(st.sampled_from([0.3, 0.8, 1.5, 2.5])),
            grace_s=draw(st.sampled_from([0.0, 0.05, 0.4, 1.0])),
            tree_idle_cap_s=draw(st.sampled_from([0.2, 1.0, 300.0])),
            global_idle_cap_s=draw(st.sampled_from([0.1, 10.0])),
        )
    return LoadMode(
        lanes=lanes,
        snapshots=snapshots,
        snapshot_seed=draw(st.sampled_from([None, 7, 42])),
        warmup=warmup,
        warmup_repeats=draw(st.integers(0, 3)) if warmup else 10,
        profile=profile,
        speedup=draw(st.sampled_from([1.0, 1.0, 4.0])),
    )


PLAY_POLICIES: list[Callable[[], Any]] = [
    SessionAffinity,
    KVAware,
    RoundRobin,
    lambda: Prober(instants=tuple(range(0, 4 * S, 97 * MS)), grid_ns=None, horizon_ns=0),
]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    count=st.integers(1, 4),
    mode=play_modes(),
    config=engine_configs(),
    workers=st.integers(1, 2),
    timing=st.integers(0, len(TIMINGS) - 1),
    policy=st.integers(0, len(PLAY_POLICIES) - 1),
    seed=st.integers(0, 3),
)
def test_agentic_plays_in_lanes_match(
    data: st.DataObject,
    count: int,
    mode: LoadMode,
    config: EngineConfig,
    workers: int,
    timing: int,
    policy: int,
    seed: int,
) -> None:
    plays = [data.draw(weka_plays(i)) for i in range(count)]
    if mode.profile is not None:
        # A profile recycles plays until its cutoff; one whose call is rejected fails at its
        # release instant, and recycling it then never lets the clock move (a livelock): keep
        # every call admissible
        config = attrs.evolve(config, num_blocks=max(config.num_blocks, 60))
        config = attrs.evolve(config, enable_chunked_prefill=True)
    topology = Aggregated(workers=workers, engine=config, timing=TIMINGS[timing]())
    oracle = check_same(
        _read_plays(plays), PLAY_POLICIES[policy], topology=topology, load=mode, seed=seed
    )
    summary = json.loads(oracle.outputs["summary.json"])
    assert oracle.failure is not None or summary["plays"]["plays"] >= 1


def _profile_cancel_play() -> Workload:
    # tests/replay/test_profile_cancel.py: main calls at 0, 10, 20, 30, 40 s; with one lane and
    # snapshot seed 42 call 3 is released at 1,665.12 ms and decodes 2,000 tokens
    play = {
        "id": "p1",
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": [
            {
                "t": 10 * i,
                "type": "n",
                "model": "m",
                "in": 128,
                "out": 2000 if i == 3 else 5,
                "api_time": 1,
                "hash_ids": [1, 2],
            }
            for i in range(5)
        ],
    }
    return _read_plays([play])


PROFILE_TOPOLOGY = Aggregated(
    workers=1,
    engine=EngineConfig(num_blocks=100),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)


@pytest.mark.parametrize("offset_ns", [-1, 0, 1, 3 * MS])
def test_a_cancellation_at_a_pass_boundary_cancels_the_same(offset_ns: int) -> None:
    """The grace ends exactly at a decode pass boundary of the cancelled request (and 1 ns
    or 3 ms either side): the tokens it keeps, its terminal instant and every byte agree."""
    wl = _profile_cancel_play()
    base = LoadMode(lanes=1, snapshots=True, snapshot_seed=42, profile=Profile(duration_s=5.0))
    # the oracle's token times of call 3 without a cutoff nearby: the pass boundaries
    probe = replay_once(wl, RoundRobin, "pass", topology=PROFILE_TOPOLOGY, load=base)
    times = next(
        r["token_times_ms"]
        for r in map(json.loads, probe.outputs["requests.jsonl"].splitlines())
        if r["request_id"].endswith("main/3")
    )
    boundary_ns = round(times[700] * MS)  # a pass boundary in the middle of the decode
    cutoff_ns = 5 * S
    grace_ns = boundary_ns - cutoff_ns + offset_ns
    load = LoadMode(
        lanes=1,
        snapshots=True,
        snapshot_seed=42,
        profile=Profile(duration_s=5.0, grace_s=grace_ns / 1e9),
    )
    assert round(load.profile.grace_s * 1e9) == grace_ns  # type: ignore[union-attr]
    oracle = check_same(wl, RoundRobin, topology=PROFILE_TOPOLOGY, load=load)
    record = next(
        r
        for r in map(json.loads, oracle.outputs["requests.jsonl"].splitlines())
        if r["request_id"].endswith("main/3")
    )
    assert record["status"] == "cancelled"
    assert record["terminal_ms"] * MS == pytest.approx(boundary_ns + offset_ns, abs=1)
    # the pass ending at the cancel instant has committed its token (before the cancellation)
    kept = 701 if offset_ns >= 0 else 700
    assert record["output_tokens"] == kept + max(offset_ns, 0) // (10 * MS)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    out=st.integers(200, 3000),
    duration_ms=st.integers(100, 6000),
    grace_ms=st.integers(0, 3000),
    prefill_ms=st.sampled_from([20.0, 50.0, 33.3]),
    decode_ms=st.sampled_from([10.0, 7.25, 3.0]),
    lanes=st.integers(1, 2),
    warmup=st.booleans(),
)
def test_profile_cancellations_mid_decode_match(
    out: int,
    duration_ms: int,
    grace_ms: int,
    prefill_ms: float,
    decode_ms: float,
    lanes: int,
    warmup: bool,
) -> None:
    plays = [
        {
            "id": f"p{j}",
            "models": ["m"],
            "block_size": 64,
            "hash_id_scope": "local",
            "requests": [_call(2.0 * i, 128 + 64 * i, out // (i + 1), 0.5, 1) for i in range(4)],
        }
        for j in range(3)
    ]
    load = LoadMode(
        lanes=lanes,
        snapshots=True,
        snapshot_seed=3,
        warmup=warmup,
        warmup_repeats=2,
        profile=Profile(duration_s=duration_ms / 1000, grace_s=grace_ms / 1000),
    )
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=200),
        timing=FixedTiming(prefill_ms=prefill_ms, decode_ms=decode_ms),
    )
    check_same(_read_plays(plays), SessionAffinity, topology=topology, load=load)


def _weka_members(names: Sequence[str]) -> Workload:
    """Plays of the bundled WEKA Claude Code corpus, read from a folder of those members."""
    wanted = {f"weka_cc_traces/{n}.json" for n in names}
    with tempfile.TemporaryDirectory() as folder:
        with tarfile.open(dataset_path("weka-claude-code")) as archive:
            for member in archive:
                if member.name in wanted:
                    data = archive.extractfile(member)
                    assert data is not None
                    (Path(folder) / Path(member.name).name).write_bytes(data.read())
                    wanted.discard(member.name)
                    if not wanted:
                        break
        assert not wanted
        return read_weka(folder, source="weka")


@pytest.fixture(scope="module")
def weka_sample() -> Workload:
    # trace_0277: 9 main calls and 4 subagents (44 calls); 0016 and 0019: short main-only plays
    return _weka_members(["trace_0016", "trace_0019", "trace_0277"])


CORPUS_PROFILE = LoadMode(
    lanes=2,
    speedup=50.0,
    snapshots=True,
    snapshot_seed=42,
    warmup=True,
    warmup_repeats=2,
    profile=Profile(duration_s=20.0, grace_s=0.5),
)


@pytest.mark.parametrize(
    ("load", "probe"),
    [
        (LoadMode(lanes=2, speedup=20.0), False),
        (CORPUS_PROFILE, False),
        (CORPUS_PROFILE, True),
    ],
    ids=["lanes", "profile", "profile-prober"],
)
def test_claude_code_plays_from_the_bundled_corpus_match(
    weka_sample: Workload, load: LoadMode, probe: bool
) -> None:
    assert len(weka_sample.plays) == 3 and len(weka_sample.subagents) == 4
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=4500, block_size=64, max_num_batched_tokens=8192),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    make: Callable[[], Any] = SessionAffinity
    if probe:  # every 10 ms: a pass boundary of every decode run of this fixed timing
        make = lambda: Prober(instants=(), grid_ns=10 * MS, horizon_ns=120 * S)  # noqa: E731
    oracle = check_same(weka_sample, make, topology=topology, load=load, seed=11)
    summary = json.loads(oracle.outputs["summary.json"])
    records = [json.loads(line) for line in oracle.outputs["requests.jsonl"].splitlines()]
    if load.profile is None:
        assert summary["plays"]["outcome_counts"]["completed"] == 3
        assert sum("/agent_" in r["request_id"] for r in records) == 44
    else:  # cut mid-decode at the end of the grace
        cancelled = [r for r in records if r["status"] == "cancelled"]
        assert cancelled and all(0 < r["output_tokens"] < r["output_length"] for r in cancelled)


# -- 3. P/D, at random -----------------------------------------------------------------


def _pd_side(name: str, *, overlaps: bool = True) -> Any:
    if name == "prober":
        return Prober(
            overlaps=overlaps,
            instants=tuple(range(5 * MS, 3 * S, 23 * MS + 7)),
            grid_ns=None,
            horizon_ns=0,
        )
    return name


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=request_lists(most=14),
    prefill=engine_configs(role="prefill"),
    decode=engine_configs(role="decode"),
    prefill_workers=st.integers(1, 2),
    decode_workers=st.integers(1, 3),
    prefill_timing=st.integers(0, len(TIMINGS) - 1),
    decode_timing=st.integers(0, len(TIMINGS) - 1),
    order=st.sampled_from(["source_first", "destination_first"]),
    policy=st.sampled_from([*sorted(PD_POLICIES), "prober"]),
    link=st.sampled_from(
        [
            KVLink(),
            KVLink(kv_bytes_per_token=262144.0, bandwidth_gbps=50.0),
            KVLink(mode="full_prompt", kv_bytes_per_token=131072.0, bandwidth_gbps=5.0),
            KVLink(latency_ms=3.0),
        ]
    ),
    seed=st.integers(0, 3),
)
def test_random_pd_scenarios_match(
    requests: list[Request],
    prefill: EngineConfig,
    decode: EngineConfig,
    prefill_workers: int,
    decode_workers: int,
    prefill_timing: int,
    decode_timing: int,
    order: str,
    policy: str,
    link: KVLink,
    seed: int,
) -> None:
    topology = Disaggregated(
        prefill_workers=prefill_workers,
        decode_workers=decode_workers,
        prefill_engine=prefill,
        decode_engine=decode,
        prefill_timing=TIMINGS[prefill_timing](),
        decode_timing=TIMINGS[decode_timing](),
        link=link,
        order=order,  # type: ignore[arg-type]
    )

    def make() -> Any:
        if policy == "prober":  # the probing policy places on both pools
            return PDPolicy(prefill=_pd_side("prober"), decode=_pd_side("prober"))
        return pd_policy(policy)

    oracle = check_same(workload(requests), make, topology=topology, seed=seed)
    assert len(oracle.outputs["requests.jsonl"].splitlines()) == len(requests)


# -- 4. sessions: closed loops and dependencies, under random arrival processes ------------


@st.composite
def session_workloads(draw: st.DrawFn) -> list[Request]:
    """Conversations of a few turns: each turn after the previous one (on completion, or on
    its start), with a delay; some conversations also wait for another's turn."""
    requests: list[Request] = []
    for c in range(draw(st.integers(1, 5))):
        turns = draw(st.integers(1, 4))
        prompt = draw(st.integers(30, 300))
        for t in range(turns):
            after: list[Dep] = []
            if t:
                after.append(
                    Dep(
                        f"c{c}t{t - 1}",
                        on=draw(st.sampled_from(["completion", "completion", "start"])),
                        delay_ms=float(draw(st.sampled_from([0, 0, 5, 50, 333]))),
                    )
                )
            elif c and draw(st.integers(0, 3)) == 0:  # a spawn edge on another conversation
                after.append(Dep(f"c{c - 1}t0", delay_ms=float(draw(st.integers(0, 100)))))
            prompt += draw(st.integers(0, 200))
            requests.append(
                Request(
                    id=f"c{c}t{t}",
                    input_length=prompt,
                    output_length=draw(st.integers(1, 150)),
                    block_size=64,
                    hash_ids=_prefix_ids(c, prompt),
                    arrival=ArrivalRule(
                        not_before_ms=None if after else float(draw(st.integers(0, 300))),
                        after=tuple(after),
                    ),
                    identity=Identity(conversation_id=f"c{c}", turn_index=t),
                )
            )
    return requests


@st.composite
def session_modes(draw: st.DrawFn) -> LoadMode:
    closed = draw(st.booleans())
    arrivals = draw(st.sampled_from([None, "poisson(20)", "gamma(10, 2.0)", "constant(8)"]))
    return LoadMode(
        concurrency=draw(st.integers(1, 3)) if closed else None,
        speedup=1.0 if closed else draw(st.sampled_from([1.0, 2.5])),
        arrivals=None if arrivals is None else parse_arrivals(arrivals),
        max_requests=draw(st.sampled_from([None, None, 4])),
        max_sessions=draw(st.sampled_from([None, None, 2])),
        max_virtual_time_s=draw(st.sampled_from([None, None, 0.7, 1.3])),
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=session_workloads(),
    mode=session_modes(),
    config=engine_configs(),
    workers=st.integers(1, 3),
    timing=st.integers(0, len(TIMINGS) - 1),
    policy=st.integers(0, len(AGGREGATED_POLICIES) - 1),
    tokenizer=st.booleans(),
    seed=st.integers(0, 3),
)
def test_random_sessions_and_dependencies_match(
    requests: list[Request],
    mode: LoadMode,
    config: EngineConfig,
    workers: int,
    timing: int,
    policy: int,
    tokenizer: bool,
    seed: int,
) -> None:
    check_same(
        workload(requests),
        AGGREGATED_POLICIES[policy],
        topology=Aggregated(workers=workers, engine=config, timing=TIMINGS[timing]()),
        load=mode,
        seed=seed,
        tokenizer=TokenizerStage(workers=1, base_ms=2.0, per_input_token_us=3.0)
        if tokenizer
        else None,
    )


# -- 5. session stepping and breakpoints ---------------------------------------------------


def _observe(session: ReplaySession, stop: Stop, probes: Sequence[str]) -> tuple[object, ...]:
    """Everything a debugging user can look at, at a stop."""
    engines = tuple(
        (
            e.snapshot(),
            e.passes,
            e.busy_ns,
            session.engine(e.index),
        )
        for e in session.engines
    )
    journal = session.journal
    journal.sync()
    traces = tuple(
        (rid, tuple(t.token_times_ns), t.terminal_status, t.num_preemptions, t.terminal_ns)
        for rid, t in sorted(journal.traces.items())
    )
    return (
        stop.reason,
        stop.now_ns,
        stop.events,
        None if stop.breakpoint is None else stop.breakpoint.number,
        str(stop),
        engines,
        traces,
        session.policy(),
        tuple(session.prefix_hits(rid) for rid in probes),
    )


Command = tuple[str, int, int]


@st.composite
def commands(draw: st.DrawFn, *, history: bool) -> list[Command]:
    kinds = ["at", "until_ns", "when_running", "passes"]
    if history:
        kinds += ["first_token", "finished", "preemption", "step", "until_request"]
    return draw(
        st.lists(
            st.tuples(st.sampled_from(kinds), st.integers(0, 2500), st.integers(0, 12)),
            min_size=1,
            max_size=8,
        )
    )


def _drive(
    session: ReplaySession,
    script: Sequence[Command],
    requests: Sequence[Request],
    seen: list[tuple[object, ...]],
) -> list[tuple[object, ...]]:
    """Set breakpoints and stop as ``script`` says; observe into ``seen`` at every stop."""
    probes = [r.id for r in requests[:4]]
    n = len(session.engines)
    stop: Stop | None = None
    for kind, a, b in script:
        rid = requests[b % len(requests)].id
        if kind == "at":
            if a * MS >= session.now_ns:
                session.break_at(a * MS + b)  # b ns past a whole ms: off the pass grid too
        elif kind == "when_running":
            engine = session.engines[b % n]
            session.break_when(
                lambda _s, e=engine, k=1 + a % 3: e.view.running_count >= k,
                description="running",
            )
        elif kind == "passes":
            stop = session.run_until(lambda s, k=a // 10: sum(e.passes for e in s.engines) >= k)
        elif kind == "until_ns":
            if a * MS >= session.now_ns:
                stop = session.run_until(time_ns=a * MS)
        elif kind == "first_token":
            session.break_on_request(rid, "first_token")
        elif kind == "finished":
            session.break_on_request(rid, EventKind.FINISHED)
        elif kind == "preemption":
            session.break_on("preemption", "rejection")
        elif kind == "step":
            for _ in range(1 + b % 4):
                stop = session.step()
                seen.append(_observe(session, stop, probes))
        elif kind == "until_request":
            stop = session.run_until_request(rid, "first_token" if a % 2 else "terminal")
        if stop is not None:
            seen.append(_observe(session, stop, probes))
            stop = None
    for _ in range(40):
        stop = session.resume()
        seen.append(_observe(session, stop, probes))
        if stop.reason == "finished":
            break
    return seen


def _session_both_ways(
    requests: list[Request],
    script: Sequence[Command],
    make_policy: Callable[[], Any],
    *,
    history: bool,
    **options: Any,
) -> list[tuple[object, ...]]:
    observed = {}
    outputs = {}
    for stepping in ("pass", "macro"):
        with ReplaySession.build(
            workload(requests),
            policy=make_policy(),
            history=history,
            stepping=stepping,
            **options,
        ) as session:
            seen: list[tuple[object, ...]] = []
            try:
                seen = _drive(session, script, requests, seen)
                try:
                    result = session.run()
                except ReplayFailedError as failed:
                    result = failed.result
                outputs[stepping] = _outputs(result)
            except SimulationError as error:  # a loop failure met while stepping: the same
                seen.append(("raised", repr(error)))
                outputs[stepping] = {}
            observed[stepping] = seen
    assert outputs["macro"] == outputs["pass"]
    assert len(observed["macro"]) == len(observed["pass"])
    for k, (macro, oracle) in enumerate(zip(observed["macro"], observed["pass"], strict=True)):
        assert macro == oracle, k
    return observed["pass"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=request_lists(most=8),
    config=engine_configs(),
    workers=st.integers(1, 2),
    timing=st.integers(0, len(TIMINGS) - 1),
    script=commands(history=False),
    policy=st.integers(0, len(AGGREGATED_POLICIES) - 1),
)
def test_session_breakpoints_at_instants_and_predicates_stop_at_the_same_state(
    requests: list[Request],
    config: EngineConfig,
    workers: int,
    timing: int,
    script: list[Command],
    policy: int,
) -> None:
    seen = _session_both_ways(
        requests,
        script,
        AGGREGATED_POLICIES[policy],
        history=False,
        topology=Aggregated(workers=workers, engine=config, timing=TIMINGS[timing]()),
    )
    stops = [s for s in seen if s[0] != "raised"]
    assert all(a[1] <= b[1] for a, b in pairwise(stops))  # type: ignore[operator]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=request_lists(most=8),
    config=engine_configs(),
    workers=st.integers(1, 2),
    timing=st.integers(0, len(TIMINGS) - 1),
    script=commands(history=True),
)
def test_session_steps_and_request_breakpoints_stop_at_the_same_state(
    requests: list[Request],
    config: EngineConfig,
    workers: int,
    timing: int,
    script: list[Command],
) -> None:
    seen = _session_both_ways(
        requests,
        script,
        SessionAffinity,
        history=True,
        topology=Aggregated(workers=workers, engine=config, timing=TIMINGS[timing]()),
    )
    stops = [s for s in seen if s[0] != "raised"]
    assert all(a[1] <= b[1] for a, b in pairwise(stops))  # type: ignore[operator]


def test_breakpoints_inside_a_long_run_stop_at_the_same_state() -> None:
    # long decodes on a roomy engine: every stop but the first lands inside a macro run
    requests = [
        req(f"r{i}", prompt=300 + 37 * i, output=250 + 13 * i, at_ms=7.0 * i) for i in range(6)
    ]
    script: list[Command] = [
        ("at", 400, 0),
        ("at", 1234, 5),
        ("when_running", 0, 1),  # fires once r1 joins engine 1
        ("until_ns", 2000, 0),
        ("at", 2010, 0),  # a pass boundary: 10 ms steps from whole-ms instants
    ]
    seen = _session_both_ways(
        requests,
        script,
        RoundRobin,
        history=False,
        topology=Aggregated(
            workers=2,
            engine=EngineConfig(num_blocks=2000, block_size=64),
            timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        ),
    )
    stops = [(s[0], s[1]) for s in seen]
    assert ("breakpoint", 400 * MS) in stops and ("breakpoint", 1_234_000_005) in stops
    assert ("breakpoint", 2010 * MS) in stops and stops[-1][0] == "finished"


# -- known divergences ----------------------------------------------------------------------


class FinishWatcher(RoundRobin):
    """Round robin; when a request finishes, reads what every engine's view says."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[object, ...]] = []
        self._ctx: PolicyContext | None = None

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        self._ctx = ctx
        await super().run(requests, ctx)

    def on_finished(self, trace: RequestTrace) -> None:
        assert self._ctx is not None
        views = [
            (v.running_count, v.outstanding_decode_tokens, v.kv_blocks_used)
            for v in self._ctx.engines
        ]
        self.seen.append((trace.request_id, self._ctx.now_ns(), *views))


def test_a_hook_reading_another_engine_at_a_shared_pass_end_sees_the_same() -> None:
    # Two engines, one request each, both finishing at 80 ms (first token at 50 ms, then a
    # run of three decode passes). Per pass, engine 0's pass commits first: r0's FINISHED
    # hook sees engine 0 mid-commit (r0 still listed, its blocks freed) and engine 1 still
    # running r1 (1 decode token left, 2 blocks); then engine 1 commits. Macro-stepped,
    # reading engine 1's view from inside engine 0's commit commits engine 1's pass ending
    # at 80 ms there and then: r1's hook runs nested inside r0's (so it is recorded first),
    # and r0's hook sees engine 1 mid-commit, (1, 0, 0).
    requests = [req(f"r{i}", prompt=64, output=4, at_ms=0.0) for i in range(2)]
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=14, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    oracle = replay_once(workload(requests), FinishWatcher, "pass", topology=topology)
    assert oracle.seen == [
        ("r0", 80 * MS, (1, 0, 0), (1, 1, 2)),
        ("r1", 80 * MS, (0, 0, 0), (1, 0, 0)),
    ]
    macro = replay_once(workload(requests), FinishWatcher, "macro", topology=topology)
    assert macro.seen == oracle.seen


def _one_engine_session(stepping: str, requests: Sequence[Request], **kw: Any) -> ReplaySession:
    return ReplaySession.build(
        workload(requests),
        topology=Aggregated(
            workers=kw.get("workers", 1),
            engine=EngineConfig(num_blocks=500, block_size=64),
            timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        ),
        policy=RoundRobin(),
        history=False,
        stepping=stepping,
    )


def test_a_predicate_on_passes_stops_at_the_same_instant() -> None:
    # One request: prefill pass 0-50 ms, then decode passes 50-60, 60-70, 70-80 (one run
    # when macro-stepped). Per pass, the third pass is scheduled at 60 ms and the predicate
    # stops the session there; macro-stepped, the next callback after 50 ms is the run's
    # end at 80 ms, so the session stops at 80 ms.
    requests = [req("r0", prompt=1, output=4)]
    stops = {}
    for stepping in ("pass", "macro"):
        with _one_engine_session(stepping, requests) as session:
            stop = session.run_until(lambda s: s.engines[0].passes >= 3)
            stops[stepping] = (stop.reason, stop.now_ns)
    assert stops["pass"] == ("predicate", 60 * MS)
    assert stops["macro"] == stops["pass"]


def test_the_pass_in_flight_ends_at_the_same_instant() -> None:
    requests = [req(f"r{i}", prompt=200, output=300) for i in range(4)]
    seen = {}
    for stepping in ("pass", "macro"):
        with _one_engine_session(stepping, requests) as session:
            session.run_until(time_ns=1234 * MS)
            seen[stepping] = session.engine(0).pass_end_ns
    assert seen["pass"] == 1240 * MS
    assert seen["macro"] == seen["pass"]  # macro-stepped: 3,040 ms, the run's end


def test_decode_block_keys_are_numbered_the_same() -> None:
    # Two engines decoding side by side; at 1,234 ms the session reads engine 0 first, which
    # makes engine 0's decode-block keys before engine 1's (per pass they interleave).
    requests = [req(f"r{i}", prompt=300 + 37 * i, output=250, at_ms=7.0 * i) for i in range(4)]
    seen = {}
    for stepping in ("pass", "macro"):
        with _one_engine_session(stepping, requests, workers=2) as session:
            session.run_until(time_ns=1234 * MS)
            seen[stepping] = [e.snapshot().block_keys for e in session.engines]
    assert [sum(k != 0 for k in keys) for keys in seen["macro"]] == [
        sum(k != 0 for k in keys) for keys in seen["pass"]
    ]
    assert seen["macro"] == seen["pass"]


def _ids(base: int, prompt: int) -> list[int]:
    return [base + k for k in range(-(-prompt // 64))]


def test_pd_decode_prefix_overlaps_agree() -> None:
    # Found by test_random_pd_scenarios_match (the probing policy on both pools). The first
    # difference (the requests.jsonl, summary and events agree): at 396,000,119 ns, a
    # sampled instant off the pass grid, the decode pool's first engine (13 of 14 blocks
    # used) reports 8 leading cached blocks of the sixth prompt the decode side probes
    # macro-stepped, 0 per pass.
    spec = [
        ("r0", 56, 114, 159.0, [100]),
        ("r1", 643, 35, 399.0, _ids(1212000, 643)),
        ("r2", 753, 71, 400.0, _ids(0, 753)),
        ("r3", 282, 79, 380.0, _ids(100, 282)),
        ("r4", 270, 118, 243.0, _ids(100, 270)),
        ("r5", 620, 41, 400.0, _ids(0, 620)),
        ("r6", 512, 53, 363.0, _ids(1222000, 512)),
        ("r7", 58, 13, 134.0, [1224000]),
        ("r8", 840, 149, 204.0, _ids(100, 840)),
        ("r9", 256, 98, 298.0, _ids(0, 256)),
    ]
    requests = [
        req(rid, prompt=p, output=o, at_ms=at, ids=ids, conversation="c0")
        for rid, p, o, at, ids in spec
    ]
    topology = Disaggregated(
        prefill_workers=1,
        decode_workers=3,
        prefill_engine=EngineConfig(
            num_blocks=14,
            max_num_batched_tokens=2048,
            max_num_seqs=4,
            enable_chunked_prefill=False,
            enable_prefix_caching=False,
            role="prefill",
        ),
        decode_engine=EngineConfig(
            num_blocks=14,
            max_num_batched_tokens=2048,
            max_num_seqs=4,
            watermark_fraction=0.1,
            role="decode",
        ),
        prefill_timing=TIMINGS[4](),
        decode_timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        link=KVLink(mode="full_prompt", kv_bytes_per_token=131072.0, bandwidth_gbps=5.0),
    )

    def make() -> PDPolicy:
        return PDPolicy(prefill=_pd_side("prober"), decode=_pd_side("prober"))

    oracle = replay_once(workload(requests), make, "pass", topology=topology, seed=3)
    macro = replay_once(workload(requests), make, "macro", topology=topology, seed=3)
    assert macro.outputs == oracle.outputs and macro.events == oracle.events
    assert macro.seen == oracle.seen


def test_a_predicate_true_on_resume_at_the_end_of_a_run_fires() -> None:
    # r1 (no output) at 0 ms; r0 at 117 ms: prefill 117-137 ms, then eight decode passes of
    # 7.25 ms (one macro-stepped run) to its finish at 195 ms. Paused at 195 ms (nothing at
    # that instant run yet), r0 is running; a predicate "engine 0 runs a request" is set and
    # the session resumed. Per pass it fires at 195 ms before r0's last pass commits; macro-
    # stepped it never fires and the run finishes.
    requests = [req("r0", prompt=1, output=9, at_ms=117.0), req("r1", prompt=1, output=0)]
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=14, max_num_batched_tokens=128, max_num_seqs=2),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=7.25),
    )
    stops = {}
    for stepping in ("pass", "macro"):
        with ReplaySession.build(
            workload(requests),
            topology=topology,
            policy=RoundRobin(),
            history=False,
            stepping=stepping,
        ) as session:
            seen = [session.run_until(time_ns=195 * MS)]
            session.break_when(
                lambda s: s.engines[0].view.running_count >= 1, description="running"
            )
            seen.append(session.resume())
            stops[stepping] = [(s.reason, s.now_ns) for s in seen]
    assert stops["pass"] == [("time", 195 * MS), ("breakpoint", 195 * MS)]
    assert stops["macro"] == stops["pass"]
