"""Macro-stepping is indistinguishable from one deadline per pass.

Every scenario is replayed twice, with ``stepping="pass"`` (the oracle) and
``stepping="macro"``; ``requests.jsonl``, ``summary.json`` and ``config.json`` must be equal
byte for byte, and so must every lifecycle event a subscriber sees (all kinds but the
per-token and per-chunk ones, which make engines step pass by pass), in order, and what a
policy reads from the engine views at every instant it looks. Scenarios are drawn at random:
timing models, KV pressure (preemption, rejection), chunked prefill on and off, watermark,
the tokenizer stage, every built-in policy and a policy that reads views and sleeps to
pass-boundary instants, closed-loop sessions, P/D in both placement orders.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import (
    EngineConfig,
    EventKind,
    FixedTiming,
    LifecycleEvent,
    LinearTiming,
    PassShape,
    PolynomialTiming,
    TokenizerStage,
    VLLMScheduler,
)
from loadgen import LoadMode, Request, Workload
from policies import (
    KVAware,
    LeastLoaded,
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
    ReplayResult,
    ReplaySession,
    write_outputs,
)

from ..policies.support import req, workload

MS = 1_000_000
QUIET = [k for k in EventKind if k not in (EventKind.TOKEN, EventKind.PREFILL_CHUNK)]


class OwnTiming:
    """A user model with ``pass_time_ms`` only (the per-pass default prices its runs)."""

    def pass_time_ms(self, shape: PassShape) -> float:
        return 3.0 + 0.01 * float(shape.scheduled.sum()) + 0.5 * float(shape.samples.sum())


class Watcher:
    """Places round robin after reading every view; a side task sleeps to instants that
    fall on pass boundaries (multiples of 10 ms) and records what the views say there."""

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []
        self._next = 0

    def _look(self, ctx: PolicyContext, tag: str) -> None:
        for v in ctx.engines:
            self.seen.append(
                (
                    tag,
                    ctx.now_ns(),
                    v.index,
                    v.waiting_count,
                    v.running_count,
                    v.outstanding_prefill_tokens,
                    v.outstanding_decode_tokens,
                    v.kv_blocks_free,
                    v.kv_blocks_used,
                )
            )

    async def _sampler(self, ctx: PolicyContext) -> None:
        for k in range(1, 60):
            await ctx.sleep_until_ns((10 * k + (0 if k % 3 else 5)) * MS)
            self._look(ctx, "sample")

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        ctx.spawn(self._sampler(ctx), name="sampler")
        async for request in requests:
            self._look(ctx, "arrival")
            engine = self._next % len(ctx.engines)
            self._next += 1
            await ctx.dispatch(request, engine)


def _outputs(result: ReplayResult) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        return {
            name: (Path(out) / name).read_bytes()
            for name in ("requests.jsonl", "summary.json", "config.json")
        }


def _replay(
    wl: Workload, stepping: str, make_policy: Any, **options: Any
) -> tuple[dict[str, bytes], list[LifecycleEvent], list[tuple[object, ...]]]:
    policy = make_policy()
    session = ReplaySession.build(wl, policy=policy, history=False, stepping=stepping, **options)
    events: list[LifecycleEvent] = []
    session.journal.subscribe(events.append, kinds=QUIET)
    try:
        result = session.run()
    except ReplayFailedError as failure:  # a failing run must fail the same way
        result = failure.result
    seen = getattr(policy, "seen", [])
    return _outputs(result), events, seen


def assert_same(wl: Workload, make_policy: Any, **options: Any) -> None:
    oracle = _replay(wl, "pass", make_policy, **options)
    macro = _replay(wl, "macro", make_policy, **options)
    assert macro[0]["requests.jsonl"] == oracle[0]["requests.jsonl"]
    assert macro[0]["summary.json"] == oracle[0]["summary.json"]
    assert macro[0]["config.json"] == oracle[0]["config.json"]
    assert macro[1] == oracle[1]
    assert macro[2] == oracle[2]


def assert_same_scenario(scenario: dict[str, Any], **options: Any) -> None:
    """:func:`assert_same` on a drawn :func:`scenarios` case, with more run ``options``."""
    topology = Aggregated(
        workers=scenario["workers"],
        engine=scenario["config"],
        timing=TIMINGS[scenario["timing"]](),
    )
    tokenizer = (
        TokenizerStage(workers=1, base_ms=2.0, per_input_token_us=3.0)
        if scenario["tokenizer"]
        else None
    )
    assert_same(
        workload(scenario["requests"]),
        POLICIES[scenario["policy"]],
        topology=topology,
        seed=scenario["seed"],
        tokenizer=tokenizer,
        **options,
    )


def pd_requests(seed: int, *, max_output: int = 150, max_at_ms: int = 300) -> list[Request]:
    """Twelve seeded requests for the prefill/decode cases, every other one sharing a
    prefix of content ids."""
    rng = np.random.default_rng(seed)
    return [
        req(
            f"r{i}",
            prompt=int(rng.integers(50, 900)),
            output=int(rng.integers(1, max_output)),
            at_ms=float(rng.integers(0, max_at_ms)),
            ids=list(range(7, 22)) if i % 2 else None,
        )
        for i in range(12)
    ]


def pd_topology(
    order: str, *, prefill_workers: int = 1, one_reservation: bool = False
) -> Disaggregated:
    """The prefill/decode topology of those cases (two decode engines, 300 blocks each)."""
    return Disaggregated(
        prefill_workers=prefill_workers,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=300, block_size=64),
        decode_engine=EngineConfig(
            num_blocks=300, block_size=64, reserve_one_per_pass=one_reservation
        ),
        prefill_timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
        decode_timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
        link=KVLink(kv_bytes_per_token=262144.0, bandwidth_gbps=50.0),
        order=order,
    )


TIMINGS = [
    lambda: FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    lambda: FixedTiming(prefill_ms=20.0, decode_ms=10.0),
    lambda: PolynomialTiming(),
    lambda: LinearTiming(c0=4.0, c_p=0.02, c_d=0.3, c_kv=0.0001),
    OwnTiming,
]
POLICIES = [RoundRobin, KVAware, LeastLoaded, Random, SessionAffinity, Watcher]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 14))
    requests: list[Request] = []
    for i in range(count):
        prompt = draw(st.integers(1, 900))
        family = draw(st.integers(0, 2))
        ids = [100 * family + k for k in range(-(-prompt // 64))]
        requests.append(
            req(
                f"r{i}",
                prompt=prompt,
                output=draw(st.integers(0, 120)),
                at_ms=float(draw(st.integers(0, 400))),
                ids=ids if draw(st.booleans()) else None,
                conversation=f"c{family}",
            )
        )
    config = EngineConfig(
        num_blocks=draw(st.sampled_from([12, 24, 60, 400])),
        block_size=64,
        max_num_batched_tokens=draw(st.sampled_from([128, 512, 2048])),
        max_num_seqs=draw(st.sampled_from([2, 4, 256])),
        enable_chunked_prefill=draw(st.booleans()),
        enable_prefix_caching=draw(st.booleans()),
        watermark_fraction=draw(st.sampled_from([0.0, 0.0, 0.1])),
        scheduler=VLLMScheduler(
            admit_whole_prompt=draw(st.booleans()), evict_empty_first=draw(st.booleans())
        ),
    )
    return {
        "requests": requests,
        "config": config,
        "workers": draw(st.integers(1, 3)),
        "timing": draw(st.integers(0, len(TIMINGS) - 1)),
        "policy": draw(st.integers(0, len(POLICIES) - 1)),
        "seed": draw(st.integers(0, 3)),
        "tokenizer": draw(st.booleans()),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_macro_stepping_matches_per_pass_steps(scenario: dict[str, Any]) -> None:
    assert_same_scenario(scenario)


def test_long_decodes_jump_and_views_agree_at_every_sampled_instant() -> None:
    # long outputs on roomy engines: the runs are long, the sampler lands inside them
    requests = [
        req(f"r{i}", prompt=300 + 37 * i, output=200 + 13 * i, at_ms=7.0 * i) for i in range(8)
    ]
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=2000, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    assert_same(workload(requests), Watcher, topology=topology)
    # and the macro run really jumped: far fewer loop events than passes
    session = ReplaySession.build(
        workload(requests), topology=topology, policy=RoundRobin(), history=False
    )
    result = session.run()
    passes = sum(e.passes for e in result.meta.engines)
    assert result.meta.events_processed * 2 < passes


@pytest.mark.parametrize("one_reservation", [False, True])
@pytest.mark.parametrize("policy", ["round_robin", "kv_aware"])
@pytest.mark.parametrize("order", ["source_first", "destination_first"])
def test_pd_topologies_match_in_both_orders(order: str, policy: str, one_reservation: bool) -> None:
    requests = pd_requests(5)
    for r in requests:
        assert len(r.hash_ids) * r.block_size >= r.input_length
    topology = pd_topology(order, one_reservation=one_reservation)
    assert_same(workload(requests), lambda: pd_policy(policy), topology=topology)


def test_closed_loop_sessions_match() -> None:
    requests = [
        req(
            f"s{c}t{t}",
            prompt=200 + 50 * t,
            output=30 + 7 * c,
            conversation=f"c{c}",
            after=(f"s{c}t{t - 1}",) if t else (),
            at_ms=0.0,
        )
        for c in range(3)
        for t in range(3)
    ]
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=500, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    assert_same(
        workload(requests), SessionAffinity, topology=topology, load=LoadMode(concurrency=2)
    )


def test_a_stop_inside_a_run_sees_the_same_state() -> None:
    requests = [req(f"r{i}", prompt=200, output=300, at_ms=0.0) for i in range(4)]
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=500, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    states = {}
    for stepping in ("pass", "macro"):
        session = ReplaySession.build(
            workload(requests),
            topology=topology,
            policy=RoundRobin(),
            history=False,
            stepping=stepping,
        )
        seen = []
        for t_ms in (55, 60, 61, 1234, 2000, 2005):
            session.run_until(time_ns=t_ms * MS)
            snap = session.engines[0].snapshot()
            trace = session.journal.traces.get("r0")
            session.journal.sync()
            seen.append(
                (
                    session.now_ns,
                    snap,
                    session.engines[0].passes,
                    session.engines[0].busy_ns,
                    None if trace is None else tuple(trace.token_times_ns),
                )
            )
        session.run()
        states[stepping] = seen
    assert states["macro"] == states["pass"]
    assert attrs.asdict(states["macro"][3][1])["in_pass"] is True


@st.composite
def chunk_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """Long prompts against a small budget: prompt chunks next to decode steps, with and
    without requests waiting behind them, and KV pressure."""
    count = draw(st.integers(1, 8))
    requests = [
        req(
            f"r{i}",
            prompt=draw(st.integers(1, 3000)),
            output=draw(st.integers(0, 80)),
            at_ms=float(draw(st.integers(0, 600))),
            ids=[100 * (i % 2) + k for k in range(60)] if draw(st.booleans()) else None,
            conversation=f"c{i % 2}",
        )
        for i in range(count)
    ]
    config = EngineConfig(
        num_blocks=draw(st.sampled_from([50, 120, 2000])),
        block_size=64,
        max_num_batched_tokens=draw(st.sampled_from([16, 64, 200, 512])),
        max_num_seqs=draw(st.sampled_from([2, 3, 256])),
        enable_chunked_prefill=True,
        enable_prefix_caching=draw(st.booleans()),
        watermark_fraction=draw(st.sampled_from([0.0, 0.1])),
    )
    return {
        "requests": requests,
        "config": config,
        "workers": draw(st.integers(1, 2)),
        "timing": draw(st.integers(0, len(TIMINGS) - 1)),
        "policy": draw(st.integers(0, len(POLICIES) - 1)),
    }


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_scenarios())
def test_runs_with_prompt_chunks_match_per_pass_steps(scenario: dict[str, Any]) -> None:
    topology = Aggregated(
        workers=scenario["workers"],
        engine=scenario["config"],
        timing=TIMINGS[scenario["timing"]](),
    )
    assert_same(workload(scenario["requests"]), POLICIES[scenario["policy"]], topology=topology)


@pytest.mark.parametrize("waiting", [False, True])
def test_a_long_prompt_is_chunked_in_one_run(waiting: bool) -> None:
    # one long prompt against a 64-token budget, decodes beside it, and (or not) requests
    # waiting behind it; the Watcher samples views inside the run
    requests = [req("d0", prompt=100, output=400, at_ms=0.0)]
    requests.append(req("long", prompt=6000, output=20, at_ms=30.0))
    if waiting:
        requests += [req(f"w{i}", prompt=300, output=5, at_ms=40.0 + i) for i in range(2)]
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=2000, block_size=64, max_num_batched_tokens=64),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=10.0),
    )
    assert_same(workload(requests), Watcher, topology=topology)
    session = ReplaySession.build(
        workload(requests), topology=topology, policy=RoundRobin(), history=False
    )
    result = session.run()
    passes = sum(e.passes for e in result.meta.engines)
    assert passes > 90  # 6,000 positions, at most 64 a pass
    assert result.meta.events_processed * 3 < passes


@pytest.mark.parametrize("policy", ["round_robin", "kv_aware"])
def test_prefill_engines_chunk_long_prompts_in_runs(policy: str) -> None:
    rng = np.random.default_rng(11)
    requests = [
        req(
            f"r{i}",
            prompt=int(rng.integers(200, 4000)),
            output=int(rng.integers(1, 40)),
            at_ms=float(rng.integers(0, 500)),
            ids=list(range(3, 70)) if i % 3 == 0 else None,
        )
        for i in range(10)
    ]
    topology = Disaggregated(
        prefill_workers=1,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=600, block_size=64, max_num_batched_tokens=128),
        decode_engine=EngineConfig(num_blocks=600, block_size=64),
        prefill_timing=LinearTiming(c0=4.0, c_p=0.02, c_d=0.3, c_kv=0.0001),
        decode_timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
        link=KVLink(kv_bytes_per_token=262144.0, bandwidth_gbps=50.0),
    )
    assert_same(workload(requests), lambda: pd_policy(policy), topology=topology)
