"""Failures injected at each step of the dispatch handshake.

After every failure: the run ends with a report naming it, every request ends in exactly one
terminal state (none lost, none counted twice), and no engine keeps a KV block or an open offer.
"""

from __future__ import annotations

from typing import Any

import pytest

from engines import EngineConfig, RequestTrace
from loadgen import Request
from policies import (
    CommitError,
    InvalidWakeupError,
    Placement,
    PlacementError,
    PlacePolicy,
    PolicyContext,
    PolicyHookError,
    RoundRobin,
    RuntimePoisonedError,
)
from replay import ReplayFailedError, ReplayResult

from ..policies.support import KeepingTopology, req, run_policy, statuses

REQUESTS = [req("a", output=3), req("b", output=3), req("c", output=3, at_ms=20)]


def failed_run(policy: object, topo: KeepingTopology) -> tuple[ReplayFailedError, ReplayResult]:
    with pytest.raises(ReplayFailedError) as info:
        run_policy(policy, REQUESTS, topo=topo)
    error = info.value
    result = error.result
    assert isinstance(result, ReplayResult)
    return error, result


def assert_accounted(result: ReplayResult, topo: KeepingTopology) -> None:
    """Every request exactly once; nothing left on the engines."""
    ids = [r.request_id for r in result.requests]
    assert ids == ["a", "b", "c"]
    assert sum(result.summary.status_counts.values()) == len(REQUESTS)
    assert topo.kv_blocks_used() == [0, 0]
    assert topo.pending_offers() == [0, 0]


class Persistent(PlacePolicy):
    """Places round robin; records what each dispatch raised and keeps going."""

    name = "persistent"

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.aborted: list[Placement] = []
        self.turn = 0

    def on_aborted(self, placement: Placement) -> None:
        self.aborted.append(placement)

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        engine = self.turn % 2
        self.turn += 1
        try:
            await ctx.dispatch(request, engine)
        except Exception as error:
            self.errors.append(error)
            try:  # the next step is refused
                await ctx.dispatch(request, 1 - engine)
            except Exception as again:
                self.errors.append(again)


def test_a_failing_commit_rolls_back_poisons_the_runtime_and_fails_the_request() -> None:
    topo = KeepingTopology(fail_commit={1: frozenset({"b"})})
    policy = Persistent()
    error, result = failed_run(policy, topo)

    cause = error.__cause__
    assert isinstance(cause, CommitError)
    assert (cause.request_id, cause.engine, cause.cleanup_errors) == ("b", 1, ())
    assert str(cause) == (
        "commit of request 'b' on engine 1 failed: RuntimeError: injected commit failure for b"
    )
    assert isinstance(cause.__cause__, RuntimeError)
    assert str(error) == f"replay failed: CommitError: {cause}"
    # the policy saw the failure, its abort hook ran, and its next step was refused
    assert [type(e) for e in policy.errors] == [CommitError, RuntimePoisonedError]
    assert str(policy.errors[1]).startswith("policy runtime 'persistent' is poisoned by an earlier")
    assert [(p.request_id, p.engine, p.outcome) for p in policy.aborted] == [("b", 1, "aborted")]
    assert policy.aborted[0].reason == (
        "commit failed: RuntimeError: injected commit failure for b"
    )
    # a drained; b failed; c (due later) was never released
    assert statuses(result) == {"a": "completed", "b": "failed", "c": "never_issued"}
    assert result.requests[1].failure_reason == (
        "commit failed: RuntimeError: injected commit failure for b"
    )
    assert_accounted(result, topo)


def test_a_failing_abort_hook_during_commit_cleanup_is_kept_with_the_commit_error() -> None:
    class BadAbortHook(Persistent):
        def on_aborted(self, placement: Placement) -> None:
            raise ValueError("hook broke")

    topo = KeepingTopology(fail_commit={0: frozenset({"a"})})
    error, result = failed_run(BadAbortHook(), topo)
    cause = error.__cause__
    assert isinstance(cause, CommitError)
    [cleanup] = cause.cleanup_errors
    assert isinstance(cleanup, ValueError) and str(cleanup) == "hook broke"
    assert cause.__notes__ == ["during cleanup: ValueError: hook broke"]
    assert statuses(result) == {"a": "failed", "b": "unplaced", "c": "never_issued"}
    assert_accounted(result, topo)


