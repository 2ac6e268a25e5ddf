"""Failures injected into both P/D placement phases, on each side, in both orders (§6).

After every failure: the run ends with a report naming it, every request ends in exactly one
terminal state, and no engine keeps a KV block, an open offer, held prefill blocks or a decode
reservation.
"""

from __future__ import annotations

from typing import Any

import pytest

from engines import EngineConfig
from loadgen import Request
from policies import (
    CommitError,
    PDPolicy,
    Placement,
    PlacementError,
    PlacePolicy,
    PolicyContext,
    PolicyHookError,
    RoundRobin,
)
from replay import ReplayFailedError, ReplayResult

from .pd_helpers import KeepingPD, clean, example_d, replay, request, statuses

# engines: prefill 0, 1; decode 2, 3 (each pool addresses its engines by these ids)
REQUESTS = [
    request("a", p=128, n=3, ids=[11]),
    request("b", p=128, n=3, ids=[12]),
    request("c", p=128, n=3, ids=[13], at_ms=20),
]


def topo(order: str = "source_first", **faults: Any) -> KeepingPD:
    inner = example_d(order=order, prefill_workers=2, decode_workers=2, decode_blocks=256)
    return KeepingPD(inner, **faults)


def failed_run(policy: PDPolicy, keeping: KeepingPD) -> tuple[BaseException, ReplayResult]:
    with pytest.raises(ReplayFailedError) as info:
        replay(REQUESTS, keeping, policy)
    result = info.value.result
    assert isinstance(result, ReplayResult)
    assert info.value.__cause__ is not None
    return info.value.__cause__, result


def assert_accounted(result: ReplayResult, keeping: KeepingPD) -> None:
    assert [r.request_id for r in result.requests] == ["a", "b", "c"]
    assert sum(result.summary.status_counts.values()) == 3
    assert keeping.leftovers() == clean(keeping)


class Recording(RoundRobin):
    """Round robin that records aborted placements."""

    def __init__(self) -> None:
        super().__init__()
        self.aborted: list[Placement] = []

    def on_aborted(self, placement: Placement) -> None:
        self.aborted.append(placement)


class BodyFails(PlacePolicy):
    """Offers to the first engine of its pool and raises inside the offer's scope."""

    name = "body-fails"

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        async with ctx.offer(request, ctx.engines[0].id):
            raise KeyError("policy bug")


def broken_hook(hook: str) -> RoundRobin:
    def broken(self: Any, arg: object) -> None:
        raise ZeroDivisionError("hook bug")

    return type("Broken", (RoundRobin,), {hook: broken})()  # type: ignore[no-any-return]


# -- source-first, phase 1: the prefill placement at dispatch ----------------------------------


def test_prefill_commit_failure_fails_the_request_and_undoes_in_flight_handoffs() -> None:
    keeping = topo(fail_commit={1: frozenset({"b"})})
    prefill = Recording()
    cause, result = failed_run(PDPolicy(prefill=prefill), keeping)
    assert isinstance(cause, CommitError)
    assert (cause.request_id, cause.engine) == ("b", 1)
    assert [(p.request_id, p.engine, p.outcome) for p in prefill.aborted] == [("b", 1, "aborted")]
    # a was accepted by prefill engine 0 and drained; its decode placement cannot happen any more
    assert statuses(result) == {"a": "failed", "b": "failed", "c": "never_issued"}
    assert result.requests[0].failure_reason == "handoff stopped: the run failed"
    assert result.requests[1].failure_reason == (
        "commit failed: RuntimeError: injected commit failure for b"
    )
    assert_accounted(result, keeping)


def test_prefill_abort_failure_during_scope_cleanup_is_kept() -> None:
    keeping = topo(fail_abort={0: frozenset({"a"})})
    cause, result = failed_run(PDPolicy(prefill=BodyFails()), keeping)
    assert isinstance(cause, PlacementError)
    assert str(cause) == (
        "abort of request 'a' on engine 0 failed: RuntimeError: injected abort failure for a"
    )
    assert cause.__notes__ == ["later failure: KeyError: 'policy bug'"]
    assert statuses(result) == {"a": "unplaced", "b": "unplaced", "c": "never_issued"}
    assert_accounted(result, keeping)


