"""The choice rule of every built-in policy, on hand-set engine views."""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np
import pytest

from loadgen import Request
from policies import (
    ChoicePolicy,
    KVAware,
    LeastLoaded,
    Random,
    RoundRobin,
    SessionAffinity,
    conversation_key,
    from_choice,
)

from .support import req


@attrs.define
class View:
    index: int
    outstanding_prefill_tokens: int = 0
    outstanding_decode_tokens: int = 0
    block_size: int = 64
    cached_tokens: int = 0  # what prefix_overlap_tokens answers for this engine

    @property
    def id(self) -> int:
        return self.index


@attrs.define
class Ctx:
    """The part of PolicyContext the built-ins read."""

    engines: tuple[View, ...]
    rng: np.random.Generator = attrs.field(factory=lambda: np.random.default_rng(7))

    def prefix_overlap_tokens(self, request: Request, engine: int) -> int:
        (view,) = (v for v in self.engines if v.id == engine)
        return view.cached_tokens


def ctx_of(*views: Sequence[int], seed: int = 7) -> Ctx:
    """Views from ``(prefill, decode[, cached])`` tuples, by index."""
    return Ctx(
        tuple(View(i, v[0], v[1], 64, v[2] if len(v) > 2 else 0) for i, v in enumerate(views)),
        np.random.default_rng(seed),
    )


def choices(policy: ChoicePolicy, ctx: Ctx, requests: Sequence[Request]) -> list[int]:
    return [policy.choose(r, ctx) for r in requests]  # type: ignore[arg-type]


def test_round_robin_cycles_through_engines_in_release_order() -> None:
    ctx = ctx_of((0, 0), (0, 0), (0, 0))
    assert choices(RoundRobin(), ctx, [req(f"r{i}") for i in range(7)]) == [0, 1, 2, 0, 1, 2, 0]


def test_random_draws_integers_from_the_policy_generator() -> None:
    ctx = ctx_of((0, 0), (0, 0), (0, 0), seed=11)
    got = choices(Random(), ctx, [req(f"r{i}") for i in range(20)])
    expected = [int(x) for x in np.random.default_rng(11).integers(3, size=20)]
    assert got == expected


def test_random_depends_on_the_seed() -> None:
    rs = [req(f"r{i}") for i in range(20)]
    assert choices(Random(), ctx_of((0, 0), (0, 0), seed=1), rs) != choices(
        Random(), ctx_of((0, 0), (0, 0), seed=2), rs
    )


def test_least_loaded_picks_fewest_outstanding_prefill_plus_decode_tokens() -> None:
    ctx = ctx_of((100, 50), (10, 100), (60, 60), (0, 130))
    assert LeastLoaded().choose(req("a"), ctx) == 1  # type: ignore[arg-type]


def test_least_loaded_breaks_ties_by_lowest_index() -> None:
    ctx = ctx_of((5, 5), (0, 10), (10, 0), (20, 20))
    assert LeastLoaded().choose(req("a"), ctx) == 0  # type: ignore[arg-type]


def test_kv_aware_cost_is_weighted_prefill_after_overlap_plus_decode_load() -> None:
    # P = 1000; engine 0: 960 cached, queue 100 prefill / 40 decode; engine 1: nothing cached.
    ctx = ctx_of((100, 40, 960), (0, 0, 0))
    policy = KVAware(prefill_weight=2.0)
    assert policy.costs(req("a", prompt=1000), ctx) == [2.0 * (100 + 40) + 40, 2.0 * 1000]  # type: ignore[arg-type]
    assert policy.choose(req("a", prompt=1000), ctx) == 0  # type: ignore[arg-type]


def test_kv_aware_prefers_load_when_overlap_is_small() -> None:
    ctx = ctx_of((5000, 300, 64), (0, 0, 0))
    assert KVAware().choose(req("a", prompt=1000), ctx) == 1  # type: ignore[arg-type]


def test_kv_aware_breaks_ties_by_lowest_index() -> None:
    ctx = ctx_of((10, 0, 0), (0, 10, 0), (10, 0, 0))
    assert KVAware().choose(req("a", prompt=100), ctx) == 0  # type: ignore[arg-type]


def test_kv_aware_with_temperature_draws_the_softmax_of_normalised_costs() -> None:
    ctx = ctx_of((0, 0, 0), (0, 50, 0), (0, 100, 0), seed=3)
    policy = KVAware(temperature=0.5)
    got = choices(policy, ctx, [req(f"r{i}", prompt=100) for i in range(30)])
    costs = np.array([100.0, 150.0, 200.0])
    weights = np.exp(-(costs - 100.0) / (0.5 * 100.0))
    rng = np.random.default_rng(3)
    expected = [int(rng.choice(3, p=weights / weights.sum())) for _ in range(30)]
    assert got == expected
    assert len(set(got)) > 1


def test_kv_aware_with_temperature_and_equal_costs_draws_uniformly() -> None:
    ctx = ctx_of((0, 0, 0), (0, 0, 0), seed=5)
    got = choices(KVAware(temperature=1.0), ctx, [req(f"r{i}") for i in range(10)])
    assert got == [int(x) for x in np.random.default_rng(5).integers(2, size=10)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefill_weight": -1.0}, "prefill_weight must be finite and >= 0, got -1.0"),
        ({"prefill_weight": math.nan}, "prefill_weight must be finite and >= 0, got nan"),
        ({"temperature": -0.5}, "temperature must be finite and >= 0, got -0.5"),
        ({"temperature": math.inf}, "temperature must be finite and >= 0, got inf"),
    ],
)
def test_kv_aware_rejects_bad_options(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError) as info:
        KVAware(**options)
    assert str(info.value) == message


def test_conversation_key_prefers_the_lineage_root() -> None:
    assert conversation_key(req("a", conversation="c1", root="r0")) == "r0"
    assert conversation_key(req("a", conversation="c1")) == "c1"
    assert conversation_key(req("a")) is None


def test_session_affinity_uses_the_fallback_for_a_new_key_and_remembers_it() -> None:
    ctx = ctx_of((50, 0), (0, 0))
    policy = SessionAffinity(fallback=RoundRobin())
    assert policy.choose(req("a", conversation="c"), ctx) == 0  # type: ignore[arg-type]
    policy._engine_of["c"] = 1
    assert policy.choose(req("b", conversation="c"), ctx) == 1  # type: ignore[arg-type]
    # no key: the fallback (round robin, now at its second turn)
    assert policy.choose(req("x"), ctx) == 1  # type: ignore[arg-type]


def test_session_affinity_defaults_to_least_loaded_fallback() -> None:
    ctx = ctx_of((50, 0), (0, 0))
    assert isinstance(SessionAffinity().fallback, LeastLoaded)
    assert SessionAffinity().choose(req("a", conversation="new"), ctx) == 1  # type: ignore[arg-type]


def test_from_choice_calls_the_function_with_the_request_and_views() -> None:
    seen: list[tuple[str, int]] = []

    def last_engine(request: Request, views: Sequence[object]) -> int:
        seen.append((request.id, len(views)))
        return len(views) - 1

    policy = from_choice(last_engine)
    assert policy.name == "last_engine"
    assert policy.choose(req("a"), ctx_of((0, 0), (0, 0), (0, 0))) == 2  # type: ignore[arg-type]
    assert seen == [("a", 3)]
    assert from_choice(last_engine, name="mine").name == "mine"


def test_builtins_have_their_reference_names() -> None:
    names = [p.name for p in (RoundRobin(), Random(), LeastLoaded(), KVAware(), SessionAffinity())]
    assert names == ["round_robin", "random", "least_loaded", "kv_aware", "session_affinity"]
