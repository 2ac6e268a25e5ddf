"""A lazy synthetic workload replays to the same bytes as the eager one."""

from __future__ import annotations

import tempfile
from pathlib import Path

from engines import EngineConfig, FixedTiming
from loadgen import generate_synthetic, parse_synthetic
from policies import KVAware
from replay import Aggregated, run, write_outputs


def _bytes(lazy: bool) -> dict[str, bytes]:
    spec = parse_synthetic(
        "count=40 arrivals=poisson(20) input=uniform(64,600) output=uniform(1,30) "
        "prefix_groups=3 shared_prefix_ratio=0.5 turns=uniform(1,3) think_ms=200"
    )
    workload = generate_synthetic(spec, seed=2, lazy=lazy)
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=60, block_size=64),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )
    result = run(workload, topology=topology, policy=KVAware(), seed=1)
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        return {p.name: p.read_bytes() for p in sorted(Path(out).iterdir())}


def test_a_lazy_synthetic_workload_replays_as_the_eager_one() -> None:
    eager = _bytes(lazy=False)
    assert set(eager) == {"config.json", "requests.jsonl", "summary.json"}
    assert _bytes(lazy=True) == eager
