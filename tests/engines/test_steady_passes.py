"""Running requests that all take a decode step are scheduled together
(``VLLMRules._steady_columns``) and committed together (``_commit_steady``). That must be
indistinguishable from the general path: the same passes, token times, events, KV
transitions, block states and views, after every step."""

from __future__ import annotations

from typing import Any
from unittest import mock

import attrs
from hypothesis import HealthCheck, given, settings

from engines import (
    BlockKeyer,
    EngineConfig,
    EventKind,
    FixedTiming,
    Journal,
    LifecycleEvent,
    VLLMScheduler,
)
from engines._core import EngineCore, Pass
from engines._timing import LinearTiming
from engines._vllm import VLLMRules
from loadgen import Request

from .sim import req, simulate
from .test_properties import scenarios
from .test_roles import pd_workloads, run_pd


class _GeneralRules(VLLMRules):
    def _steady_columns(self) -> tuple[list[int], list[int], list[int]] | None:
        return None


class GeneralOnly(EngineCore):
    """An engine whose scheduler never takes the steady path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scheduler = _GeneralRules(self, VLLMScheduler())


class Recording(EngineCore):
    """Records what anyone could observe after every schedule and commit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observed: list[tuple[object, ...]] = []
        self.steady = 0
        self.mixed = 0  # steady passes that also admitted a waiting request
        # what a subscriber sees in the middle of a commit, when a request finishes
        self.journal.subscribe(self._on_finished, kinds=[EventKind.FINISHED])

    def _on_finished(self, event: LifecycleEvent) -> None:
        self.observed.append(
            (
                "finished",
                event.request_id,
                self.decode_outstanding,
                self.prefill_outstanding,
                self.kv.free_count,
                len(self.running),
            )
        )

    def _observe(self, tag: str, plan: Pass | None) -> None:
        kv = self.kv
        self.observed.append(
            (
                tag,
                None if plan is None else (plan.start_ns, plan.end_ns, tuple(plan.scheduled)),
                None if plan is None else tuple(r.rid for r in plan.entries),
                self.prefill_outstanding,
                self.decode_outstanding,
                kv.free_count,
                tuple(kv.ref_counts()),
                tuple(kv.block_keys()),
                tuple(kv.free_blocks()),
                tuple(kv.transitions),
                tuple(r.rid for r in self.running),
                tuple((r.rid, r.num_computed, r.num_output, r.nkeyed) for r in self.running),
            )
        )

    def schedule(self, now_ns: int) -> Pass | None:
        plan = super().schedule(now_ns)
        if plan is not None and plan.steady:
            self.steady += 1
            self.mixed += plan.steady < len(plan.entries)
        self._observe("schedule", plan)
        return plan

    def commit(self, plan: Pass) -> None:
        super().commit(plan)
        self._observe("commit", plan)


class GeneralRecording(Recording, GeneralOnly):
    pass


def _run(
    cls: type[Recording],
    config: EngineConfig,
    requests: list[Request],
    timing: Any,
    token_events: bool,
) -> Recording:
    journal = Journal(keep_events=True, token_events=token_events)
    c = cls(0, config, timing, BlockKeyer(), journal)
    simulate(c, requests, check=True)
    return c


def _compare(
    config: EngineConfig, requests: list[Request], timing: Any, token_events: bool
) -> tuple[int, int]:
    fast = _run(Recording, config, requests, timing, token_events)
    general = _run(GeneralRecording, config, requests, timing, token_events)
    assert general.steady == 0
    assert fast.observed == general.observed
    assert fast.journal.events == general.journal.events
    for rid, trace in general.journal.traces.items():
        assert attrs.asdict(fast.journal.traces[rid]) == attrs.asdict(trace)
    assert (fast.passes, fast.busy_ns) == (general.passes, general.busy_ns)
    return fast.steady, fast.mixed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_steady_passes_match_the_general_path(scenario: tuple[EngineConfig, list[Request]]) -> None:
    config, requests = scenario
    _compare(config, requests, FixedTiming(prefill_ms=5, decode_ms=1), token_events=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_steady_passes_match_with_token_events_and_a_context_dependent_model(
    scenario: tuple[EngineConfig, list[Request]],
) -> None:
    config, requests = scenario
    timing = LinearTiming(c0=1.0, c_p=0.01, c_d=0.02, c_kv=0.0001)
    _compare(config, requests, timing, token_events=True)


def test_a_long_decode_run_takes_the_steady_path_across_block_boundaries() -> None:
    config = EngineConfig(num_blocks=64, block_size=4, max_num_batched_tokens=64)
    requests = [
        req("a", 10, 40, hash_ids=[1, 2, 3], trace_block=4),
        req("b", 7, 25, hash_ids=[1, 2], trace_block=4, arrival_ms=3),
        req("c", 13, 33, hash_ids=[1, 2, 4, 5], trace_block=4, arrival_ms=9),
    ]
    steady, mixed = _compare(
        config, requests, FixedTiming(prefill_ms=5, decode_ms=1), token_events=False
    )
    assert steady > 30  # most of the ~40 decode passes
    assert mixed >= 1  # b and c are admitted beside requests already decoding


def _compare_pd(workload: tuple[int, int, list[Request]]) -> int:
    """Run ``workload`` through a prefill and a decode engine with and without steady steps;
    assert everything matches and return how many steady passes the decode engine ran."""
    steady_on_decode = 0
    original = VLLMRules._steady_columns

    def counting(self: VLLMRules) -> tuple[list[int], list[int], list[int]] | None:
        nonlocal steady_on_decode
        columns = original(self)
        steady_on_decode += columns is not None and self.core.role == "decode"
        return columns

    with mock.patch.object(VLLMRules, "_steady_columns", counting):
        journal, _, decode = run_pd(workload)
    with mock.patch.object(VLLMRules, "_steady_columns", lambda self: None):
        general_journal, _, general_decode = run_pd(workload)
    assert journal.events == general_journal.events
    assert {rid: attrs.asdict(t) for rid, t in journal.traces.items()} == {
        rid: attrs.asdict(t) for rid, t in general_journal.traces.items()
    }
    assert decode.snapshot() == general_decode.snapshot()
    return steady_on_decode


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=pd_workloads())
def test_steady_passes_match_on_a_decode_role_engine(
    workload: tuple[int, int, list[Request]],
) -> None:
    """Activated requests enter with their prompt KV resident; their steps must match too."""
    _compare_pd(workload)


def test_a_decode_role_engine_takes_steady_steps() -> None:
    requests = [
        req("a", 9, 30, hash_ids=[1, 2], trace_block=8),
        req("b", 12, 25, hash_ids=[1, 3], trace_block=8, arrival_ms=4),
    ]
    assert _compare_pd((30, 30, requests)) > 20
