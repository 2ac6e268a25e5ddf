"""``replay.Run``: one replay as an object. Advanced in any pieces, it finishes into the report
``replay.run`` gives; its options are the run spec ``replay.RunOptions``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, generate_synthetic, parse_synthetic
from policies import KVAware
from replay import Aggregated, ReplaySession, Run, run, write_outputs

MS = 1_000_000


def _options() -> dict[str, Any]:
    return {
        "topology": Aggregated(
            workers=2,
            engine=EngineConfig(num_blocks=400, block_size=16, max_num_batched_tokens=512),
            timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
        ),
        "policy": KVAware(),
        "seed": 4,
        "load": LoadMode(),
    }


def _workload() -> Any:
    spec = parse_synthetic("count=40 arrivals=poisson(10) input=lognormal(600,300) output=20")
    return generate_synthetic(spec, seed=4)


def _files(result: Any) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        names = ("requests.jsonl", "summary.json")
        return {name: (Path(out) / name).read_bytes() for name in names}


def test_a_run_advanced_in_pieces_finishes_into_the_report_run_gives() -> None:
    expected = _files(run(_workload(), **_options()))
    whole = Run.build(_workload(), **_options())
    assert whole.now_ns == 0 and not whole.done and whole.result is None
    assert _files(whole.finish()) == expected
    pieces = Run.build(_workload(), **_options())
    for until in range(100 * MS, 3_000 * MS, 250 * MS):
        held = pieces.advance(until)
        assert not held
        assert pieces.now_ns == until or pieces.done
    labels = {pieces.step_callback() for _ in range(5)}
    assert labels  # callbacks ran (a label, or None once nothing is left)
    assert _files(pieces.finish()) == expected
    assert pieces.finish() is pieces.result  # finishing again gives the same report


def test_advance_stops_where_its_condition_first_holds() -> None:
    r = Run.build(_workload(), **_options())
    engines = r.engines
    held = r.advance(stop=lambda: any(e.view.running_count for e in engines))
    assert held
    at = r.now_ns
    assert any(e.view.running_count for e in engines)
    # the clock had not moved past the first admission: a run advanced to the instant
    # before it shows nothing running
    before = Run.build(_workload(), **_options())
    before.advance(at - 1)
    assert not any(e.view.running_count for e in before.engines)
    before.close()
    r.close()


def test_a_closed_run_cannot_go_on() -> None:
    r = Run.build(_workload(), **_options())
    r.advance(50 * MS)
    r.close()
    with pytest.raises(RuntimeError) as info:
        r.advance(60 * MS)
    assert str(info.value) == "the run cannot go on: RuntimeError: the run was closed"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda w, o: run(w, **o, sed=1), "run() got an unexpected keyword argument 'sed'"),
        (
            lambda w, o: Run.build(w, topology=o["topology"]),
            "Run.build() missing required keyword argument: 'policy'",
        ),
        (
            lambda w, o: ReplaySession.build(w, policy=o["policy"]),
            "ReplaySession.build() missing required keyword argument: 'topology'",
        ),
    ],
)
def test_the_run_spec_is_checked_as_keyword_parameters_are(call: Any, message: str) -> None:
    with pytest.raises(TypeError) as info:
        call(_workload(), _options())
    assert str(info.value) == message
