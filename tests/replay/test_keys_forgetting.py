"""A keyer that forgets the keys nobody holds gives the same replay as one that never forgets.

Every scenario is replayed twice: with a keyer that looks for keys to forget as soon as it
holds a handful (``forget_min=4``) and with one that never forgets. ``requests.jsonl``,
``summary.json`` and ``config.json`` must be equal byte for byte, and so must every lifecycle
event and what a policy reads from the views. KV events (a subscribing policy sees them) must
be the same up to the numbers of keys: one renaming, from the forgetting keyer's numbers to
the other's, maps every event onto the other run's. Scenarios share prompt prefixes (content
families, multi-turn sessions) on small KV pools, so keys are evicted, forgotten and their
prefixes come back. The keyer's memo and donors are kept short (three requests) so that
most keys are held by the engines alone.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engines._keys
import replay._runner
from engines import BlockKeyer, EngineConfig, EventKind, FixedTiming, KVEvent, LifecycleEvent
from loadgen import LoadMode, Request, Workload
from policies import KVAware, PolicyContext, RequestStream, RoundRobin, pd_policy
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

QUIET = [k for k in EventKind if k not in (EventKind.TOKEN, EventKind.PREFILL_CHUNK)]


class Subscriber:
    """Places by prefix overlap (as KVAware) and records every KV event it is told of."""

    def __init__(self) -> None:
        self.kv: list[KVEvent] = []
        self._aware = KVAware()

    def on_kv_event(self, event: KVEvent) -> None:
        self.kv.append(event)

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async for request in requests:
            await ctx.dispatch(request, self._aware.choose(request, ctx))


def _outputs(result: ReplayResult) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        return {
            name: (Path(out) / name).read_bytes()
            for name in ("requests.jsonl", "summary.json", "config.json")
        }


def _replay(
    monkeypatch: pytest.MonkeyPatch,
    wl: Workload,
    keyer: Any,
    make_policy: Any,
    **options: Any,
) -> tuple[dict[str, bytes], list[LifecycleEvent], list[KVEvent], BlockKeyer]:
    made: list[BlockKeyer] = []

    def build() -> BlockKeyer:
        made.append(keyer())
        return made[-1]

    policy = make_policy()
    with monkeypatch.context() as patch:
        patch.setattr(replay._runner, "BlockKeyer", build)
        # a short memory of requests and donors, so that they hold few keys
        patch.setattr(engines._keys, "MEMO_LIMIT", 3)
        patch.setattr(engines._keys, "DONOR_LIMIT", 3)
        session = ReplaySession.build(wl, policy=policy, history=False, **options)
        events: list[LifecycleEvent] = []
        session.journal.subscribe(events.append, kinds=QUIET)
        try:
            result = session.run()
        except ReplayFailedError as failure:  # a failing run must fail the same way
            result = failure.result
    (used,) = made
    return _outputs(result), events, getattr(policy, "kv", []), used


FORGETTING = functools.partial(BlockKeyer, forget_min=4)
KEEPING = functools.partial(BlockKeyer, forget=False)


def _renamed(forgetting: list[KVEvent], keeping: list[KVEvent]) -> bool:
    """Whether one renaming of the forgetting run's keys maps its events onto the other's."""
    assert len(forgetting) == len(keeping)
    rename: dict[int, int] = {}
    for a, b in zip(forgetting, keeping, strict=True):
        assert (a.time_ns, a.engine, a.kind) == (b.time_ns, b.engine, b.kind)
        assert len(a.block_keys) == len(b.block_keys)
        for x, y in zip(a.block_keys, b.block_keys, strict=True):
            assert rename.setdefault(x, y) == y
    return True


def assert_same(
    monkeypatch: pytest.MonkeyPatch, wl: Workload, make_policy: Any, **options: Any
) -> tuple[BlockKeyer, BlockKeyer]:
    forgot = _replay(monkeypatch, wl, FORGETTING, make_policy, **options)
    kept = _replay(monkeypatch, wl, KEEPING, make_policy, **options)
    assert forgot[0] == kept[0]
    assert forgot[1] == kept[1]
    assert _renamed(forgot[2], kept[2])
    assert kept[3].forgotten == 0
    return forgot[3], kept[3]


def _families(count: int, *, seed: int, turns: int = 1, gap_ms: float = 5000.0) -> list[Request]:
    """Requests whose prompts start with one of three families' content ids and go on with
    their own; with ``turns`` > 1, later turns of a request repeat its prompt and add to it."""
    out: list[Request] = []
    for i in range(count):
        family = (i * 7 + seed) % 3
        shared = 1 + (i + seed) % 4
        own = 1 + (i * 5 + seed) % 6
        at = float((i * 97 + seed * 13) % (400 * count))  # about one request per 400 ms
        ids = [1000 * family + k for k in range(shared)]
        ids += [100_000 + 100 * i + k for k in range(own)]
        for t in range(turns):
            ids = ids + [200_000 + 100 * i + 10 * t + k for k in range(2 * t)]
            out.append(
                req(
                    f"r{i}t{t}",
                    prompt=64 * len(ids) - (i % 3) * 17,
                    output=3 + (i * 11) % 40,
                    at_ms=at + gap_ms * t,
                    ids=ids,
                    conversation=f"c{family}",
                )
            )
    return out


def _aggregated(num_blocks: int, workers: int = 2) -> Aggregated:
    return Aggregated(
        workers=workers,
        engine=EngineConfig(
            num_blocks=num_blocks, block_size=64, max_num_batched_tokens=512, max_num_seqs=8
        ),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=10.0),
    )


@pytest.mark.parametrize("stepping", ["macro", "pass"])
@pytest.mark.parametrize("policy", [RoundRobin, KVAware, Subscriber])
def test_forgetting_changes_no_result_under_evictions_and_prefix_reuse(
    monkeypatch: pytest.MonkeyPatch, stepping: str, policy: Any
) -> None:
    wl = workload(_families(120, seed=1, turns=2))
    forgot, kept = assert_same(monkeypatch, wl, policy, topology=_aggregated(40), stepping=stepping)
    # keys were forgotten, and prefixes came back after that (interned again, new numbers)
    assert forgot.forgotten > 0
    assert len(forgot) > len(kept)
    assert forgot.held < kept.held


@pytest.mark.parametrize("order", ["source_first", "destination_first"])
def test_forgetting_changes_no_result_in_prefill_decode_topologies(
    monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    wl = workload(_families(100, seed=2, turns=2))
    topology = Disaggregated(
        prefill_workers=1,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=40, block_size=64, max_num_seqs=8),
        decode_engine=EngineConfig(num_blocks=60, block_size=64, max_num_seqs=8),
        prefill_timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
        decode_timing=FixedTiming(prefill_ms=30.0, decode_ms=10.0),
        link=KVLink(kv_bytes_per_token=262144.0, bandwidth_gbps=50.0),
        order=order,
    )
    forgot, _ = assert_same(monkeypatch, wl, lambda: pd_policy("kv_aware"), topology=topology)
    assert forgot.forgotten > 0


def test_forgetting_changes_no_result_in_closed_loop_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests = [
        req(
            f"s{c}t{t}",
            prompt=200 + 64 * t,
            output=5 + 3 * (c % 4),
            ids=[100 * c + k for k in range(-(-(200 + 64 * t) // 64))],
            conversation=f"c{c}",
            after=(f"s{c}t{t - 1}",) if t else (),
        )
        for c in range(40)
        for t in range(3)
    ]
    forgot, _ = assert_same(
        monkeypatch,
        workload(requests),
        KVAware,
        topology=_aggregated(24),
        load=LoadMode(concurrency=3),
    )
    assert forgot.forgotten > 0


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    count=st.integers(1, 30),
    seed=st.integers(0, 50),
    turns=st.integers(1, 3),
    num_blocks=st.sampled_from([12, 24, 60]),
    workers=st.integers(1, 3),
    policy=st.sampled_from([RoundRobin, KVAware, Subscriber]),
    stepping=st.sampled_from(["macro", "pass"]),
)
def test_forgetting_changes_no_result_on_drawn_scenarios(
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    seed: int,
    turns: int,
    num_blocks: int,
    workers: int,
    policy: Any,
    stepping: str,
) -> None:
    assert_same(
        monkeypatch,
        workload(_families(count, seed=seed, turns=turns)),
        policy,
        topology=_aggregated(num_blocks, workers),
        stepping=stepping,
    )


@pytest.mark.parametrize("stepping", ["macro", "pass"])
def test_forgetting_changes_no_result_with_several_blocks_per_content_id(
    monkeypatch: pytest.MonkeyPatch, stepping: str
) -> None:
    # trace blocks of 256 tokens on engine blocks of 64: a content id's four blocks are
    # interned at once and held as one span, which is forgotten or kept whole
    requests = [
        attrs.evolve(
            r,
            input_length=4 * r.input_length,
            hash_ids=r.hash_ids,
            block_size=256,
        )
        for r in _families(120, seed=3, turns=2)
    ]
    forgot, kept = assert_same(
        monkeypatch, workload(requests), KVAware, topology=_aggregated(160), stepping=stepping
    )
    assert forgot.forgotten > 0
    assert forgot.held < kept.held
