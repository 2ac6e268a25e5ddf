"""Stale information: engine views and KV events that reach a policy late or periodically.

A :class:`Staleness` given to a :class:`policies.PolicyRuntime` changes what its policy sees,
nothing else (engines run exactly as before):

1. ``view_period_ns = p``: every view in ``ctx.engines`` (and the views the runtime hands to
   hooks) shows a snapshot of the engine's load taken at ``0, p, 2p, ...`` (a timer on the
   virtual clock takes it, only when a period is set).
2. ``view_delay_ns = d``: views show the engine's load as it was ``d`` ago: the latest
   snapshot taken at or before ``t - d``. Without a period, a snapshot is taken after each
   of the engine's lifecycle events (every kind but ``TOKEN`` and ``PREFILL_CHUNK``, so
   engines keep macro-stepping), once the step that recorded it is over (at the same
   instant): load that changes between events (decode progress, prompt chunks, blocks a
   decode step fills) is seen at event granularity. With a period, only
   the period's snapshots are taken: the view reads the last multiple of ``p`` at or before
   ``t - d``.
3. ``kv_event_delay_ns = k``: each KV event reaches ``on_kv_event`` ``k`` after the engine
   published it (in publication order), and ``prefix_overlap`` (so
   ``ctx.prefix_overlap_tokens``) answers from the events delivered so far: the runtime keeps
   its own copy of each engine's published keys, updated on delivery. The runtime subscribes
   to the engines' KV events for that, so engines step one pass at a time (as they do for a
   policy with ``on_kv_event``), with the same results.

The load a stale view reads is ``waiting_count``, ``running_count``,
``outstanding_prefill_tokens``, ``outstanding_decode_tokens``, ``kv_blocks_free``,
``kv_blocks_used``, ``pending_offers`` and ``pass_in_flight``; before the first snapshot an
engine reads as empty (nothing queued, every block free). Its identity and configuration
(id, role, block size, timing, config) are the engine's own; its estimates (``estimate``,
``queueing_delay_ms``, ``prefill_time_ms``, ``expected_prefix_overlap``) read the engine
now: they are the engine's answers to an offer, not monitoring data.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence

import attrs

import simclock
from engines import (
    PASS_KINDS,
    EngineView,
    EventKind,
    Journal,
    KVEvent,
    LifecycleEvent,
    PassInFlight,
)

__all__ = ("StaleInformation", "StaleView", "Staleness")

#: The lifecycle kinds a delayed view takes a snapshot at: all but the per-token ones.
SNAPSHOT_KINDS: tuple[EventKind, ...] = tuple(kind for kind in EventKind if kind not in PASS_KINDS)


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name}: must be an int >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Staleness:
    """How late a policy's information is (see the module docstring).

    Attributes:
        view_delay_ns: views show each engine as it was this long ago.
        view_period_ns: views refresh on this period (0: continuously).
        kv_event_delay_ns: KV events (and ``prefix_overlap``) lag by this much.
    """

    view_delay_ns: int = attrs.field(default=0, validator=_non_negative)
    view_period_ns: int = attrs.field(default=0, validator=_non_negative)
    kv_event_delay_ns: int = attrs.field(default=0, validator=_non_negative)

    @property
    def views_lag(self) -> bool:
        """Whether views lag (a delay or a period is set)."""
        return bool(self.view_delay_ns or self.view_period_ns)

    @property
    def is_empty(self) -> bool:
        """Whether nothing lags (the policy sees the engines live)."""
        return not (self.views_lag or self.kv_event_delay_ns)


@attrs.frozen
class _Load:
    """An engine's load at an instant (what a stale view reads)."""

    time_ns: int
    waiting_count: int
    running_count: int
    outstanding_prefill_tokens: int
    outstanding_decode_tokens: int
    kv_blocks_free: int
    kv_blocks_used: int
    pending_offers: int
    pass_in_flight: PassInFlight | None

    @classmethod
    def of(cls, view: EngineView, now_ns: int) -> _Load:
        return cls(
            now_ns,
            view.waiting_count,
            view.running_count,
            view.outstanding_prefill_tokens,
            view.outstanding_decode_tokens,
            view.kv_blocks_free,
            view.kv_blocks_used,
            view.pending_offers,
            view.pass_in_flight,
        )


