"""The engine's own prefix lookups vouch that their keys increase (``chain=True``): a lookup
then steps over a span from the last key it would cover (engines/_prefix_cache.py). Every
such lookup is checked here, in replays that chunk long prompts, preempt and recompute
requests with their output blocks, evict, take conversations' blocks back from the free
queue and run agentic plays, with macro-stepping and per-pass steps; the results are also
compared with replays whose lookups all compare slices (``chain`` ignored)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engines import EngineConfig, FixedTiming
from engines._prefix_cache import PrefixCache
from loadgen import LoadMode, Workload
from policies import KVAware, SessionAffinity
from replay import Aggregated, ReplayResult, run

from .mooncake_e2e import mooncake
from .test_macro_differential_more import weka_sample  # noqa: F401 (a fixture)

Lookup = Callable[..., list[int]]
_LOOKUP: Lookup = PrefixCache.lookup_prefix


def _checking(calls: list[int]) -> Lookup:
    def lookup(self: PrefixCache, keys: list[int], limit: int, *, chain: bool = False) -> list[int]:
        if chain:
            calls.append(len(keys))
            bad = [i for i in range(1, len(keys)) if keys[i] <= keys[i - 1]]
            assert not bad, f"keys of a chain lookup go down at {bad[:3]}"
        return _LOOKUP(self, keys, limit, chain=chain)

    return lookup


def _slices(self: PrefixCache, keys: list[int], limit: int, *, chain: bool = False) -> list[int]:
    return _LOOKUP(self, keys, limit)


def _replay(
    workload: Workload, blocks: int, policy: Callable[[], Any], **options: Any
) -> tuple[str, int]:
    """The replay's records and summary as text, and its preemptions."""
    result: ReplayResult = run(
        workload,
        topology=Aggregated(
            workers=2,
            engine=EngineConfig(num_blocks=blocks, block_size=64, max_num_batched_tokens=4096),
            timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        ),
        policy=policy(),
        seed=7,
        **options,
    )
    assert result.summary.completed > 0
    issued = [r for r in result.requests if r.status != "never_issued"]
    text = "\n".join(repr(r) for r in issued) + repr(result.summary)
    return text, result.summary.preemptions


@pytest.mark.parametrize("stepping", ["macro", "pass"])
def test_the_mooncake_head_under_kv_pressure_looks_up_increasing_keys(
    stepping: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 120 requests of the Mooncake trace at 8x on two engines of 1,200 blocks: long prompts
    # in chunks of 4,096 tokens, preemptions (recomputed with their output blocks' keys)
    load = LoadMode(speedup=8.0, max_requests=120)
    calls: list[int] = []
    with monkeypatch.context() as patch:
        patch.setattr(PrefixCache, "lookup_prefix", _checking(calls))
        checked, preemptions = _replay(mooncake(), 1200, KVAware, load=load, stepping=stepping)
    assert len(calls) >= 120
    assert preemptions > 0  # some requests were recomputed
    with monkeypatch.context() as patch:
        patch.setattr(PrefixCache, "lookup_prefix", _slices)
        again, _ = _replay(mooncake(), 1200, KVAware, load=load, stepping=stepping)
    assert again == checked


@pytest.mark.parametrize("stepping", ["macro", "pass"])
def test_claude_code_plays_look_up_increasing_keys(
    weka_sample: Workload,  # noqa: F811
    stepping: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # three plays with subagents, two lanes, on engines that evict: a conversation's next
    # turn takes its blocks back from the free queue
    load = LoadMode(lanes=2, speedup=20.0)
    calls: list[int] = []
    with monkeypatch.context() as patch:
        patch.setattr(PrefixCache, "lookup_prefix", _checking(calls))
        checked, _ = _replay(weka_sample, 4500, SessionAffinity, load=load, stepping=stepping)
    assert max(calls) > 1000  # whole conversations' prompts
    with monkeypatch.context() as patch:
        patch.setattr(PrefixCache, "lookup_prefix", _slices)
        again, _ = _replay(weka_sample, 4500, SessionAffinity, load=load, stepping=stepping)
    assert again == checked
