"""The policy runtime: the context a policy runs in, and the dispatch handshake's policy side.

A :class:`PolicyRuntime` sits between whatever releases requests (the workload driver, a
tokenizer stage) and a set of engines. It hands requests to the policy through a
:class:`RequestStream`, gives the policy a :class:`PolicyContext`, performs the two-phase
dispatch handshake (offer → tentative or rejection → commit or abort), calls the policy's hooks,
supervises the policy's coroutines, and keeps every request accounted for.

Request states inside the runtime::

    held ──offer──► offered ──commit──► committed ──(engine)──► terminal
     ▲                │  │
     └──abort/reject──┘  └──commit fails──► failed (terminal)
    held ──ctx.reject──► terminal (rejected)

A request still ``held`` when the run ends is *unplaced* and reported by id.

Failure (a commit that raises, an abort that raises, a hook that raises, a policy coroutine
that raises) *poisons* the runtime: the failure is kept in :attr:`PolicyRuntime.failure`, every
later step of the policy (dispatch, offer, sleep, spawn) raises
:class:`RuntimePoisonedError`, and the runner ends the run with a report naming the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar

import attrs
import numpy as np

import simclock
from engines import (
    BlockKeyer,
    EngineView,
    EventKind,
    Journal,
    KVEvent,
    LifecycleEvent,
    Rejection,
    RequestTrace,
    Tentative,
)
from loadgen import Request

from ._cluster import (
    ENGINE_CRASHED,
    ENGINE_REMOVED,
    EngineFailure,
    InactivePlacement,
    Membership,
    MemberState,
)
from ._exceptions import (
    CommitError,
    InvalidWakeupError,
    PlacementError,
    PolicyHookError,
    RuntimePoisonedError,
)
from ._stale import StaleInformation, Staleness

__all__ = (
    "EngineHandle",
    "Offer",
    "Placement",
    "Policy",
    "PolicyContext",
    "PolicyRuntime",
    "RequestStream",
    "policy_name",
)

T = TypeVar("T")

_MAX_INSTANT_NS = 2**63 - 1  # the virtual clock counts int64 nanoseconds

Outcome = Literal["committed", "rejected", "aborted"]


class EngineHandle(Protocol):
    """What the runtime needs of an engine: its id, its view and the handshake's engine side.

    :class:`engines.Engine` satisfies it; so can a test double.
    """

    @property
    def index(self) -> int:
        """The engine's stable id (its index in the topology)."""
        ...

    @property
    def view(self) -> EngineView:
        """The engine's read-only view."""
        ...

    def offer(
        self, request: Request, *, estimate: bool = False, inform: bool = True
    ) -> Tentative | Rejection:
        """Check admission of ``request``; return a tentative placement or a rejection
        (with ``estimate``, the tentative carries the engine's admission estimate; without
        ``inform``, the caller commits or aborts at once and the tentative reports nothing)."""
        ...

    def commit(self, tentative: Tentative) -> None:
        """Accept the tentatively placed request for real (rolls back and raises on failure)."""
        ...

    def abort(self, tentative: Tentative, reason: str) -> None:
        """Roll a tentative placement back."""
        ...

    def subscribe_kv(self, callback: Callable[[KVEvent], None]) -> None:
        """Call ``callback`` with every KV event the engine publishes."""
        ...


class Policy(Protocol):
    """A placement policy: an object whose ``run`` coroutine receives requests and places them.

    ``run`` iterates ``requests`` (``async for request in requests``) until the stream ends and
    places each request with ``await ctx.dispatch(request, engine)``, possibly later, possibly
    from a coroutine started with ``ctx.spawn``. A policy may also define any of these
    synchronous hooks, which the runtime calls when present:

    - ``on_committed(placement)``: an engine accepted a placement;
    - ``on_aborted(placement)``: a tentative placement was rolled back (``placement.reason``);
    - ``on_admitted(event)``, ``on_first_token(event)``, ``on_preempted(event)``: an engine of
      this runtime admitted, produced the first token of, or preempted a request (the
      ``ADMITTED``, ``FIRST_TOKEN`` and ``PREEMPTED`` lifecycle events, at their instants);
    - ``on_finished(trace)``: a placed request reached a terminal state;
    - ``on_kv_event(event)``: an engine stored or removed KV blocks;
    - ``on_engine_added(view)``, ``on_engine_draining(view)``, ``on_engine_removed(view)``:
      the cluster changed (:mod:`policies._cluster`); ``ctx.engines`` already shows it;
    - ``on_engine_failed(event)``: an engine crashed (:class:`policies.EngineFailure`).

    :class:`policies.BasePolicy` provides no-op hooks to subclass.
    """

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        """Receive requests from ``requests`` and place them through ``ctx``."""
        ...


def policy_name(policy: object) -> str:
    """Return the name a policy goes by in errors and waiter names.

    Its ``name`` attribute when it is a non-empty string, else its class name.
    """
    name = getattr(policy, "name", None)
    if isinstance(name, str) and name:
        return name
    return type(policy).__name__


@attrs.frozen
class Placement:
    """The outcome of one offer of a request to an engine.

    Attributes:
        request_id: the request offered.
        engine: the id of the engine offered.
        outcome: ``"committed"`` (the engine accepted it), ``"rejected"`` (the engine refused
            the offer) or ``"aborted"`` (the tentative placement was rolled back).
        reason: the rejection or abort reason; None when committed.
        time_ns: the virtual instant of the outcome.
    """

    request_id: str
    engine: int
    outcome: Outcome
    reason: str | None
    time_ns: int

    @property
    def committed(self) -> bool:
        """Whether the engine accepted the request."""
        return self.outcome == "committed"

    @property
    def rejected(self) -> bool:
        """Whether the engine refused the offer."""
        return self.outcome == "rejected"


