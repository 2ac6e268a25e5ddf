"""The P/D policy: one policy per pool, the per-pool built-ins, kv_aware, user overrides."""

from __future__ import annotations

import pytest

from policies import (
    PD_POLICIES,
    KVAware,
    LeastLoaded,
    PDPolicy,
    PDPolicyError,
    Random,
    RoundRobin,
    SessionAffinity,
    from_choice,
    pd_kv_aware,
    pd_policy,
)

from ..replay.pd_helpers import example_d, replay, request


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("round_robin", RoundRobin),
        ("random", Random),
        ("least_loaded", LeastLoaded),
        ("session_affinity", SessionAffinity),
    ],
)
def test_builtins_apply_the_aggregated_policy_to_each_pool(name: str, kind: type) -> None:
    policy = pd_policy(name)
    assert isinstance(policy.prefill, kind) and isinstance(policy.decode, kind)
    assert policy.prefill is not policy.decode
    assert policy.name == name


def test_kv_aware_scores_prefill_by_prefix_overlap_and_decode_by_load() -> None:
    policy = pd_policy("kv_aware")
    assert isinstance(policy.prefill, KVAware) and isinstance(policy.decode, LeastLoaded)
    assert policy.name == "kv_aware"
    assert list(PD_POLICIES) == [
        "round_robin",
        "random",
        "least_loaded",
        "session_affinity",
        "kv_aware",
    ]


def test_unknown_builtin_is_refused_with_the_known_names() -> None:
    with pytest.raises(PDPolicyError) as info:
        pd_policy("fastest")
    assert str(info.value) == (
        "unknown P/D policy 'fastest'; known: round_robin, random, least_loaded, "
        "session_affinity, kv_aware"
    )
    assert isinstance(info.value, ValueError)


def test_one_object_for_both_pools_is_refused() -> None:
    shared = RoundRobin()
    with pytest.raises(PDPolicyError) as info:
        PDPolicy(prefill=shared, decode=shared)
    assert str(info.value) == (
        "PDPolicy: prefill and decode must be distinct policy objects (policies keep state); "
        "build one per pool"
    )


def test_default_name_names_both_sides() -> None:
    assert PDPolicy().name == "pd(round_robin,round_robin)"
    assert PDPolicy(decode=LeastLoaded()).name == "pd(round_robin,least_loaded)"
    assert PDPolicy(name="mine").name == "mine"


@pytest.mark.parametrize("order", ["source_first", "destination_first"])
def test_kv_aware_sends_a_shared_prefix_to_the_prefill_engine_that_has_it(order: str) -> None:
    topology = example_d(prefill_workers=2, decode_workers=2, order=order)
    requests = [
        request("a", p=1000, n=3, ids=[1, 2]),
        request("b", p=1000, n=3, ids=[3, 4]),
        request("c", at_ms=200, p=1000, n=3, ids=[3, 4]),  # b's prefix
    ]
    result = replay(requests, topology, pd_kv_aware())
    prefill = {r.request_id: r.handoff.prefill_worker for r in result.requests if r.handoff}
    assert prefill["a"] != prefill["b"]  # b avoids the engine a is queued on
    assert prefill["c"] == prefill["b"]  # c follows its prefix
    assert result.requests[2].reused_input_tokens == 960


def test_round_robin_per_pool_alternates_each_pool_independently() -> None:
    topology = example_d(prefill_workers=2, decode_workers=3)
    requests = [request(f"r{i}", at_ms=100.0 * i, p=200, n=2, ids=[i]) for i in range(4)]
    result = replay(requests, topology, PDPolicy())
    pairs = [
        (r.handoff.prefill_worker, r.handoff.decode_worker) for r in result.requests if r.handoff
    ]
    assert pairs == [(0, 2), (1, 3), (0, 4), (1, 2)]


@pytest.mark.parametrize("order", ["source_first", "destination_first"])
def test_a_user_choice_can_override_the_decode_side_only(order: str) -> None:
    topology = example_d(prefill_workers=2, decode_workers=2, order=order)
    last = from_choice(lambda r, views: views[-1].id, name="last")
    requests = [request(f"r{i}", at_ms=100.0 * i, p=200, n=2, ids=[i]) for i in range(3)]
    result = replay(requests, topology, PDPolicy(decode=last))
    pairs = [
        (r.handoff.prefill_worker, r.handoff.decode_worker) for r in result.requests if r.handoff
    ]
    assert pairs == [(0, 3), (1, 3), (0, 3)]


def test_decode_views_are_the_decode_pool_only() -> None:
    seen: list[tuple[int, ...]] = []

    def record(r: object, views: object) -> int:
        seen.append(tuple(v.id for v in views))  # type: ignore[attr-defined]
        return views[0].id  # type: ignore[index,no-any-return]

    topology = example_d(prefill_workers=2, decode_workers=3)
    replay([request("a", p=200, n=2, ids=[1])], topology, PDPolicy(decode=from_choice(record)))
    assert seen == [(2, 3, 4)]  # the decode engines, by their stable ids


def test_builtin_options_reach_both_pools() -> None:
    policy = pd_policy("session_affinity", fallback="kv_aware")
    assert isinstance(policy.prefill, SessionAffinity) and isinstance(
        policy.decode, SessionAffinity
    )
    assert isinstance(policy.prefill.fallback, KVAware)
    assert policy.prefill.fallback is not policy.decode.fallback
    warm = pd_policy("kv_aware", temperature=0.5)
    assert isinstance(warm.prefill, KVAware) and warm.prefill.temperature == 0.5
    with pytest.raises(PDPolicyError) as info:
        pd_policy("session_affinity", fallback="sticky")
    assert str(info.value) == (
        "fallback: unknown policy 'sticky'; known: round_robin, random, least_loaded, kv_aware"
    )


def test_a_pd_policy_on_an_aggregated_topology_fails_the_run_with_a_clear_error() -> None:
    from replay import Aggregated, ReplayFailedError

    with pytest.raises(ReplayFailedError) as info:
        replay([request("a", p=200, n=2, ids=[1])], Aggregated(workers=1), PDPolicy())
    assert str(info.value.__cause__) == (
        "PDPolicy 'pd(round_robin,round_robin)' needs a disaggregated topology "
        "(replay.Disaggregated); it cannot place requests on an aggregated one"
    )
    assert info.value.result.requests[0].status == "never_issued"