@attrs.define(eq=False)
class _Watched:
    """What the runtime knows of one engine: its load snapshots (oldest first, one per
    instant) and, with a KV event delay, the keys delivered as cached."""

    live: EngineView
    history: deque[_Load] = attrs.field(factory=deque)
    keys: set[int] = attrs.field(factory=set)


@attrs.frozen
class StaleView(EngineView):
    """An :class:`engines.EngineView` whose load and prefix overlap lag (see the module
    docstring); everything else reads the engine live."""

    _stale: StaleInformation = attrs.field(repr=False, eq=False)

    def __repr__(self) -> str:
        return f"StaleView(engine={self.id})"

    def _load(self) -> _Load | None:
        return self._stale.load(self.id)

    @property
    def waiting_count(self) -> int:
        """Requests in the waiting queue, as last seen."""
        load = self._load()
        return super().waiting_count if load is None else load.waiting_count

    @property
    def running_count(self) -> int:
        """Requests in the running list, as last seen."""
        load = self._load()
        return super().running_count if load is None else load.running_count

    @property
    def outstanding_prefill_tokens(self) -> int:
        """Prompt positions still to compute, as last seen."""
        load = self._load()
        if load is None:
            return super().outstanding_prefill_tokens
        return load.outstanding_prefill_tokens

    @property
    def outstanding_decode_tokens(self) -> int:
        """Tokens still to generate, as last seen."""
        load = self._load()
        if load is None:
            return super().outstanding_decode_tokens
        return load.outstanding_decode_tokens

    @property
    def kv_blocks_free(self) -> int:
        """Blocks in the free queue, as last seen."""
        load = self._load()
        return super().kv_blocks_free if load is None else load.kv_blocks_free

    @property
    def kv_blocks_used(self) -> int:
        """Blocks referenced by a request, as last seen."""
        load = self._load()
        return super().kv_blocks_used if load is None else load.kv_blocks_used

    @property
    def pending_offers(self) -> int:
        """Open offers, as last seen."""
        load = self._load()
        return super().pending_offers if load is None else load.pending_offers

    @property
    def pass_in_flight(self) -> PassInFlight | None:
        """The pass in flight, as last seen."""
        load = self._load()
        return super().pass_in_flight if load is None else load.pass_in_flight

    def prefix_overlap(self, block_keys: Sequence[int]) -> int:
        """How many leading ``block_keys`` are cached as the KV events delivered so far
        say (blocks)."""
        keys = self._stale.delivered_keys(self.id)
        if keys is None:
            return super().prefix_overlap(block_keys)
        n = 0
        for key in block_keys:
            if key not in keys:
                break
            n += 1
        return n


