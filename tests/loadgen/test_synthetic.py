"""Synthetic workloads (REFERENCE-workloads §3)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import loadgen
from loadgen import (
    ContentInterner,
    Dep,
    Fixed,
    Identity,
    SyntheticSpec,
    WorkloadConfigError,
    as_hash_ids,
    generate_synthetic,
    parse_synthetic,
)

from .conftest import MOONCAKE


def test_poisson_gaps_come_from_the_arrivals_stream() -> None:
    spec = SyntheticSpec(count=4, arrivals=loadgen.Poisson(rate=5.0))
    workload = loadgen.generate_synthetic(spec, seed=7)
    rng = np.random.default_rng(np.random.SeedSequence(7).spawn(4)[0])
    expected = np.concatenate(([0.0], np.cumsum([rng.exponential(200.0) for _ in range(3)])))
    got = [r.arrival.not_before_ms for r in workload.requests]
    assert got == pytest.approx(expected.tolist(), abs=1e-6)
    assert [r.id for r in workload.requests] == ["syn:0", "syn:1", "syn:2", "syn:3"]


def test_gamma_parameters_match_the_azure_example() -> None:
    gamma = loadgen.Gamma(rate=5.53, cv=1.094)
    assert round(gamma.shape, 4) == 0.8355
    assert round(gamma.scale_ms, 2) == 216.43


def test_lognormal_parameters_match_the_mooncake_example() -> None:
    dist = loadgen.Lognormal(mean=12035, median=6909)
    assert (round(dist.mu, 4), round(dist.sigma, 4)) == (8.8406, 1.0536)


def test_constant_arrivals_and_fixed_lengths() -> None:
    spec = SyntheticSpec(
        count=3, arrivals=loadgen.Constant(rate=4.0), input=Fixed(130), output=Fixed(7)
    )
    workload = loadgen.generate_synthetic(spec, seed=0)
    assert [r.arrival.not_before_ms for r in workload.requests] == [0.0, 250.0, 500.0]
    assert {(r.input_length, r.output_length) for r in workload.requests} == {(130, 7)}
    assert [r.hash_ids.size for r in workload.requests] == [3, 3, 3]
    assert len({int(i) for r in workload.requests for i in r.hash_ids}) == 9


def test_uniform_is_inclusive_and_clamps_apply() -> None:
    spec = SyntheticSpec(
        count=200,
        arrivals=loadgen.Constant(rate=1.0),
        input=loadgen.Uniform(1, 3),
        output=loadgen.Uniform(0, 9),
        output_max=5,
    )
    workload = loadgen.generate_synthetic(spec, seed=3)
    assert {r.input_length for r in workload.requests} == {1, 2, 3}
    assert max(r.output_length for r in workload.requests) == 5


def test_shared_prefix_groups_share_leading_blocks() -> None:
    spec = SyntheticSpec(
        count=20,
        arrivals=loadgen.Constant(rate=1.0),
        input=Fixed(640),
        prefix_groups=2,
        shared_prefix_ratio=0.35,
    )
    workload = loadgen.generate_synthetic(spec, seed=11)
    # 640 tokens = 10 blocks; floor(0.35 * 10 + 0.5) = 4 shared blocks.
    heads = {tuple(r.hash_ids[:4].tolist()) for r in workload.requests}
    assert len(heads) == 2
    tails = [int(r.hash_ids[4]) for r in workload.requests]
    assert len(set(tails)) == 20


def test_a_partial_last_block_is_never_shared() -> None:
    spec = SyntheticSpec(
        count=5,
        arrivals=loadgen.Constant(rate=1.0),
        input=Fixed(100),
        prefix_groups=1,
        shared_prefix_ratio=1.0,
    )
    workload = loadgen.generate_synthetic(spec, seed=0)
    assert {int(r.hash_ids[0]) for r in workload.requests} == {0}
    assert len({int(r.hash_ids[1]) for r in workload.requests}) == 5


def test_sessions_grow_context_and_wait_for_think_time() -> None:
    spec = SyntheticSpec(
        count=2,
        arrivals=loadgen.Constant(rate=1.0),
        input=Fixed(128),
        output=Fixed(30),
        turns=Fixed(3),
        new_input=Fixed(64),
        think_ms=Fixed(500),
    )
    workload = loadgen.generate_synthetic(spec, seed=0)
    ids = [r.id for r in workload.requests]
    assert ids[:3] == ["syn:s0/0", "syn:s0/1", "syn:s0/2"]
    first, second, third = workload.requests[:3]
    assert [r.input_length for r in (first, second, third)] == [128, 222, 316]
    assert second.arrival.after == (Dep("syn:s0/0", "completion", 500.0),)
    assert second.identity.conversation_id == "syn:s0"
    assert second.identity.turn_index == 1
    # Turn k reuses every full block of turn k-1's prompt.
    assert second.hash_ids[:2].tolist() == first.hash_ids.tolist()
    assert third.hash_ids[: 222 // 64].tolist() == second.hash_ids[: 222 // 64].tolist()


def test_more_sessions_never_change_earlier_ones() -> None:
    table = {
        "arrivals": "gamma(5.53, 1.094)",
        "input": "lognormal(12035, 6909)",
        "output": "uniform(1, 500)",
        "turns": "uniform(1, 4)",
        "think_ms": "exponential(2000)",
        "prefix_groups": 3,
        "shared_prefix_ratio": 0.5,
    }
    small = loadgen.generate_synthetic(SyntheticSpec.from_dict({**table, "count": 5}), seed=9)
    large = loadgen.generate_synthetic(SyntheticSpec.from_dict({**table, "count": 9}), seed=9)
    assert large.requests[: len(small.requests)] == small.requests


def test_same_seed_same_workload_other_seed_differs() -> None:
    spec = loadgen.parse_synthetic("count=50 arrivals=poisson(5) input=lognormal(12035,6909)")
    a = loadgen.generate_synthetic(spec, seed=1)
    assert a == loadgen.generate_synthetic(spec, seed=1)
    assert a != loadgen.generate_synthetic(spec, seed=2)


def test_empirical_lengths_resample_trace_pairs() -> None:
    spec = SyntheticSpec.from_dict(
        {"count": 30, "arrivals": "poisson(3)", "lengths": {"trace": str(MOONCAKE)}}
    )
    assert spec.lengths is not None
    pairs = set(zip(spec.lengths.inputs, spec.lengths.outputs, strict=True))
    workload = loadgen.generate_synthetic(spec, seed=0)
    assert all((r.input_length, r.output_length) in pairs for r in workload.requests)


def test_cli_form_parses_distributions_and_numbers() -> None:
    spec = loadgen.parse_synthetic(
        "count=10; arrivals=gamma(5.53, 1.094) input=lognormal(12035,6909) output=300"
    )
    assert spec.arrivals == loadgen.Gamma(5.53, 1.094)
    assert spec.input == loadgen.Lognormal(12035, 6909)
    assert spec.output == Fixed(300)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"arrivals": "poisson(1)"}, "count: required"),
        ({"count": 1}, "arrivals: required"),
        ({"count": 0, "arrivals": "poisson(1)"}, "count: must be an integer >= 1, got 0"),
        (
            {"count": 1, "arrivals": "weibull(1)"},
            "arrivals: unknown arrival process 'weibull' (known: poisson, gamma, constant)",
        ),
        ({"count": 1, "arrivals": "poisson(0)"}, "arrivals: rate must be > 0, got 0"),
        (
            {"count": 1, "arrivals": "gamma(1)"},
            "arrivals: gamma takes 2 argument(s) (rate, cv), got 1",
        ),
        (
            {"count": 1, "arrivals": "poisson(1)", "input": "lognormal(5, 10)"},
            "input: mean must be >= median, got 5.0 and 10.0",
        ),
        (
            {"count": 1, "arrivals": "poisson(1)", "turns": "uniform(0, 2)"},
            "turns: low must be >= 1, got 0",
        ),
        (
            {"count": 1, "arrivals": "poisson(1)", "shared_prefix_ratio": 2},
            "shared_prefix_ratio: must be a number in [0, 1], got 2",
        ),
        (
            {"count": 1, "arrivals": "poisson(1)", "colour": "red"},
            "colour: unknown synthetic option",
        ),
        (
            {"count": 1, "arrivals": "poisson(1)", "lengths": "/no/such.jsonl"},
            "lengths: no such trace '/no/such.jsonl'",
        ),
        (
            {"count": 1, "arrivals": "poisson(1)", "input": "exponential(5)"},
            "input: unknown distribution 'exponential' (known: fixed, uniform, lognormal)",
        ),
    ],
)
def test_spec_errors_are_exact(table: dict[str, object], message: str) -> None:
    with pytest.raises(WorkloadConfigError) as info:
        SyntheticSpec.from_dict(table)
    assert str(info.value) == message


def test_empirical_trace_path_is_relative_to_base(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "output_length": 3, "hash_ids": [1]}\n', encoding="utf-8")
    spec = SyntheticSpec.from_dict(
        {"count": 1, "arrivals": "poisson(1)", "lengths": "t.jsonl"}, base=tmp_path
    )
    assert spec.lengths == loadgen.EmpiricalLengths((512,), (3,))
    assert math.isclose(
        loadgen.workload_stats(loadgen.generate_synthetic(spec, seed=0)).input.p50, 512
    )


def test_open_loop_requests_share_one_identity_and_view_one_array_of_content_ids() -> None:
    workload = generate_synthetic(
        parse_synthetic("count=50 arrivals=poisson(10) input=64 output=4"), seed=3
    )
    identities = {id(r.identity) for r in workload.requests}
    assert len(identities) == 1
    assert workload.requests[0].identity == Identity()
    # every request's ids are a read-only view of one array holding the workload's ids (no
    # allocation of its own), and only its own ids
    base = workload.requests[0].hash_ids.base
    assert all(r.hash_ids.base is base for r in workload.requests)
    assert base is not None and base.size == sum(r.hash_ids.size for r in workload.requests)
    for request in workload.requests:
        assert not request.hash_ids.flags.writeable
        assert request.hash_ids.flags.c_contiguous
        assert request.hash_ids.size == 1


def test_as_hash_ids_copies_into_one_array_and_still_flattens() -> None:
    flat = as_hash_ids([1, 2, 3])
    assert flat.base is None and flat.tolist() == [1, 2, 3]
    nested = as_hash_ids([[1, 2], [3, 4]])
    assert nested.ndim == 1 and nested.tolist() == [1, 2, 3, 4]
    assert not nested.flags.writeable


@pytest.mark.parametrize(
    "text",
    [
        "count=40 arrivals=poisson(10) input=uniform(1,300) output=4",
        "count=30 arrivals=poisson(5) input=lognormal(600,300) output=9 prefix_groups=3 "
        "shared_prefix_ratio=0.5 block_size=32",
        "count=12 arrivals=poisson(2) input=200 output=20 turns=uniform(1,4) "
        "think_ms=exponential(500) new_input=100 block_size=16",
    ],
)
def test_a_workload_names_fresh_blocks_as_an_interner_given_to_it_would(text: str) -> None:
    # with no interner given, fresh blocks take private ids: the ids interning their raw ids
    # ("u", request id, j) in a fresh interner would give
    spec = parse_synthetic(text)
    own = generate_synthetic(spec, seed=11)
    given = ContentInterner()
    shared = generate_synthetic(spec, seed=11, interner=given)
    assert own == shared
    fresh_blocks = sum(-(-r.input_length // spec.block_size) for r in own.requests)
    assert given.scope_size("syn") >= min(fresh_blocks, len(own))  # the raw ids were interned
