"""Base classes for policies: no-op hooks, per-request placement, choice functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from engines import EngineView, KVEvent, LifecycleEvent, RequestTrace
from loadgen import Request

from ._cluster import EngineFailure
from ._runtime import Placement, PolicyContext, RequestStream

__all__ = ("BasePolicy", "ChoiceFunction", "ChoicePolicy", "PlacePolicy", "from_choice")

F = TypeVar("F", bound=Callable[..., Any])

ChoiceFunction = Callable[[Request, Sequence[EngineView]], int]
"""A plain choice function: ``fn(request, engine_views) -> engine id`` (``view.id`` of one
of the views, which are those of the engines accepting placements)."""


def _noop(fn: F) -> F:
    # The runtime skips hooks marked as no-ops, so a policy that does not override a hook
    # costs nothing per event.
    fn.__policy_noop__ = True  # type: ignore[attr-defined]
    return fn


class BasePolicy:
    """A policy base class with no-op hooks; subclasses define :meth:`run`.

    Override any hook to receive it:
    :meth:`on_committed`, :meth:`on_aborted`, :meth:`on_admitted`, :meth:`on_first_token`,
    :meth:`on_preempted`, :meth:`on_finished`, :meth:`on_kv_event`, and the cluster's
    :meth:`on_engine_added`, :meth:`on_engine_draining`, :meth:`on_engine_removed`,
    :meth:`on_engine_failed`.
    Hooks are synchronous and run at the virtual instant of their event; an exception in a
    hook ends the run with a report naming it.
    """

    #: Offers of this policy expire this long (ms) after the engine made them if they are
    #: still open (None: never); ``ctx.offer(..., timeout_ms=...)`` overrides it per offer.
    offer_timeout_ms: float | None = None

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        """Receive requests and place them; subclasses must override it."""
        raise NotImplementedError(f"{type(self).__name__}.run")

    @_noop
    def on_committed(self, placement: Placement) -> None:
        """An engine accepted ``placement`` (the request is now the engine's)."""

    @_noop
    def on_aborted(self, placement: Placement) -> None:
        """A tentative ``placement`` was rolled back; ``placement.reason`` says why."""

    @_noop
    def on_admitted(self, event: LifecycleEvent) -> None:
        """An engine admitted a request this policy placed into its running batch (the
        ``ADMITTED`` event: ``event.engine``, ``event.time_ns``, and in ``event.detail`` the
        reused tokens and whether it is a readmission after a preemption)."""

    @_noop
    def on_first_token(self, event: LifecycleEvent) -> None:
        """A request this policy placed produced its first token (``FIRST_TOKEN``)."""

    @_noop
    def on_preempted(self, event: LifecycleEvent) -> None:
        """An engine preempted a request this policy placed (``PREEMPTED``): it waits for
        readmission at the front of that engine's queue."""

    @_noop
    def on_finished(self, trace: RequestTrace) -> None:
        """A request this policy received reached a terminal state (``trace.terminal_status``)."""

    @_noop
    def on_kv_event(self, event: KVEvent) -> None:
        """An engine stored or removed KV blocks (published at pass commit)."""

    @_noop
    def on_engine_added(self, view: EngineView) -> None:
        """Engine ``view.id`` joined the cluster; it accepts placements from now on (it is
        in ``ctx.engines``)."""

    @_noop
    def on_engine_draining(self, view: EngineView) -> None:
        """Engine ``view.id`` is draining: it finishes what it has and accepts no new
        placement (it left ``ctx.engines``; an offer to it is refused, reason
        ``"engine_draining"``)."""

    @_noop
    def on_engine_removed(self, view: EngineView) -> None:
        """Engine ``view.id`` left the cluster (idle: nothing of it is left to finish); its
        id is never reused."""

    @_noop
    def on_engine_failed(self, event: EngineFailure) -> None:
        """Engine ``event.engine`` crashed (after ``on_engine_removed``): the requests it had
        lost their KV and are back in the request stream (``event.requeued``) or failed."""


class PlacePolicy(BasePolicy):
    """A policy written per request: override ``async def place(request, ctx)``.

    :meth:`run` awaits :meth:`place` for each request, one at a time, in release order. A
    ``place`` that returns without placing the request leaves it held: place it later (for
    example from a coroutine started with ``ctx.spawn``) or it is reported unplaced at the end.
    """

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        """Await :meth:`place` for every request of the stream, in order."""
        async for request in requests:
            await self.place(request, ctx)

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        """Place ``request`` (usually ``await ctx.dispatch(request, engine)``)."""
        raise NotImplementedError(f"{type(self).__name__}.place")


class ChoicePolicy(PlacePolicy):
    """A policy that picks one engine per request: override ``choose(request, ctx) -> int``
    (an engine id, ``view.id`` of one of ``ctx.engines``).

    :meth:`place` dispatches to the chosen engine; when that engine refuses, the request ends
    rejected with the engine's reason. While no engine accepts placements (every engine
    draining or removed), :meth:`place` waits for one to join before it calls :meth:`choose`.
    """

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        """Return the id of the engine to place ``request`` on."""
        raise NotImplementedError(f"{type(self).__name__}.choose")

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        """Dispatch ``request`` to :meth:`choose`'s engine; reject it if that engine refuses."""
        if not ctx.engines:
            await ctx.wait_for_engines()
        placement = await ctx.dispatch(request, self.choose(request, ctx))
        if placement.rejected:
            ctx.reject(request, reason=placement.reason or "rejected")


@attrs.define(eq=False)
class _FunctionChoice(ChoicePolicy):
    fn: ChoiceFunction
    name: str

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        return self.fn(request, ctx.engines)


def from_choice(fn: ChoiceFunction, *, name: str | None = None) -> ChoicePolicy:
    """Adapt a plain choice function into a policy.

    Args:
        fn: ``fn(request, engine_views) -> engine id``, called once per request at its
            release instant with the views of the engines accepting placements.
        name: the policy's name; default the function's ``__name__``.

    Returns:
        A :class:`ChoicePolicy` that dispatches each request to ``fn``'s engine.
    """
    return _FunctionChoice(fn, name if name is not None else str(getattr(fn, "__name__", "choice")))
