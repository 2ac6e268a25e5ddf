"""A lazy synthetic workload (its requests kept as columns) is the eager one, read any way."""

from __future__ import annotations

import pickle

import pytest

import loadgen
from loadgen import LoadMode, generate_synthetic, parse_synthetic
from loadgen._synthetic_table import SyntheticRequests

from .fake_engine import FakeRun

SPECS = [
    "count=60 arrivals=poisson(10) input=uniform(1,300) output=4",
    "count=40 arrivals=poisson(5) input=lognormal(600,300) output=9 prefix_groups=3 "
    "shared_prefix_ratio=0.5 block_size=32",
    "count=15 arrivals=poisson(2) input=200 output=20 turns=uniform(1,4) "
    "think_ms=exponential(500) new_input=100 block_size=16",
]


@pytest.fixture(params=SPECS, ids=["open", "groups", "sessions"])
def pair(request: pytest.FixtureRequest) -> tuple[loadgen.Workload, loadgen.Workload]:
    spec = parse_synthetic(request.param)
    return generate_synthetic(spec, seed=5), generate_synthetic(spec, seed=5, lazy=True)


def test_a_lazy_workload_reads_as_the_eager_one(
    pair: tuple[loadgen.Workload, loadgen.Workload],
) -> None:
    eager, lazy = pair
    requests = lazy.requests
    assert isinstance(requests, SyntheticRequests)
    assert isinstance(eager.requests, tuple)
    assert len(lazy) == len(eager) == len(requests)
    assert list(requests) == list(eager.requests)
    assert [requests[i] for i in range(len(requests))] == list(eager.requests)
    assert requests[-1] == eager.requests[-1] and requests[-len(requests)] == eager.requests[0]
    assert requests[2:9:3] == eager.requests[2:9:3]
    assert requests == eager.requests and eager.requests == requests
    assert lazy == eager
    assert hash(requests) == hash(eager.requests)
    assert requests != eager.requests[:-1]
    with pytest.raises(IndexError):
        requests[len(requests)]
    for request in requests:
        assert not request.hash_ids.flags.writeable
    assert lazy.conversations == eager.conversations
    assert loadgen.workload_stats(lazy) == loadgen.workload_stats(eager)
    assert pickle.loads(pickle.dumps(lazy)) == eager


def test_a_request_is_built_anew_at_each_read(
    pair: tuple[loadgen.Workload, loadgen.Workload],
) -> None:
    _, lazy = pair
    assert lazy.requests[0] == lazy.requests[0]
    assert lazy.requests[0] is not lazy.requests[0]


def test_positions_are_read_off_the_ids(
    pair: tuple[loadgen.Workload, loadgen.Workload],
) -> None:
    eager, lazy = pair
    requests = lazy.requests
    assert isinstance(requests, SyntheticRequests)
    positions = requests.positions()
    expected = {r.id: i for i, r in enumerate(eager.requests)}
    assert dict(positions) == expected
    assert len(positions) == len(expected)
    for rid, i in expected.items():
        assert positions[rid] == i and rid in positions and positions.get(rid) == i
    first = eager.requests[0].id
    for wrong in ("syn:", "syn:01", "syn:-1", "syn:s0/", "syn:s0/01", "x", f"{first}x"):
        assert wrong not in positions and positions.get(wrong) is None
    assert f"syn:{len(eager)}" not in positions and f"syn:s{len(eager)}/0" not in positions
    assert 7 not in positions
    with pytest.raises(KeyError):
        positions["syn:nope"]


def test_content_ids_stop_is_one_past_the_largest_content_id(
    pair: tuple[loadgen.Workload, loadgen.Workload],
) -> None:
    eager, lazy = pair
    requests = lazy.requests
    assert isinstance(requests, SyntheticRequests)
    assert requests.content_ids_stop() == max(int(r.hash_ids.max()) for r in eager.requests) + 1


@pytest.mark.parametrize("mode", [LoadMode(), LoadMode(concurrency=2), LoadMode(max_requests=7)])
def test_a_driver_runs_a_lazy_workload_as_the_eager_one(
    pair: tuple[loadgen.Workload, loadgen.Workload], mode: LoadMode
) -> None:
    eager, lazy = pair
    a = FakeRun(eager, mode=mode)
    b = FakeRun(lazy, mode=mode)
    assert a.run() == b.run()
    assert (a.released, a.completed, a.order) == (b.released, b.completed, b.order)
