"""The release driver: only the members the runner uses, and the seed stream it is given."""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

import loadgen
from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, LoadMode, Poisson, Request, Workload, WorkloadConfigError
from loadgen import _driver as driver_module
from policies import RoundRobin
from replay import SEED_STREAMS, Aggregated, run

MS = 1_000_000


def roots(count: int) -> Workload:
    requests = tuple(
        Request(f"r{i}", 64, 1, 64, [i + 1], ArrivalRule(not_before_ms=1000.0 * i))
        for i in range(count)
    )
    return Workload(requests=requests, source="ex", format="test")


def test_the_driver_keeps_no_unused_members() -> None:
    for name in ("start", "on_started"):
        assert not hasattr(loadgen.Driver, name)
    assert "play_by_id" not in attrs.fields_dict(loadgen.Driver)
    assert "_play_by_id" not in attrs.fields_dict(loadgen.Driver)
    assert not hasattr(driver_module, "Status")


def test_the_rng_docstring_names_the_stream_the_runner_gives_the_driver() -> None:
    doc = loadgen.Driver.__doc__ or ""
    named = re.findall(r"run seed \(stream ``(\w+)``", " ".join(doc.split()))
    assert named == ["driver"]
    seed = 7
    result = run(
        roots(5),
        topology=Aggregated(
            workers=1,
            engine=EngineConfig(num_blocks=100),
            timing=FixedTiming(prefill_ms=5.0, decode_ms=1.0),
        ),
        policy=RoundRobin(),
        seed=seed,
        load=LoadMode(arrivals=Poisson(5.0)),
    )
    stream = np.random.SeedSequence(seed).spawn(len(SEED_STREAMS))[SEED_STREAMS.index(named[0])]
    gaps = np.random.default_rng(stream).exponential(200.0, size=5)
    expected = np.concatenate(([0.0], np.cumsum(gaps[1:])))
    arrivals = [r.arrival_ms for r in result.requests]
    assert arrivals == [round(t * MS) / MS for t in expected.tolist()]


def test_re_timed_arrivals_without_an_rng_name_the_driver_stream() -> None:
    with pytest.raises(WorkloadConfigError) as error:
        loadgen.Driver(roots(2), lambda request: None, mode=LoadMode(arrivals=Poisson(5.0)))
    assert str(error.value) == "arrivals: needs an rng (the run's 'driver' stream)"
