"""A timing model's shortcuts (``pass_time_ms_lists``, ``steady_decode_ms``,
``decode_run_ms``) are used only where they price passes as its ``pass_time_ms`` does.

A subclass of a built-in model that reprices passes in ``pass_time_ms`` inherits the
built-in shortcuts; the engine must not use them, in either stepping mode.
"""

from __future__ import annotations

import attrs
import numpy as np

from engines import EngineConfig, FixedTiming, PassShape
from engines._pass import DecodeRun, decode_run_times_ms, model_method
from policies import RoundRobin
from replay import Aggregated, run

from ..policies.support import req, workload
from .test_macro_differential import assert_same

SHORTCUTS = ("pass_time_ms_lists", "steady_decode_ms", "decode_run_ms")


@attrs.frozen
class SlowDecode(FixedTiming):
    """FixedTiming whose every pass costs 7 ms more: its own ``pass_time_ms`` only."""

    def pass_time_ms(self, shape: PassShape) -> float:
        return FixedTiming.pass_time_ms(self, shape) + 7.0


@attrs.frozen
class SlowDecodeWithRuns(SlowDecode):
    """SlowDecode that also prices decode runs itself (a shortcut below its pricer)."""

    def decode_run_ms(self, run: DecodeRun) -> np.ndarray:
        return FixedTiming.decode_run_ms(self, run) + 7.0


class OwnModel:
    def pass_time_ms(self, shape: PassShape) -> float:
        return 1.0


def test_a_built_in_model_offers_its_shortcuts() -> None:
    model = FixedTiming(prefill_ms=50.0, decode_ms=10.0)
    for name in SHORTCUTS:
        assert model_method(model, name) == getattr(model, name)


def test_a_subclass_that_reprices_passes_is_not_priced_by_inherited_shortcuts() -> None:
    model = SlowDecode(prefill_ms=50.0, decode_ms=10.0)
    assert [model_method(model, name) for name in SHORTCUTS] == [None, None, None]
    runs = SlowDecodeWithRuns(prefill_ms=50.0, decode_ms=10.0)
    assert model_method(runs, "decode_run_ms") == runs.decode_run_ms
    assert model_method(runs, "steady_decode_ms") is None
    assert model_method(OwnModel(), "decode_run_ms") is None


def test_a_decode_run_of_a_repricing_subclass_is_priced_pass_by_pass() -> None:
    run_ = DecodeRun(
        4,
        np.array([10, 20], dtype=np.int64),
        np.array([8, 8], dtype=np.int64),
        np.array([2, 12], dtype=np.int64),
        np.array([4, 3], dtype=np.int64),
        "aggregated",
        4096,
    )
    assert decode_run_times_ms(SlowDecode(prefill_ms=50.0, decode_ms=10.0), run_).tolist() == [
        17.0,
        17.0,
        17.0,
        17.0,
    ]


def _requests() -> list[object]:
    return [
        req(f"r{i}", prompt=100 + 37 * i, output=30 + 11 * (i % 4), at_ms=float(25 * i))
        for i in range(12)
    ]


def test_a_repricing_subclass_gives_its_own_pass_times_in_both_stepping_modes() -> None:
    config = EngineConfig(num_blocks=400, block_size=64, max_num_batched_tokens=512)
    topology = Aggregated(
        workers=2, engine=config, timing=SlowDecode(prefill_ms=50.0, decode_ms=10.0)
    )
    assert_same(workload(_requests()), RoundRobin, topology=topology)
    result = run(workload(_requests()), topology=topology, policy=RoundRobin(), stepping="macro")
    # every decode-only pass costs 10 + 7 ms: no gap is the inherited 10 ms
    gaps = {
        round(b - a, 6)
        for r in result.requests
        for a, b in zip(r.token_times_ms, r.token_times_ms[1:], strict=False)
    }
    assert 17.0 in gaps
    assert 10.0 not in gaps