def test_prefill_engine_rejection_rejects_the_request_and_the_rest_completes() -> None:
    keeping = topo(configs={1: EngineConfig(num_blocks=256, role="prefill", context_length=64)})
    result = replay(REQUESTS, keeping, PDPolicy())
    assert statuses(result) == {"a": "completed", "b": "rejected", "c": "completed"}
    assert result.requests[1].rejection_reason == "prompt_too_long"
    assert_accounted(result, keeping)


@pytest.mark.parametrize("hook", ["on_committed", "on_finished", "on_kv_event"])
def test_prefill_policy_hook_failure_ends_the_run_naming_the_hook(hook: str) -> None:
    keeping = topo()
    cause, result = failed_run(PDPolicy(prefill=broken_hook(hook)), keeping)
    assert isinstance(cause, PolicyHookError) and cause.hook == hook
    assert str(cause) == f"policy 'round_robin': hook {hook} raised ZeroDivisionError: hook bug"
    assert_accounted(result, keeping)


# -- source-first, phase 2: the decode placement at prefill completion -------------------------


def test_decode_commit_failure_fails_the_request_and_releases_its_prefill_blocks() -> None:
    keeping = topo(fail_commit={3: frozenset({"b"})})
    decode = Recording()
    cause, result = failed_run(PDPolicy(decode=decode), keeping)
    assert isinstance(cause, CommitError)
    assert (cause.request_id, cause.engine) == ("b", 3)  # decode engines are 2 and 3
    assert str(cause) == (
        "commit of request 'b' on engine 3 failed: RuntimeError: injected commit failure for b"
    )
    assert [(p.request_id, p.engine) for p in decode.aborted] == [("b", 3)]
    # a was placed on decode engine 2 before b failed, at the same instant, and c (released at
    # 20) was in prefill: their handoffs are undone
    assert statuses(result) == {"a": "failed", "b": "failed", "c": "failed"}
    assert result.requests[2].failure_reason == "handoff stopped: the run failed"
    b = result.requests[1]
    assert b.handoff is not None and b.handoff.prefill_done_ms == 50.0
    assert b.handoff.destination_reserved_ms is None
    assert_accounted(result, keeping)


def test_decode_abort_failure_during_scope_cleanup_is_kept_and_prefill_blocks_released() -> None:
    keeping = topo(fail_abort={2: frozenset({"a"})})
    cause, result = failed_run(PDPolicy(decode=BodyFails()), keeping)
    assert isinstance(cause, PlacementError)
    assert str(cause) == (
        "abort of request 'a' on engine 2 failed: RuntimeError: injected abort failure for a"
    )
    assert statuses(result) == {"a": "failed", "b": "failed", "c": "failed"}
    assert_accounted(result, keeping)


def test_decode_engine_rejection_rejects_the_request_and_releases_its_prefill_blocks() -> None:
    small = EngineConfig(num_blocks=2, role="decode")  # 128 + 3 - 1 positions need 3 blocks
    keeping = topo(configs={3: small})
    result = replay(REQUESTS, keeping, PDPolicy())
    assert statuses(result) == {"a": "completed", "b": "rejected", "c": "completed"}
    b = result.requests[1]
    assert b.rejection_reason == "exceeds_kv_capacity"
    assert b.handoff is not None and b.handoff.prefill_done_ms == 50.0
    assert b.terminal_ms == 50.0
    assert_accounted(result, keeping)


@pytest.mark.parametrize("hook", ["on_committed", "on_finished", "on_kv_event"])
def test_decode_policy_hook_failure_ends_the_run_and_undoes_handoffs(hook: str) -> None:
    keeping = topo()
    cause, result = failed_run(PDPolicy(decode=broken_hook(hook)), keeping)
    assert isinstance(cause, PolicyHookError) and cause.hook == hook
    assert set(statuses(result).values()) <= {"completed", "failed", "never_issued"}
    assert_accounted(result, keeping)


