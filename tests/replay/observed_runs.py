"""Small runs that exercise what watching a run can change: preemptions and readmissions,
prompts (and recomputes) over several passes, prefill/decode hand-offs."""

from __future__ import annotations

from typing import Any

from engines import EngineConfig, FixedTiming
from loadgen import generate_synthetic, parse_synthetic
from policies import LeastLoaded, PDPolicy
from replay import Aggregated

from .pd_helpers import example_d

MS = 1_000_000

SCENARIOS = ("roomy", "preempting", "chunked", "pd")


def options(scenario: str) -> dict[str, Any]:
    """A run with room to macro-step long runs, one with preemptions and readmissions, one
    whose long prompts (and recomputes) take several passes, or a prefill/decode run."""
    spec = "count=150 arrivals=poisson(40) input=lognormal(700,500) output=lognormal(30,20)"
    if scenario == "chunked":
        spec = "count=90 arrivals=poisson(30) input=lognormal(1500,900) output=lognormal(300,100)"
    workload = generate_synthetic(parse_synthetic(spec), seed=4)
    if scenario == "pd":
        return {
            "workload": workload,
            "topology": example_d(bandwidth_gbps=5.0),
            "policy": PDPolicy(),
        }
    engine = {
        "roomy": EngineConfig(num_blocks=400),  # long macro-stepped runs
        "preempting": EngineConfig(num_blocks=120),
        "chunked": EngineConfig(num_blocks=160, max_num_batched_tokens=256),
    }[scenario]
    return {
        "workload": workload,
        "topology": Aggregated(
            workers=2, engine=engine, timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0)
        ),
        "policy": LeastLoaded(),
    }