def test_an_abort_that_raises_during_scope_cleanup_keeps_both_errors() -> None:
    seen: list[BaseException] = []

    class BodyFails(PlacePolicy):
        name = "body-fails"

        async def place(self, request: Request, ctx: PolicyContext) -> None:
            try:
                async with ctx.offer(request, 0):
                    raise KeyError("policy bug")
            except KeyError as error:
                seen.append(error)
                raise

    topo = KeepingTopology(fail_abort={0: frozenset({"a"})})
    error, result = failed_run(BodyFails(), topo)
    # the body's error went on, naming the cleanup failure
    [body_error] = seen
    assert body_error.__notes__ == [
        "during cleanup: abort of request 'a' on engine 0 raised PlacementError: abort of "
        "request 'a' on engine 0 failed: RuntimeError: injected abort failure for a"
    ]
    # the cleanup failure poisoned the runtime; the body's error is noted on it
    cause = error.__cause__
    assert isinstance(cause, PlacementError)
    assert str(cause) == (
        "abort of request 'a' on engine 0 failed: RuntimeError: injected abort failure for a"
    )
    assert cause.__notes__ == ["later failure: KeyError: 'policy bug'"]
    assert statuses(result) == {"a": "unplaced", "b": "unplaced", "c": "never_issued"}
    assert_accounted(result, topo)


def test_an_engine_rejection_is_not_a_failure_and_the_policy_tries_elsewhere() -> None:
    topo = KeepingTopology(configs={0: EngineConfig(num_blocks=256, context_length=64)})
    outcomes: list[tuple[str, str, str | None]] = []

    class Fallback(PlacePolicy):
        async def place(self, request: Request, ctx: PolicyContext) -> None:
            for engine in range(len(ctx.engines)):
                placement = await ctx.dispatch(request, engine)
                outcomes.append((request.id, placement.outcome, placement.reason))
                if placement.committed:
                    return

    result = run_policy(Fallback(), REQUESTS, topo=topo)
    assert outcomes[:2] == [("a", "rejected", "prompt_too_long"), ("a", "committed", None)]
    assert statuses(result) == dict.fromkeys("abc", "completed")
    assert {r.engine for r in result.requests} == {1}
    assert_accounted(result, topo)


@pytest.mark.parametrize("hook", ["on_committed", "on_finished", "on_kv_event"])
def test_a_raising_policy_hook_ends_the_run_naming_the_hook(hook: str) -> None:
    def broken(self: Any, arg: object) -> None:
        raise ZeroDivisionError("hook bug")

    policy_type = type("Broken", (RoundRobin,), {hook: broken})
    topo = KeepingTopology()
    error, result = failed_run(policy_type(), topo)
    cause = error.__cause__
    assert isinstance(cause, PolicyHookError)
    assert cause.hook == hook
    assert str(cause) == f"policy 'round_robin': hook {hook} raised ZeroDivisionError: hook bug"
    assert isinstance(cause.__cause__, ZeroDivisionError)
    # committed requests drained to completion; nothing counted twice
    counts = result.summary.status_counts
    assert counts["completed"] >= 1
    assert counts["completed"] + counts["unplaced"] + counts["never_issued"] == 3
    assert_accounted(result, topo)


def test_an_invalid_policy_wakeup_ends_the_run_and_leaves_requests_unplaced() -> None:
    class Stale(PlacePolicy):
        name = "stale"

        async def place(self, request: Request, ctx: PolicyContext) -> None:
            await ctx.sleep_until_ns(ctx.now_ns() - 1)

    topo = KeepingTopology()
    error, result = failed_run(Stale(), topo)
    cause = error.__cause__
    assert isinstance(cause, InvalidWakeupError)
    assert str(cause) == "policy 'stale': wakeup at -1 ns is earlier than now (0 ns)"
    assert statuses(result) == {"a": "unplaced", "b": "unplaced", "c": "never_issued"}
    assert_accounted(result, topo)


def test_a_finished_hook_failure_reported_once_even_if_many_requests_finish() -> None:
    calls: list[str] = []

    class Once(RoundRobin):
        def on_finished(self, trace: RequestTrace) -> None:
            calls.append(trace.request_id)
            raise RuntimeError("stop")

    topo = KeepingTopology()
    error, result = failed_run(Once(), topo)
    assert len(calls) == 1  # hooks are not called once the runtime is poisoned
    assert isinstance(error.__cause__, PolicyHookError)
    assert_accounted(result, topo)


def test_a_failing_spawned_task_ends_the_run_with_its_error() -> None:
    class Background(RoundRobin):
        async def run(self, requests: Any, ctx: PolicyContext) -> None:
            async def crash() -> None:
                await ctx.sleep_ms(5)
                raise LookupError("background bug")

            ctx.spawn(crash(), name="crash")
            await super().run(requests, ctx)

    topo = KeepingTopology()
    error, result = failed_run(Background(), topo)
    assert isinstance(error.__cause__, LookupError)
    assert str(error) == "replay failed: LookupError: background bug"
    # a and b were placed at 0 and drain; c (due at 20 ms) is never released
    assert statuses(result) == {"a": "completed", "b": "completed", "c": "never_issued"}
    assert_accounted(result, topo)