# -- destination-first: both placements at dispatch --------------------------------------------


def test_destination_first_decode_commit_failure_aborts_the_prefill_offer() -> None:
    keeping = topo("destination_first", fail_commit={3: frozenset({"b"})})
    cause, result = failed_run(PDPolicy(), keeping)
    assert isinstance(cause, CommitError)
    assert (cause.request_id, cause.engine) == ("b", 1)  # the prefill engine offered
    assert statuses(result)["b"] == "failed"
    assert_accounted(result, keeping)


def test_destination_first_prefill_commit_failure_cancels_the_decode_reservation() -> None:
    keeping = topo("destination_first", fail_commit={1: frozenset({"b"})})
    cause, result = failed_run(PDPolicy(), keeping)
    assert isinstance(cause, CommitError) and cause.request_id == "b"
    assert statuses(result) == {"a": "failed", "b": "failed", "c": "never_issued"}
    assert_accounted(result, keeping)


def test_destination_first_decode_rejection_aborts_the_prefill_offer_and_rejects() -> None:
    keeping = topo("destination_first", configs={3: EngineConfig(num_blocks=2, role="decode")})
    result = replay(REQUESTS, keeping, PDPolicy())
    assert statuses(result) == {"a": "completed", "b": "rejected", "c": "completed"}
    assert result.requests[1].rejection_reason == "exceeds_kv_capacity"
    assert result.requests[1].terminal_ms == 0.0
    assert_accounted(result, keeping)


def test_destination_first_prefill_rejection_never_offers_the_decode_engine() -> None:
    config = EngineConfig(num_blocks=256, role="prefill", context_length=64)
    keeping = topo("destination_first", configs={1: config})
    result = replay(REQUESTS, keeping, PDPolicy())
    assert statuses(result) == {"a": "completed", "b": "rejected", "c": "completed"}
    assert_accounted(result, keeping)


def test_destination_first_decode_choice_failure_aborts_the_prefill_offer() -> None:
    class Broken(RoundRobin):
        def choose(self, request: Request, ctx: PolicyContext) -> int:
            raise LookupError("no decode engine")

    keeping = topo("destination_first")
    cause, result = failed_run(PDPolicy(decode=Broken()), keeping)
    assert isinstance(cause, LookupError)
    assert statuses(result) == {"a": "unplaced", "b": "unplaced", "c": "never_issued"}
    assert_accounted(result, keeping)


def test_destination_first_abort_failure_on_decode_still_aborts_prefill_and_keeps_errors() -> None:
    keeping = topo("destination_first", fail_abort={2: frozenset({"a"})})
    cause, result = failed_run(PDPolicy(prefill=BodyFails()), keeping)
    assert isinstance(cause, PlacementError)
    assert str(cause) == (
        "abort of request 'a' on engine 0 failed: RuntimeError: injected abort failure for a"
    )
    assert statuses(result) == {"a": "unplaced", "b": "unplaced", "c": "never_issued"}
    assert_accounted(result, keeping)


@pytest.mark.parametrize("hook", ["on_committed", "on_finished", "on_kv_event"])
def test_destination_first_hook_failure_ends_the_run_and_undoes_handoffs(hook: str) -> None:
    keeping = topo("destination_first")
    cause, result = failed_run(PDPolicy(prefill=broken_hook(hook)), keeping)
    assert isinstance(cause, PolicyHookError) and cause.hook == hook
    assert_accounted(result, keeping)


def test_destination_first_needs_a_decode_side_with_choose() -> None:
    keeping = topo("destination_first")
    cause, result = failed_run(PDPolicy(decode=BodyFails()), keeping)
    assert str(cause) == (
        "PDPolicy 'pd(round_robin,body-fails)': destination-first placement needs a decode side "
        "with choose(request, ctx); 'body-fails' has none"
    )
    assert_accounted(result, keeping)
