"""A timeline's window and request filter apply while recording: a recorder built with a filter
gives the timeline a recorder that kept everything gives with that filter, byte for byte, and
keeps only what the filter can show."""

from __future__ import annotations

from typing import Any

import pytest

from engines import EngineConfig, FixedTiming
from loadgen import generate_synthetic, parse_synthetic
from policies import LeastLoaded, PDPolicy
from replay import Aggregated
from replay._session import ReplaySession
from replay._timeline import TimelineFilter, TimelineRecorder

from .pd_helpers import example_d

S = 1_000_000_000


def _options(topology: str) -> dict[str, Any]:
    workload = generate_synthetic(
        parse_synthetic(
            "count=150 arrivals=poisson(40) input=lognormal(700,500) output=lognormal(30,20)"
        ),
        seed=4,
    )
    if topology == "pd":
        return {
            "workload": workload,
            "topology": example_d(bandwidth_gbps=5.0),
            "policy": PDPolicy(),
        }
    return {
        "workload": workload,
        "topology": Aggregated(
            workers=2,
            engine=EngineConfig(num_blocks=120),  # preemptions: instants and readmissions
            timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
        ),
        "policy": LeastLoaded(),
    }


FILTERS = {
    "start": TimelineFilter(start_ns=1 * S),
    "end": TimelineFilter(end_ns=round(0.7 * S)),
    "window": TimelineFilter(start_ns=round(1.3 * S), end_ns=round(2.05 * S)),
    "instant": TimelineFilter(start_ns=2 * S, end_ns=2 * S),
    "requests": TimelineFilter(request_ids=["syn:3", "syn:40", "syn:41"]),
    "requests_in_window": TimelineFilter(
        start_ns=round(0.5 * S), end_ns=3 * S, request_ids=["syn:17", "syn:90"]
    ),
}


def _record(topology: str) -> tuple[TimelineRecorder, dict[str, TimelineRecorder]]:
    session = ReplaySession.build(**_options(topology), history=False)
    views = tuple(e.view for e in session.engines)
    everything = TimelineRecorder(views=views)
    session.journal.subscribe(everything.on_event)
    filtered = {}
    for name, f in FILTERS.items():
        filtered[name] = TimelineRecorder(views=views, filter=f)
        session.journal.subscribe(filtered[name].on_event)
    session.run()
    return everything, filtered


@pytest.mark.parametrize("topology", ["aggregated", "pd"])
def test_filtering_while_recording_gives_the_filtered_timeline_of_everything(
    topology: str,
) -> None:
    everything, filtered = _record(topology)
    full = everything.timeline().to_bytes()
    for name, recorder in filtered.items():
        f = FILTERS[name]
        expected = everything.timeline(f).to_bytes()
        assert recorder.timeline().to_bytes() == expected, name
        assert recorder.timeline(f).to_bytes() == expected, name
        assert len(expected) < len(full), name
        # it kept less than the unfiltered recorder
        assert len(recorder._spans) + len(recorder._instants) < len(everything._spans) + len(
            everything._instants
        ), name


def test_a_filtered_recorder_refuses_another_filter() -> None:
    recorder = TimelineRecorder(filter=TimelineFilter(end_ns=S))
    with pytest.raises(ValueError, match="kept only what its own filter shows"):
        recorder.timeline(TimelineFilter(end_ns=2 * S))


def test_a_window_drops_passes_outside_it_while_recording() -> None:
    everything, filtered = _record("aggregated")
    window = filtered["window"]
    kept = sum(len(p) for p in window._passes.values())
    total = sum(len(p) for p in everything._passes.values())
    assert 0 < kept < total / 2