@attrs.define(eq=False)
class StaleInformation:
    """A runtime's stale picture of its engines (see the module docstring).

    Made by :meth:`policies.PolicyRuntime.start` when its ``staleness`` is set;
    :meth:`watch` adds an engine (at the start, or when it joins), :meth:`wrap` gives the
    view a policy sees.

    Args:
        staleness: how late the information is.
        journal: the run's journal (lifecycle events trigger delayed snapshots).
        deliver: called with each KV event when it reaches the policy (None: nobody
            listens, the events only update the published keys).
    """

    staleness: Staleness
    journal: Journal
    deliver: Callable[[KVEvent], None] | None = None
    _watched: dict[int, _Watched] = attrs.field(factory=dict, init=False)
    _views: dict[int, StaleView] = attrs.field(factory=dict, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    # engines with an event since their last snapshot, in the order of their first event
    _dirty: dict[int, None] = attrs.field(factory=dict, init=False)

    def start(self, views: Iterable[EngineView]) -> None:
        """Watch the runtime's first engines and start the snapshots (inside the loop)."""
        for view in views:
            self._watch(view)
        staleness = self.staleness
        if staleness.view_period_ns:
            self._tick(0)
        elif staleness.view_delay_ns:
            self.journal.subscribe(self._on_event, kinds=SNAPSHOT_KINDS)

    def close(self) -> None:
        """Stop the period's snapshots and the deliveries (the run ends)."""
        self._closed = True

    def watch(self, view: EngineView) -> None:
        """Watch an engine that joined."""
        self._watch(view)

    def _watch(self, view: EngineView) -> None:
        self._watched[view.id] = _Watched(view)
        if self.staleness.kv_event_delay_ns:
            # an engine joins with an empty cache: its events say all it will ever hold
            view._engine.subscribe_kv(self._published)

    def wrap(self, view: EngineView) -> EngineView:
        """The view the policy sees of ``view``'s engine."""
        stale = self._views.get(view.id)
        if stale is None:
            stale = self._views[view.id] = StaleView(view._engine, self)
        return stale

    def wrap_all(self, views: Iterable[EngineView]) -> tuple[EngineView, ...]:
        """:meth:`wrap` of each view."""
        return tuple(self.wrap(view) for view in views)

    # -- views ---------------------------------------------------------------------------------

    def load(self, engine: int) -> _Load | None:
        """The load a view of ``engine`` reads now (None: the engine's live load)."""
        staleness = self.staleness
        if not staleness.views_lag:
            return None
        watched = self._watched.get(engine)
        if watched is None:
            return None
        history = watched.history
        cutoff = simclock.now_ns() - staleness.view_delay_ns
        while len(history) > 1 and history[1].time_ns <= cutoff:
            history.popleft()
        if history and history[0].time_ns <= cutoff:
            return history[0]
        live = watched.live
        return _Load(cutoff, 0, 0, 0, 0, live.kv_blocks_total, 0, 0, None)

    def _snapshot(self, watched: _Watched) -> None:
        now = simclock.now_ns()
        history = watched.history
        load = _Load.of(watched.live, now)
        if history and history[-1].time_ns == now:
            history[-1] = load
        else:
            history.append(load)
        cutoff = now - self.staleness.view_delay_ns
        while len(history) > 1 and history[1].time_ns <= cutoff:
            history.popleft()

    def _on_event(self, event: LifecycleEvent) -> None:
        engine = event.engine
        if engine is None or engine not in self._watched:
            return
        # An event is recorded in the middle of the change it reports (a finished request
        # is still in the running list): the snapshot is taken once the step that recorded
        # it is over, at the same instant.
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._flush)
        self._dirty[engine] = None

    def _flush(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for engine in dirty:
            self._snapshot(self._watched[engine])

    def _tick(self, at_ns: int) -> None:
        """Take the period's snapshot of every engine at ``at_ns`` (now or later)."""
        loop = asyncio.get_running_loop()
        if not isinstance(loop, simclock.VirtualEventLoop):
            simclock.now_ns()  # raises NotVirtualLoopError
            return
        if self._closed:
            return
        if at_ns <= loop.time_ns():
            for watched in self._watched.values():
                self._snapshot(watched)
            at_ns += self.staleness.view_period_ns
            if loop.next_event_ns() is None:
                # Nothing else is scheduled, so nothing can change any more: the snapshots
                # stop, and the run ends as it would without them (a deadlock that ends the
                # requests the policy holds), instead of running on their timer alone.
                return
        future = loop.create_future()
        loop.wake_at_ns(future, at_ns, waiter="policy:stale-views")
        future.add_done_callback(lambda _: self._tick(at_ns))

    # -- KV events -----------------------------------------------------------------------------

    def delivered_keys(self, engine: int) -> set[int] | None:
        """The keys of ``engine`` cached as the delivered KV events say (None: no delay)."""
        if not self.staleness.kv_event_delay_ns:
            return None
        watched = self._watched.get(engine)
        return None if watched is None else watched.keys

    def _published(self, event: KVEvent) -> None:
        loop = asyncio.get_running_loop()
        if not isinstance(loop, simclock.VirtualEventLoop):
            return
        future = loop.create_future()
        loop.wake_at_ns(
            future, event.time_ns + self.staleness.kv_event_delay_ns, waiter="policy:kv-events"
        )
        future.add_done_callback(lambda _: self._delivered(event))

    def _delivered(self, event: KVEvent) -> None:
        if self._closed:
            return
        watched = self._watched.get(event.engine)
        if watched is not None:
            if event.kind == "stored":
                watched.keys.update(event.block_keys)
            else:
                watched.keys.difference_update(event.block_keys)
        if self.deliver is not None:
            self.deliver(event)