@attrs.define(eq=False)
class RequestStream:
    """The requests released to a policy, in release order; an async iterator.

    ``async for request in requests`` yields each request once and ends when the runtime
    closes the stream (no request will ever be released again).
    """

    _items: deque[Request] = attrs.field(factory=deque, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _waiters: list[asyncio.Future[None]] = attrs.field(factory=list, init=False)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Request:
        while not self._items:
            if self._closed:
                raise StopAsyncIteration
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        return self._items.popleft()

    def get_nowait(self) -> Request | None:
        """Return the next queued request without waiting, or None if none is queued."""
        return self._items.popleft() if self._items else None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        """Whether no request will ever be added again."""
        return self._closed

    def _put(self, request: Request) -> None:
        if self._closed:
            raise simclock.InternalError(f"request {request.id!r} released after stream end")
        self._items.append(request)
        self._wake()

    def _close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


RequestStatus = Literal["held", "offered", "committed", "failed", "terminal"]


@attrs.define(eq=False)
class _RequestState:
    request: Request
    received_ns: int | None
    status: RequestStatus = "held"
    engine: int | None = None
    last_rejection: Placement | None = None
    finished: bool = False


@attrs.define(eq=False)
class Offer:
    """One tentative placement of a request on an engine: an async context manager.

    ``async with ctx.offer(request, engine) as offer:`` makes the offer on entry. If the engine
    refused, :attr:`placement` says so (``offer.placement.rejected``, with the reason); otherwise
    :attr:`tentative` says what the engine would do (prefix hit, queue position, estimated
    admission and first token) and the body may ``await offer.commit()`` or
    ``await offer.abort(reason)``. An offer left neither committed nor aborted when the block
    ends is aborted (reason ``"scope exit"``, or ``"scope exit: <error>"`` when the block
    raised). An offer with a timeout that is still open ``timeout_ms`` after the engine made it
    expires: the engine withdraws it (``ABORTED``, reason ``"expired"``), ``on_aborted`` is
    called and :attr:`placement` is aborted with that reason; a commit that arrives later
    returns that placement.

    With a dispatch latency ``L`` (:attr:`PolicyRuntime.dispatch_latency_ns`), entering takes
    ``2 L`` (the offer reaches the engine after ``L``, its answer comes back after another
    ``L``) and a commit reaches the engine ``L`` after it is sent; an abort is immediate.

    States: ``new`` → (enter) ``sent`` (latency > 0: the offer and its answer travel) →
    ``open`` | ``rejected`` | ``expired``; ``open`` → ``committing`` (latency > 0: the commit
    travels) → ``committed`` | ``failed`` (commit raised) | ``expired``; ``open`` →
    ``aborted`` | ``expired``.
    """

    _runtime: PolicyRuntime
    request: Request
    engine: int
    timeout_ms: float | None = attrs.field(default=None, kw_only=True)
    _state: Literal[
        "new",
        "sent",
        "open",
        "committing",
        "rejected",
        "committed",
        "aborted",
        "failed",
        "expired",
    ] = attrs.field(default="new", init=False)
    _tentative: Tentative | None = attrs.field(default=None, init=False)
    _placement: Placement | None = attrs.field(default=None, init=False)
    _estimate: bool = attrs.field(default=True, init=False)
    _at_once: bool = attrs.field(default=False, init=False)
    _expiry: asyncio.Task[None] | None = attrs.field(default=None, init=False)

    @property
    def tentative(self) -> Tentative | None:
        """The engine's tentative placement (None before the answer, or when refused)."""
        return self._tentative

    @property
    def state(self) -> str:
        """The offer's state (see the class docstring)."""
        return self._state

    @property
    def placement(self) -> Placement:
        """The outcome so far.

        Raises:
            PlacementError: the offer is still open or was never made.
        """
        if self._placement is None:
            raise PlacementError(
                f"offer of request {self.request.id!r} to engine {self.engine} has no outcome yet"
            )
        return self._placement

    async def commit(self) -> Placement:
        """Confirm the tentative placement; the engine accepts the request.

        Returns:
            The committed placement.

        Raises:
            PlacementError: the offer is not open.
            CommitError: the engine failed to commit (it rolled back; the runtime is poisoned).
            PolicyHookError: ``on_committed`` raised (the runtime is poisoned).
            RuntimePoisonedError: the runtime failed earlier.
        """
        runtime = self._runtime
        if runtime.dispatch_latency_ns:
            return await runtime._commit_delayed(self)
        return runtime._commit(self)

    async def abort(self, reason: str) -> Placement:
        """Roll the tentative placement back.

        Raises:
            PlacementError: the offer is not open.
            RuntimePoisonedError: the engine failed to abort, or the runtime failed earlier.
        """
        return self._runtime._abort(self, reason)

    async def __aenter__(self) -> Offer:
        runtime = self._runtime
        if runtime.dispatch_latency_ns:
            await runtime._offer_delayed(self)
        else:
            runtime._offer(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state != "open":
            return
        reason = "scope exit" if exc is None else f"scope exit: {type(exc).__name__}"
        try:
            self._runtime._abort(self, reason, check_alive=False)
        except BaseException as cleanup:
            if exc is None:
                raise
            # Keep both: the body's error goes on, naming the cleanup failure; the cleanup
            # failure has poisoned the runtime and is reported with the run.
            exc.add_note(
                f"during cleanup: abort of request {self.request.id!r} on engine {self.engine} "
                f"raised {type(cleanup).__name__}: {cleanup}"
            )


@attrs.define(eq=False)
class PolicyContext:
    """Everything a policy may use: engine views, the clock, randomness, tasks and dispatch.

    One context per policy run. Built-in policies use nothing else.

    Attributes:
        name: the policy's name (used in waiter names and errors).
        rng: the policy's own seeded random generator (a child stream of the run seed).
    """

    _runtime: PolicyRuntime
    name: str
    rng: np.random.Generator

    @property
    def engines(self) -> tuple[EngineView, ...]:
        """The read-only views of the engines accepting placements now, in id order.

        Engines that are draining or removed are left out; ``view.id`` is the id to
        dispatch to. In a cluster that never changes, ``ctx.engines[i].id == i``.
        """
        return self._runtime.views

    async def wait_for_engines(self) -> None:
        """Return once at least one engine accepts placements (at once if one does now).

        Raises:
            RuntimePoisonedError: the runtime failed earlier.
        """
        self._runtime.check_alive()
        while not self._runtime.views:
            waiter = asyncio.get_running_loop().create_future()
            self._runtime._engine_waiters.append(waiter)
            await waiter
            self._runtime.check_alive()

    def engine_state(self, engine: int) -> MemberState | None:
        """The state of engine ``engine`` (``"active"``, ``"draining"`` or ``"removed"``),
        or None if this policy never had it."""
        return self._runtime.membership.state(engine)

    def block_keys(self, request: Request, block_size: int) -> tuple[int, ...]:
        """Return the chained keys of ``request``'s full prompt blocks at ``block_size``.

        The keys compare across engines; pass them to ``EngineView.prefix_overlap``.
        """
        return self._runtime.block_keys(request, block_size)

    def prefix_overlap_tokens(self, request: Request, engine: int) -> int:
        """Return how many prompt tokens of ``request`` engine ``engine`` (an id) holds
        cached now.

        At most ``input_length - 1``, as in the engine's own lookup (REFERENCE-engine §4.3).
        """
        view = self._runtime.view(engine)
        size = view.block_size
        blocks = view.prefix_overlap(self.block_keys(request, size))
        cap = (request.input_length - 1) // size
        return min(blocks, cap) * size

    def expected_prefix_overlap_tokens(self, request: Request, engine: int) -> int:
        """Return how many prompt tokens of ``request`` engine ``engine`` holds cached now or
        will hold once the requests placed there (and its open offers) compute their prompts
        (``EngineView.expected_prefix_overlap``): no lag within an instant, unlike
        :meth:`prefix_overlap_tokens`. At most ``input_length - 1``.
        """
        view = self._runtime.view(engine)
        size = view.block_size
        blocks = view.expected_prefix_overlap(self.block_keys(request, size))
        cap = (request.input_length - 1) // size
        return min(blocks, cap) * size

    def now_ns(self) -> int:
        """Return the current virtual time in integer nanoseconds."""
        return simclock.now_ns()

    def now_ms(self) -> float:
        """Return the current virtual time in milliseconds."""
        return simclock.now_ns() / 1_000_000

    async def sleep_until_ns(self, when_ns: int) -> None:
        """Suspend until virtual instant ``when_ns`` (a policy wakeup).

        Raises:
            InvalidWakeupError: ``when_ns`` is not an int, or is earlier than now.
            RuntimePoisonedError: the runtime failed earlier.
        """
        self._runtime.check_alive()
        if isinstance(when_ns, bool) or not isinstance(when_ns, int):
            raise InvalidWakeupError(
                f"policy {self.name!r}: wakeup time must be an int of nanoseconds, got {when_ns!r}"
            )
        now = simclock.now_ns()
        if when_ns < now:
            raise InvalidWakeupError(
                f"policy {self.name!r}: wakeup at {when_ns} ns is earlier than now ({now} ns)"
            )
        if when_ns > _MAX_INSTANT_NS:
            raise InvalidWakeupError(
                f"policy {self.name!r}: wakeup at {when_ns} ns is past the virtual clock's "
                f"range ({_MAX_INSTANT_NS} ns, about 292 years)"
            )
        await simclock.sleep_until_ns(
            when_ns, waiter=f"policy:{self.name}", kind=simclock.WakeupKind.POLICY_WAKEUP
        )
        self._runtime.check_alive()
        watch = self._runtime.wakeup_watch
        if watch is not None:
            watch(f"policy:{self.name}")

    async def sleep_ns(self, delay_ns: int) -> None:
        """Suspend for ``delay_ns`` nanoseconds of virtual time (a policy wakeup).

        Raises:
            InvalidWakeupError: ``delay_ns`` is not an int, or is negative.
            RuntimePoisonedError: the runtime failed earlier.
        """
        self._runtime.check_alive()
        if isinstance(delay_ns, bool) or not isinstance(delay_ns, int):
            raise InvalidWakeupError(
                f"policy {self.name!r}: delay must be an int of nanoseconds, got {delay_ns!r}"
            )
        if delay_ns < 0:
            raise InvalidWakeupError(
                f"policy {self.name!r}: delay must be >= 0 ns, got {delay_ns} ns"
            )
        await self.sleep_until_ns(simclock.now_ns() + delay_ns)

    async def sleep_ms(self, delay_ms: float) -> None:
        """Suspend for ``delay_ms`` milliseconds (rounded to the nearest nanosecond).

        Raises:
            InvalidWakeupError: ``delay_ms`` is not finite, or is negative.
            RuntimePoisonedError: the runtime failed earlier.
        """
        if not math.isfinite(delay_ms) or delay_ms < 0:
            raise InvalidWakeupError(
                f"policy {self.name!r}: delay must be finite and >= 0 ms, got {delay_ms!r}"
            )
        await self.sleep_ns(round(delay_ms * 1_000_000))

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` as a background task of the policy (periodic work, held requests).

        The runtime supervises it: if it raises, the runtime is poisoned and the run ends with
        the error; when the run ends it is cancelled.

        Raises:
            RuntimePoisonedError: the runtime failed earlier (``coro`` is closed).
        """
        return self._runtime.spawn(coro, name=name)

    def offer(self, request: Request, engine: int, *, timeout_ms: float | None = None) -> Offer:
        """Return the offer of ``request`` to engine ``engine``; enter it with ``async with``.

        Args:
            request: the request.
            engine: the engine's index.
            timeout_ms: expire the offer this long after the engine made it, if it is still
                open; default the policy's ``offer_timeout_ms`` (None: never).

        Raises:
            PlacementError: ``timeout_ms`` is not a finite number >= 0.
        """
        if timeout_ms is not None:
            _check_timeout(timeout_ms, "timeout_ms")
        return Offer(self._runtime, request, engine, timeout_ms=timeout_ms)

    async def dispatch(self, request: Request, engine: int) -> Placement:
        """Offer ``request`` to engine ``engine`` and commit it unless the engine refuses.

        Returns:
            The placement: ``committed``, or ``rejected`` with the engine's reason (the request
            stays with the policy, which may try another engine or :meth:`reject` it).

        Raises:
            PlacementError: unknown engine or request, or the request is already placed.
            CommitError: the engine failed to commit (the runtime is poisoned).
            PolicyHookError: a hook raised (the runtime is poisoned).
            RuntimePoisonedError: the runtime failed earlier.
        """
        runtime = self._runtime
        offer = Offer(runtime, request, engine)
        offer._estimate = False  # the tentative is never shown
        if runtime.dispatch_latency_ns:
            async with offer:
                if offer._state == "open":
                    await offer.commit()
            return offer.placement
        # ``async with self.offer(...)`` and ``await offer.commit()``, without the three
        # coroutines: none of them ever suspends, so the commit (or the abort of a failed
        # one) follows the offer at once: the engine need not inform it.
        offer._at_once = True
        runtime._offer(offer)
        if offer._state == "open":
            try:
                runtime._commit(offer)
            except BaseException as error:
                await offer.__aexit__(type(error), error, error.__traceback__)
                raise
        return offer.placement

    def release_ns(self, request: Request) -> int:
        """Return the virtual instant, in nanoseconds, at which ``request`` was released.

        The release instant is when the workload handed the request on (its arrival rule
        resolved against the run: a timestamp, or a dependency's completion plus a delay), before
        any tokenization stage; the same instant the report calls its arrival. A request that
        waited with the policy, or that reaches a decode pool after its prefill, keeps it.

        Raises:
            PlacementError: the request was never released to this policy, or it has ended and
                its release instant is no longer kept (read ``trace.arrival_ns`` in
                ``on_finished`` instead).
        """
        return self._runtime.release_ns(request)

    def release_ms(self, request: Request) -> float:
        """Return :meth:`release_ns` in milliseconds."""
        return self._runtime.release_ns(request) / 1_000_000

    def reject(self, request: Request, *, reason: str) -> None:
        """End ``request`` as rejected by the policy (it will never be placed).

        Raises:
            PlacementError: the request is not held by the policy.
            RuntimePoisonedError: the runtime failed earlier.
        """
        self._runtime.reject(request, reason=reason)


@attrs.define(eq=False)
class PolicyRuntime:
    """Runs one policy over a set of engines and accounts for every request it receives.

    Lifecycle: build it, :meth:`start` it inside the running virtual loop, :meth:`submit`
    requests as they are released, :meth:`close` the stream when no more will come, tell it of
    terminal requests with :meth:`request_terminal`, and :meth:`shutdown` it at the end.

    Args:
        policy: the policy object.
        engines: the engines it starts with, in increasing id order (``0 .. n-1`` for an
            aggregated topology); :meth:`add_engine`, :meth:`drain_engine` and
            :meth:`remove_engine` change the set (:mod:`policies._cluster`).
        journal: the run's journal; the engines record the handshake's events (OFFERED,
            COMMITTED, ABORTED, REJECTED); the runtime records REJECTED when the policy gives
            a request up (detail ``by="policy"``) and FAILED when a commit fails.
        keyer: the run's block keyer.
        rng: the policy's random generator.
        on_poison: called once with the failure when the runtime is poisoned.
        dispatch_latency_ns: the router-to-engine latency of each phase of the handshake
            (offer, answer, commit), in ns; 0 (the default) makes the handshake instantaneous.
        staleness: how late the policy's views and KV events are (:mod:`policies._stale`);
            None (the default) or all zero: live. Read by :meth:`start`.
    """

    policy: Policy
    engines: tuple[EngineHandle, ...]
    journal: Journal
    keyer: BlockKeyer
    rng: np.random.Generator
    on_poison: Callable[[BaseException], None] | None = None
    dispatch_latency_ns: int = attrs.field(default=0, kw_only=True)
    staleness: Staleness | None = attrs.field(default=None, kw_only=True)
    name: str = attrs.field(init=False)
    offer_timeout_ms: float | None = attrs.field(default=None, init=False)
    expiries: int = attrs.field(default=0, init=False)
    views: tuple[EngineView, ...] = attrs.field(init=False)
    membership: Membership = attrs.field(init=False)
    stream: RequestStream = attrs.field(factory=RequestStream, init=False)
    context: PolicyContext = attrs.field(init=False)
    failure: BaseException | None = attrs.field(default=None, init=False)
    offers: int = attrs.field(default=0, init=False)
    commits: int = attrs.field(default=0, init=False)
    aborts: int = attrs.field(default=0, init=False)
    rejections: int = attrs.field(default=0, init=False)
    _requests: dict[str, _RequestState] = attrs.field(factory=dict, init=False)
    _finished: dict[tuple[RequestStatus, int | None], _RequestState] = attrs.field(
        factory=dict, init=False
    )
    _open: dict[str, Offer] = attrs.field(factory=dict, init=False)
    _tasks: list[asyncio.Task[Any]] = attrs.field(factory=list, init=False)
    _main: asyncio.Task[None] | None = attrs.field(default=None, init=False)
    _unsettled: int = attrs.field(default=0, init=False)
    # the expiry timers, in the order they were armed (a dict: cancelled in that order)
    _expiry_tasks: dict[asyncio.Task[None], None] = attrs.field(factory=dict, init=False)
    _kv_hooked: bool = attrs.field(default=False, init=False)
    _engine_waiters: list[asyncio.Future[None]] = attrs.field(factory=list, init=False)
    _stale: StaleInformation | None = attrs.field(default=None, init=False)

    #: Every timed piece of the run's work is an engine's: idle engines and no policy
    #: wakeup mean no progress.
    runs_timed_work = False
    wakeup_watch: Callable[[str], None] | None = attrs.field(default=None, init=False)
    """Called with the waiter's label after every policy wakeup; may raise to end the run
    (the replay's no-progress check)."""

    def __attrs_post_init__(self) -> None:
        self.membership = Membership.of(self.engines)
        latency = self.dispatch_latency_ns
        if isinstance(latency, bool) or not isinstance(latency, int) or latency < 0:
            raise PlacementError(f"dispatch_latency_ns must be an int >= 0, got {latency!r}")
        timeout = getattr(self.policy, "offer_timeout_ms", None)
        if timeout is not None:
            _check_timeout(timeout, "offer_timeout_ms")
            self.offer_timeout_ms = float(timeout)
        self.name = policy_name(self.policy)
        self.views = self.membership.views
        self.context = PolicyContext(self, self.name, self.rng)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the policy's ``run`` coroutine and subscribe its KV and lifecycle hooks
        (inside the loop)."""
        hook = _hook(self.policy, "on_kv_event")
        staleness = self.staleness
        if staleness is not None and not staleness.is_empty:
            # what the policy sees lags (policies._stale); the KV events reach it late
            delayed = bool(staleness.kv_event_delay_ns)
            self._stale = StaleInformation(
                staleness, self.journal, self._kv_event if delayed and hook is not None else None
            )
            handles = map(self.membership.handle, self.membership.ids())
            self._stale.start(handle.view for handle in handles if handle is not None)
            self._refresh_views()
            if delayed:
                hook = None
        if hook is not None:
            self._kv_hooked = True
            for engine in self.engines:
                engine.subscribe_kv(self._kv_event)
        lifecycle = {
            kind: (name, found)
            for kind, name in _LIFECYCLE_HOOKS.items()
            if (found := _hook(self.policy, name)) is not None
        }
        if lifecycle:
            mine = self.membership.state  # every engine this runtime ever had

            def on_event(event: LifecycleEvent) -> None:
                if event.engine is not None and mine(event.engine) is not None:
                    name, hook = lifecycle[event.kind]
                    self._call_hook(name, hook, event)

            self.journal.subscribe(on_event, kinds=list(lifecycle))
        self._main = self.spawn(self.policy.run(self.stream, self.context), name="run")

    def submit(self, request: Request) -> None:
        """Hand a released request to the policy.

        Raises:
            PlacementError: a request with the same id was submitted before.
        """
        if request.id in self._requests:
            raise PlacementError(f"request {request.id!r} was submitted twice")
        self._requests[request.id] = _RequestState(request, _received_ns())
        self._unsettled += 1
        self.stream._put(request)

    def close(self) -> None:
        """Tell the policy that no more requests will be released (its stream ends)."""
        self.stream._close()

    @property
    def policy_finished(self) -> bool:
        """Whether the policy's ``run`` coroutine and all its spawned tasks have finished."""
        return all(task.done() for task in self._tasks)

    @property
    def unsettled(self) -> int:
        """Requests received that are neither terminal nor committed to an engine."""
        return self._unsettled

    def status(self, request_id: str) -> RequestStatus | None:
        """Return the runtime's status of a request (None if never submitted).

        ``held``: with the policy; ``offered``: an offer is open; ``committed``: an engine has
        it; ``failed``: its commit failed; ``terminal``: it ended.
        """
        state = self._requests.get(request_id)
        return None if state is None else state.status

    def held_request_ids(self) -> list[str]:
        """Ids of the requests the policy holds (received, not placed, not ended), in order."""
        return [rid for rid, state in self._requests.items() if state.status in ("held", "offered")]

    def request_terminal(self, trace: RequestTrace) -> None:
        """Note that a request reached a terminal state; calls the policy's ``on_finished``."""
        state = self._requests.get(trace.request_id)
        if state is None or state.finished:
            return
        state.finished = True
        if state.status in ("held", "offered"):
            self._settle()
        if state.status != "failed":
            state.status = "terminal"
        if trace.request_id not in self._open:
            # A finished request with no open offer only ever answers ``status`` and the
            # refusals of ``reject`` / ``offer`` (which read its status and engine, and change
            # nothing): one shared state per (status, engine) stands in for it, so a long run
            # keeps no per-request state for what has ended.
            key = (state.status, state.engine)
            shared = self._finished.get(key)
            if shared is None:
                shared = self._finished[key] = state
            self._requests[trace.request_id] = shared
        hook = _hook(self.policy, "on_finished")
        if hook is not None:
            self._call_hook("on_finished", hook, trace)

    async def shutdown(self) -> None:
        """Cancel the policy's tasks and abort every offer still open. Never raises."""
        for task in self._tasks:
            if not task.done():
                task.cancel()
        for task in list(self._tasks):
            if not task.done():
                # Its failure, if any, was recorded by the done callback.
                with contextlib.suppress(BaseException):
                    await task
        for task in list(self._expiry_tasks):
            task.cancel()
        if self._stale is not None:
            self._stale.close()
        for offer in list(self._open.values()):
            if offer._state != "open":
                continue
            # A failing abort poisons the runtime; the failure is reported with the run.
            with contextlib.suppress(BaseException):
                self._abort(offer, "runtime shutdown", check_alive=False)

    # -- context services ---------------------------------------------------------------------

    def check_alive(self) -> None:
        """Raise :class:`RuntimePoisonedError` if the runtime was poisoned."""
        if self.failure is not None:
            raise RuntimePoisonedError(
                f"policy runtime {self.name!r} is poisoned by an earlier failure: "
                f"{type(self.failure).__name__}: {self.failure}"
            ) from self.failure

    def view(self, engine: int) -> EngineView:
        """Return the view of engine ``engine`` (an id), in any state.

        Raises:
            PlacementError: no such engine.
        """
        handle = (
            None
            if isinstance(engine, bool) or not isinstance(engine, int)
            else self.membership.handle(engine)
        )
        if handle is None:
            raise self.membership.unknown(engine)
        return handle.view if self._stale is None else self._stale.wrap(handle.view)

    def _refresh_views(self) -> None:
        views = self.membership.views
        self.views = views if self._stale is None else self._stale.wrap_all(views)

    # -- the cluster ------------------------------------------------------------------------

    def add_engine(self, engine: EngineHandle) -> None:
        """An engine joined: it accepts placements from now on; calls ``on_engine_added``.

        Raises:
            PlacementError: its id is not higher than every id this runtime had.
        """
        self.membership.add(engine)
        if self._stale is not None:
            self._stale.watch(engine.view)
        self._refresh_views()
        if self._kv_hooked:
            engine.subscribe_kv(self._kv_event)
        self._cluster_hook("on_engine_added", engine)
        waiters, self._engine_waiters = self._engine_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def drain_engine(self, engine: int) -> None:
        """Engine ``engine`` accepts no new placement from now on; calls
        ``on_engine_draining``.

        Raises:
            PlacementError: no such engine, or it was removed.
        """
        handle = self.membership.set_state(engine, "draining")
        self._refresh_views()
        self._cluster_hook("on_engine_draining", handle)

    def remove_engine(self, engine: int) -> None:
        """Engine ``engine`` left the cluster; calls ``on_engine_removed``.

        Raises:
            PlacementError: no such engine, or it was removed already.
        """
        handle = self.membership.set_state(engine, "removed")
        self._refresh_views()
        self._cluster_hook("on_engine_removed", handle)

    def fail_engine(
        self,
        engine: int,
        request_ids: Sequence[str],
        *,
        requeue: bool,
        lost: Sequence[str] = (),
    ) -> EngineFailure:
        """Engine ``engine`` crashed and dropped ``request_ids`` (:meth:`engines.Engine.crash`):
        it is removed (``on_engine_removed``), its open offers are withdrawn (``on_aborted``,
        reason ``"engine_crashed"``), and each request it had goes back to the request stream
        (``requeue``; recorded ``REQUEUED``) or fails (``FAILED``, reason
        ``"engine_crashed"``); then ``on_engine_failed`` is called. ``lost``: requests it
        had that another runtime gives back (listed in the event after ``request_ids``).

        Raises:
            PlacementError: no such engine, or it was removed already.
            simclock.InternalError: a request was not committed to it by this runtime.
        """
        handle = self.membership.set_state(engine, "removed")
        self._refresh_views()
        withdrawn = [
            offer.request.id
            for offer in list(self._open.values())
            if offer.engine == engine and self._withdraw(offer, ENGINE_CRASHED)
        ]
        for request_id in request_ids:
            state = self._requests.get(request_id)
            if state is None or state.status != "committed" or state.engine != engine:
                raise simclock.InternalError(
                    f"engine {engine} crashed with request {request_id!r}, which this runtime "
                    f"did not commit to it ({None if state is None else state.status})"
                )
            self.give_back(request_id, engine, requeue=requeue, reason=ENGINE_CRASHED)
        event = EngineFailure(
            simclock.now_ns(), engine, (*request_ids, *lost), requeue, tuple(withdrawn)
        )
        self._cluster_hook("on_engine_removed", handle)
        hook = _hook(self.policy, "on_engine_failed")
        if hook is not None:
            self._call_hook("on_engine_failed", hook, event)
        return event

    def give_back(self, request_id: str, engine: int | None, *, requeue: bool, reason: str) -> None:
        """A committed request lost its engine ``engine`` (and its KV): it goes back to the
        request stream (``requeue``; recorded ``REQUEUED``) or fails (``FAILED``), with
        ``reason``.

        Raises:
            simclock.InternalError: this runtime did not commit the request.
        """
        state = self._requests.get(request_id)
        if state is None or state.status != "committed":
            raise simclock.InternalError(
                f"request {request_id!r} cannot be given back: this runtime did not commit it "
                f"({None if state is None else state.status})"
            )
        if requeue:
            state.status = "held"
            state.engine = None
            state.last_rejection = None
            self._unsettled += 1
            self._record(EventKind.REQUEUED, request_id, engine, (("reason", reason),))
            self.stream._put(state.request)
        else:
            self._record(EventKind.FAILED, request_id, engine, (("reason", reason),))

    def withdraw(self, request_id: str, reason: str) -> bool:
        """Withdraw the open offer of ``request_id`` (``on_aborted`` is told ``reason``; the
        request is held again). Returns whether an open offer was withdrawn."""
        offer = self._open.get(request_id)
        return offer is not None and self._withdraw(offer, reason)

    def forget(self, request_id: str) -> None:
        """A committed request left this runtime (another runtime gives it back): it may be
        submitted again.

        Raises:
            simclock.InternalError: this runtime did not commit the request.
        """
        state = self._requests.get(request_id)
        if state is None or state.status != "committed":
            raise simclock.InternalError(
                f"request {request_id!r} cannot be forgotten: this runtime did not commit it "
                f"({None if state is None else state.status})"
            )
        del self._requests[request_id]

    def _cluster_hook(self, name: str, engine: EngineHandle) -> None:
        hook = _hook(self.policy, name)
        if hook is not None:
            view = engine.view if self._stale is None else self._stale.wrap(engine.view)
            self._call_hook(name, hook, view)

    def block_keys(self, request: Request, block_size: int) -> tuple[int, ...]:
        """Return the chained block keys of ``request`` at ``block_size`` (the keyer
        remembers them, for the policy and the engines alike)."""
        return self.keyer.block_keys(request, block_size)

    def release_ns(self, request: Request) -> int:
        """Return the instant ``request`` was released (see :meth:`PolicyContext.release_ns`).

        The run's journal has it as the trace's arrival (the replay runner records ``ARRIVED``
        at release); a runtime fed without one takes the instant :meth:`submit` received it.
        """
        state = self._state(request)
        trace = self.journal.traces.get(request.id)
        if trace is not None and trace.arrival_ns is not None:
            return trace.arrival_ns
        if state.finished or state.received_ns is None:
            raise PlacementError(
                f"request {request.id!r} has ended; its release instant is no longer kept"
                if state.finished
                else f"request {request.id!r} was submitted outside the virtual loop"
            )
        return state.received_ns

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Start a supervised background task (see :meth:`PolicyContext.spawn`)."""
        if self.failure is not None:
            coro.close()
            self.check_alive()
        label = f"policy:{self.name}:{name or f'task{len(self._tasks)}'}"
        task = asyncio.get_running_loop().create_task(coro, name=label)
        self._tasks.append(task)
        task.add_done_callback(self._task_done)
        return task

    def reject(self, request: Request, *, reason: str) -> None:
        """End a held request as rejected by the policy (see :meth:`PolicyContext.reject`)."""
        self.check_alive()
        state = self._state(request)
        if state.status != "held":
            raise PlacementError(f"request {request.id!r} cannot be rejected: it is {state.status}")
        state.status = "terminal"
        self._settle()
        last = state.last_rejection
        self._record(
            EventKind.REJECTED,
            request.id,
            None if last is None else last.engine,
            (("reason", reason), ("by", "policy")),
        )

    # -- the handshake, policy side -----------------------------------------------------------

    def _offer_check(self, offer: Offer) -> tuple[EngineHandle | None, _RequestState]:
        """Check that ``offer`` can be made; return its engine (None: the engine accepts no
        placements, draining or removed) and the request's state."""
        self.check_alive()
        request = offer.request
        engine_id = offer.engine
        try:
            engine = (
                None if isinstance(engine_id, bool) else self.membership.accepting.get(engine_id)
            )
        except TypeError:  # unhashable: not an id
            engine = None
        if engine is None:
            self.view(engine_id)  # raises for anything that is not a member's id
        state = self._state(request)
        if state.status != "held":
            raise PlacementError(
                f"request {request.id!r} cannot be offered to engine {offer.engine}: "
                f"it is {state.status}"
                + (f" on engine {state.engine}" if state.engine is not None else "")
            )
        if offer._state != "new":
            raise PlacementError(f"offer of request {request.id!r} was already made")
        self.offers += 1
        return engine, state

    def _ask(self, engine: EngineHandle, offer: Offer) -> Tentative | Rejection:
        """The engine's answer to ``offer`` (with an estimate when the policy sees it)."""
        if offer._estimate:
            return engine.offer(offer.request, estimate=True)
        if offer._at_once:
            return engine.offer(offer.request, inform=False)
        return engine.offer(offer.request)

    def _offer(self, offer: Offer) -> None:
        engine, state = self._offer_check(offer)
        if engine is None:
            self._refuse(offer, state)
            return
        self._answered(offer, state, self._ask(engine, offer))

    def _answered(self, offer: Offer, state: _RequestState, result: Tentative | Rejection) -> None:
        """The engine's answer reached the policy: the offer is open, or refused."""
        request = offer.request
        if isinstance(result, Rejection):
            self.rejections += 1
            offer._state = "rejected"
            offer._placement = Placement(
                request.id, offer.engine, "rejected", result.reason, simclock.now_ns()
            )
            state.last_rejection = offer._placement
            state.status = "held"
            state.engine = None
            self._open.pop(request.id, None)
            return
        if offer._tentative is None:
            offer._tentative = result
            self._arm_expiry(offer)
        offer._state = "open"
        state.status = "offered"
        state.engine = offer.engine
        self._open[request.id] = offer

    async def _travel(self) -> None:
        """One phase of the handshake crossing the router-engine link."""
        await simclock.sleep_ns(
            self.dispatch_latency_ns,
            waiter=f"policy:{self.name}:dispatch",
            kind=simclock.WakeupKind.POLICY_WAKEUP,
        )
        self.check_alive()

    async def _offer_delayed(self, offer: Offer) -> None:
        """Make ``offer`` across the link: the engine answers ``L`` after it is sent, and the
        answer reaches the policy ``L`` later (the engine holds its promise meanwhile)."""
        engine, state = self._offer_check(offer)
        if engine is None:  # the runtime knows the engine takes no placements: refused now
            self._refuse(offer, state)
            return
        request = offer.request
        offer._state = "sent"
        state.status = "offered"
        state.engine = offer.engine
        self._open[request.id] = offer
        result: Tentative | Rejection | None = None
        try:
            await self._travel()
            if self.membership.state(offer.engine) == "removed":
                # the engine left (or crashed) while the offer travelled: nobody answers
                result = Rejection(
                    offer.engine, request.id, ENGINE_REMOVED, f"engine {offer.engine} is removed"
                )
            else:
                result = self._ask(engine, offer)
            if isinstance(result, Tentative):
                offer._tentative = result
                self._arm_expiry(offer)
            await self._travel()
        except BaseException:
            if offer._state == "sent":
                # cancelled (or poisoned) in flight: nothing of the offer remains
                offer._state = "aborted"
                state.status = "held"
                state.engine = None
                self._open.pop(request.id, None)
                self._disarm(offer)
                if offer._tentative is not None:
                    with contextlib.suppress(Exception):
                        engine.abort(offer._tentative, "withdrawn in flight")
            raise
        if offer._state != "sent":  # expired while the answer travelled
            return
        self._answered(offer, state, result)

    async def _commit_delayed(self, offer: Offer) -> Placement:
        """Send the commit of ``offer``; the engine takes it ``L`` later (unless the offer
        expired meanwhile: the expiry's placement is returned)."""
        self.check_alive()
        if offer._state != "open" or offer._tentative is None:
            raise PlacementError(
                f"offer of request {offer.request.id!r} to engine {offer.engine} cannot be "
                f"committed: it is {offer._state}"
            )
        offer._state = "committing"
        try:
            await self._travel()
        except BaseException:
            if offer._state == "committing":
                offer._state = "open"
            raise
        if offer.state == "expired":
            return offer.placement
        offer._state = "open"
        return self._commit(offer)

    def _arm_expiry(self, offer: Offer) -> None:
        """Start the timer of an offer the engine just made, if it has a timeout."""
        timeout = offer.timeout_ms if offer.timeout_ms is not None else self.offer_timeout_ms
        if timeout is None or offer._tentative is None:
            return
        when = offer._tentative.made_ns + round(timeout * 1_000_000)
        task = asyncio.get_running_loop().create_task(
            self._expire_at(offer, when), name=f"policy:{self.name}:expiry"
        )
        offer._expiry = task
        self._expiry_tasks[task] = None
        task.add_done_callback(self._expiry_done)

    def _expiry_done(self, task: asyncio.Task[None]) -> None:
        self._expiry_tasks.pop(task, None)
        self._task_done(task)

    def _disarm(self, offer: Offer) -> None:
        task = offer._expiry
        if task is not None:
            offer._expiry = None
            task.cancel()

    async def _expire_at(self, offer: Offer, when_ns: int) -> None:
        await simclock.sleep_until_ns(
            when_ns,
            waiter=f"policy:{self.name}:offer:{offer.request.id}",
            kind=simclock.WakeupKind.POLICY_WAKEUP,
        )
        offer._expiry = None
        self._expire(offer)

    def _expire(self, offer: Offer) -> None:
        """The offer's timeout elapsed while it was open: the engine withdraws it."""
        if self._withdraw(offer, "expired"):
            self.expiries += 1

    def _withdraw(self, offer: Offer, reason: str) -> bool:
        """The engine withdraws an offer it made (it expired, or the engine crashed): the
        request is held again and ``on_aborted`` is told ``reason``. Returns whether it was
        withdrawn (an offer no longer open, or not yet answered, is left alone)."""
        if offer._state not in ("sent", "open", "committing") or offer._tentative is None:
            return False
        request = offer.request
        state = self._state(request)
        self._open.pop(request.id, None)
        self._disarm(offer)
        offer._state = "expired"
        state.status = "held"
        state.engine = None
        placement = Placement(request.id, offer.engine, "aborted", reason, simclock.now_ns())
        offer._placement = placement
        try:
            self._member(offer.engine).abort(offer._tentative, reason)
        except Exception as error:
            what = "expiry" if reason == "expired" else "withdrawal"
            failure = PlacementError(
                f"{what} of the offer of request {request.id!r} on engine {offer.engine} "
                f"failed: {type(error).__name__}: {error}"
            )
            failure.__cause__ = error
            self._poison(failure)
            return False
        hook = _hook(self.policy, "on_aborted")
        if hook is not None:
            self._call_hook("on_aborted", hook, placement)
        return True

    def _commit(self, offer: Offer) -> Placement:
        self.check_alive()
        if offer._state == "expired":
            return offer.placement
        if offer._state != "open" or offer._tentative is None:
            raise PlacementError(
                f"offer of request {offer.request.id!r} to engine {offer.engine} cannot be "
                f"committed: it is {offer._state}"
            )
        request = offer.request
        state = self._state(request)
        engine = self._member(offer.engine)
        del self._open[request.id]
        self._disarm(offer)
        try:
            engine.commit(offer._tentative)
        except Exception as original:
            offer._state = "failed"
            state.status = "failed"
            self._settle()
            reason = f"commit failed: {type(original).__name__}: {original}"
            placement = Placement(request.id, offer.engine, "aborted", reason, simclock.now_ns())
            offer._placement = placement
            cleanup: list[BaseException] = []
            try:
                self._record(EventKind.FAILED, request.id, offer.engine, (("reason", reason),))
            except Exception as error:
                cleanup.append(error)
            hook = _hook(self.policy, "on_aborted")
            if hook is not None:
                try:
                    hook(placement)
                except Exception as error:
                    cleanup.append(error)
            failure = CommitError(
                f"commit of request {request.id!r} on engine {offer.engine} failed: "
                f"{type(original).__name__}: {original}",
                request_id=request.id,
                engine=offer.engine,
                cleanup_errors=tuple(cleanup),
            )
            failure.__cause__ = original
            self._poison(failure)
            raise failure from original
        self.commits += 1
        if offer.engine not in self.membership.accepting:
            self._committed_inactive(offer)
        offer._state = "committed"
        state.status = "committed"
        self._settle()
        placement = Placement(request.id, offer.engine, "committed", None, simclock.now_ns())
        offer._placement = placement
        hook = _hook(self.policy, "on_committed")
        if hook is not None:
            self._call_hook("on_committed", hook, placement)
            self.check_alive()
        return placement

    def _abort(self, offer: Offer, reason: str, *, check_alive: bool = True) -> Placement:
        if check_alive:
            self.check_alive()
        if offer._state != "open" or offer._tentative is None:
            raise PlacementError(
                f"offer of request {offer.request.id!r} to engine {offer.engine} cannot be "
                f"aborted: it is {offer._state}"
            )
        request = offer.request
        state = self._state(request)
        engine = self._member(offer.engine)
        del self._open[request.id]
        self._disarm(offer)
        offer._state = "aborted"
        state.status = "held"
        state.engine = None
        placement = Placement(request.id, offer.engine, "aborted", reason, simclock.now_ns())
        offer._placement = placement
        try:
            engine.abort(offer._tentative, reason)
        except Exception as error:
            failure = PlacementError(
                f"abort of request {request.id!r} on engine {offer.engine} failed: "
                f"{type(error).__name__}: {error}"
            )
            failure.__cause__ = error
            self._poison(failure)
            raise failure from error
        self.aborts += 1
        hook = _hook(self.policy, "on_aborted")
        if hook is not None:
            self._call_hook("on_aborted", hook, placement)
            if check_alive:
                self.check_alive()
        return placement

    # -- internals ----------------------------------------------------------------------------

    def refuse(self, request: Request, engine: int) -> Rejection:
        """Refuse the offer of ``request`` to engine ``engine``, which accepts no placements
        (draining or removed): record it (``OFFERED`` with the reason as its outcome, and in
        ``membership.inactive``) and return the rejection.

        Raises:
            simclock.InternalError: the engine is unknown or active.
        """
        engine_state = self.membership.state(engine)
        if engine_state is None or engine_state == "active":
            raise simclock.InternalError(f"offer to engine {engine} refused while {engine_state}")
        now = simclock.now_ns()
        refused = InactivePlacement(now, request.id, engine, engine_state)
        self.membership.inactive.append(refused)
        reason = refused.reason
        self.journal.mark(now, EventKind.OFFERED, request.id, engine, (("outcome", reason),))
        return Rejection(engine, request.id, reason, f"engine {engine} is {engine_state}")

    def _refuse(self, offer: Offer, state: _RequestState) -> None:
        """Refuse an offer to an engine that accepts no placements (draining or removed)."""
        rejection = self.refuse(offer.request, offer.engine)
        self.rejections += 1
        offer._state = "rejected"
        offer._placement = Placement(
            rejection.request_id, offer.engine, "rejected", rejection.reason, simclock.now_ns()
        )
        state.last_rejection = offer._placement

    def _committed_inactive(self, offer: Offer) -> None:
        """Record the commit of an offer whose engine stopped accepting since it was made."""
        state = self.membership.state(offer.engine)
        if state is None or state == "active":
            raise simclock.InternalError(f"commit on engine {offer.engine} recorded while {state}")
        self.membership.inactive.append(
            InactivePlacement(simclock.now_ns(), offer.request.id, offer.engine, state, "committed")
        )

    @property
    def inactive_placements(self) -> tuple[InactivePlacement, ...]:
        """Offers refused, and commits made, on engines not accepting placements (see
        :class:`policies.InactivePlacement`), in order."""
        return tuple(self.membership.inactive)

    def _member(self, engine: int) -> EngineHandle:
        handle = self.membership.handle(engine)
        if handle is None:
            raise simclock.InternalError(f"open offer on engine {engine}, which is unknown")
        return handle

    def _state(self, request: Request) -> _RequestState:
        state = self._requests.get(request.id)
        if state is None:
            raise PlacementError(f"request {request.id!r} was never released to this policy")
        return state

    def _settle(self) -> None:
        self._unsettled -= 1

    def _record(
        self,
        kind: EventKind,
        request_id: str,
        engine: int | None,
        detail: tuple[tuple[str, object], ...],
    ) -> None:
        self.journal.record(LifecycleEvent(simclock.now_ns(), kind, request_id, engine, detail))

    def _kv_event(self, event: KVEvent) -> None:
        hook = _hook(self.policy, "on_kv_event")
        if hook is not None and self.failure is None:
            self._call_hook("on_kv_event", hook, event)

    def _call_hook(self, hook_name: str, hook: Callable[[Any], object], arg: object) -> None:
        if self.failure is not None:
            return  # the policy is dead: its hooks are not called any more
        try:
            hook(arg)
        except Exception as error:
            failure = PolicyHookError(
                f"policy {self.name!r}: hook {hook_name} raised {type(error).__name__}: {error}",
                hook=hook_name,
            )
            failure.__cause__ = error
            self._poison(failure)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None or isinstance(error, RuntimePoisonedError):
            return
        self._poison(error)

    def _poison(self, failure: BaseException) -> None:
        if self.failure is not None:
            if failure is not self.failure:
                self.failure.add_note(f"later failure: {type(failure).__name__}: {failure}")
            return
        self.failure = failure
        if self.on_poison is not None:
            self.on_poison(failure)


def _check_timeout(value: object, name: str) -> None:
    """Refuse an offer timeout that is not a finite number of ms >= 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise PlacementError(f"{name} must be a finite number of ms >= 0, got {value!r}")


def _received_ns() -> int | None:
    """The current instant, or None when no virtual loop runs (a runtime fed by hand)."""
    try:
        return simclock.now_ns()
    except simclock.NotVirtualLoopError:
        return None


#: Lifecycle event kinds -> the policy hook called with the event.
_LIFECYCLE_HOOKS: dict[EventKind, str] = {
    EventKind.ADMITTED: "on_admitted",
    EventKind.FIRST_TOKEN: "on_first_token",
    EventKind.PREEMPTED: "on_preempted",
}


def _hook(policy: object, name: str) -> Callable[[Any], object] | None:
    hook = getattr(policy, name, None)
    if hook is None or getattr(hook, "__policy_noop__", False):
        return None
    if not callable(hook):
        return None
    return hook  # type: ignore[no-any-return]
