"""The engine: a coroutine on the virtual clock around :class:`EngineCore`.

It takes part in the two-phase dispatch handshake (offer -> tentative or rejection ->
commit or abort), exposes a read-only :class:`EngineView` for policies, and publishes KV
events (keys stored / removed) at the end of each pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import attrs

import simclock
from loadgen import Request

from ._config import EngineConfig
from ._core import EngineCore, Pass
from ._estimates import PassInFlight, PlacementEstimate, estimate_placement, pass_in_flight
from ._exceptions import (
    EngineClosedError,
    EngineError,
    HandshakeError,
    InvalidRequestError,
)
from ._journal import EventKind, Journal, LifecycleEvent
from ._keys import BlockKeyer, blocks_per_id, prompt_contents
from ._macro import PLAN_PASSES, MacroRun
from ._pass import Role, TimingModel

__all__ = (
    "Engine",
    "EngineSnapshot",
    "EngineView",
    "KVEvent",
    "Rejection",
    "Reservation",
    "Tentative",
)

# the detail of an offer that became a tentative placement (one tuple for every offer)
_TENTATIVE: tuple[tuple[str, object], ...] = (("outcome", "tentative"),)


@attrs.frozen(eq=False)
class Tentative:
    """An open offer: the engine accepted ``request`` tentatively; commit or abort it.

    It says what the engine would do with the request. ``hit_tokens`` is a promise: the
    prefix blocks behind it are pinned by the offer (a reference the offer holds, taken at the
    engine's next schedule point, the only moments blocks are evicted), so they stay cached
    until the offer is committed, aborted or expires. On commit the blocks are released to
    the request's own admission: it waits in the queue like any other and looks its prefix up
    when admitted (§4.3), so a request queued ahead of it may still evict them (holding them
    for a queued request could block the queue's head for ever). The queue
    position and the estimate are read from the state at the offer (see
    :meth:`EngineView.estimate`), not promised.

    Attributes:
        engine: the index of the engine that made the offer.
        request: the request offered.
        serial: the offer's number on that engine (unique per engine).
        hit_tokens: prompt tokens the engine holds cached for the request now, capped as in
            its admission lookup (``(P - 1) // E`` blocks; ``P // E`` on a decode engine).
        queue_position: requests in the engine's waiting queue (and reservation queue) ahead
            of it; open offers are not counted.
        made_ns: the instant of the offer.
        estimate: the engine's estimate of its admission and first token, when asked for
            (``Engine.offer(..., estimate=True)``); None otherwise or when there is none.
    """

    engine: int
    request: Request
    serial: int
    hit_tokens: int = 0
    queue_position: int = 0
    made_ns: int = 0
    estimate: PlacementEstimate | None = None

    @property
    def admission_ns(self) -> int | None:
        """The estimated admission instant (None without an estimate)."""
        return None if self.estimate is None else self.estimate.admission_ns

    @property
    def first_token_ns(self) -> int | None:
        """The estimated first-token instant (None without an estimate)."""
        return None if self.estimate is None else self.estimate.first_token_ns


@attrs.define(eq=False)
class _Hold:
    """The prefix an open offer promised: its hit keys, and the blocks it pins once the
    engine reached a schedule point (``None`` before)."""

    keys: list[int]
    blocks: list[int] | None = None


@attrs.frozen
class Rejection:
    """An engine refused a request (REFERENCE-engine §4.8).

    Attributes:
        engine: the index of the refusing engine.
        request_id: the refused request.
        reason: ``"prompt_too_long"``, ``"exceeds_kv_capacity"`` or ``"exceeds_batch_budget"``.
        message: a human-readable explanation with the numbers involved.
    """

    engine: int
    request_id: str
    reason: str
    message: str


@attrs.frozen
class Reservation:
    """Blocks reserved on a decode-role engine for an incoming KV transfer (§6.2).

    Attributes:
        request_id: the request.
        engine: the decode engine's index.
        at_ns: when the reservation was made (``destination_reserved``).
        hit_blocks: prompt blocks already resident (pinned, not transferred).
        missing_blocks: ``ceil(P / E) - hit_blocks`` fresh blocks to fill by transfer.
        block_size: the decode engine's block size ``E``.
    """

    request_id: str
    engine: int
    at_ns: int
    hit_blocks: int
    missing_blocks: int
    block_size: int

    @property
    def reused_tokens(self) -> int:
        """Prompt tokens already resident: ``hit_blocks * block_size``."""
        return self.hit_blocks * self.block_size


@attrs.frozen
class KVEvent:
    """Keys that became cached (``stored``) or stopped being cached (``removed``) on an engine.

    A key is *stored* when its first copy is registered and *removed* when its last copy is
    evicted. Events are published at the end of the pass whose schedule phase caused them
    (or at once for changes made while no pass is in flight); consecutive changes of one kind
    are grouped, in the order they happened.

    Attributes:
        time_ns: the publication instant.
        engine: the engine's index.
        kind: ``"stored"`` or ``"removed"``.
        block_keys: the keys, in the order they changed.
    """

    time_ns: int
    engine: int
    kind: Literal["stored", "removed"]
    block_keys: tuple[int, ...]


@attrs.frozen
class EngineSnapshot:
    """A comparable picture of an engine's whole state (tests, debugging).

    Attributes:
        waiting: request ids in the waiting queue, head first.
        running: request ids in the running list, in admission order.
        held: prefill role, request ids whose blocks are held for a transfer.
        reserving: decode role, request ids in the reservation queue.
        reserved: decode role, request ids with reserved blocks awaiting activation.
        progress: ``(request_id, num_computed, num_output, blocks)`` for every request.
        free_queue: the free blocks, head first.
        ref_counts: the reference count of every block.
        block_keys: the key of every block (0 = none).
        pending_offers: open offers.
        prefill_outstanding: as in :class:`EngineView`.
        decode_outstanding: as in :class:`EngineView`.
        in_pass: whether a pass is in flight.
        pinned: ``(offer serial, blocks)`` of every open offer pinning blocks.
    """

    waiting: tuple[str, ...]
    running: tuple[str, ...]
    held: tuple[str, ...]
    reserving: tuple[str, ...]
    reserved: tuple[str, ...]
    progress: tuple[tuple[str, int, int, tuple[int, ...]], ...]
    free_queue: tuple[int, ...]
    ref_counts: tuple[int, ...]
    block_keys: tuple[int, ...]
    pending_offers: int
    prefill_outstanding: int
    decode_outstanding: int
    in_pass: bool
    pinned: tuple[tuple[int, tuple[int, ...]], ...] = ()


KVCallback = Callable[[KVEvent], object]


@attrs.define(eq=False)
class Engine:
    """A simulated vLLM-v1-style engine (REFERENCE-engine) running on the virtual clock.

    Lifecycle: built idle; :meth:`run` is its coroutine (start it as a task): it waits on its
    inbox while it has nothing to do; otherwise, once every same-instant arrival has landed
    (``simclock.instant_end`` with ``priority = index``), it plans a pass, sleeps until the
    pass deadline (an ``ENGINE_DEADLINE`` wakeup), commits the pass, and repeats. Right after
    a commit that nothing else can follow at that instant (``VirtualEventLoop.next_event_ns``
    is later), the next pass starts without the instant-end wait, which would resume at once.
    Requests committed mid-pass join at the next pass boundary. :meth:`close` says no more
    work will come; :meth:`run` returns once the engine has drained.

    Handshake (engine side, plain methods): :meth:`offer` -> :class:`Tentative` or
    :class:`Rejection`; then :meth:`commit` or :meth:`abort`. An aborted offer leaves no
    trace in the engine; a failed commit rolls back and raises.

    Args:
        index: the engine's index (worker order; ties at one instant go lowest first).
        config: the engine's knobs.
        timing: the pass-timing model.
        keyer: the run's block keyer, shared by every engine.
        journal: the run's journal.
    """

    index: int
    config: EngineConfig
    timing: TimingModel
    keyer: BlockKeyer = attrs.field(kw_only=True, repr=False)
    journal: Journal = attrs.field(kw_only=True, repr=False)
    macro_stepping: bool = attrs.field(default=True, kw_only=True)
    on_idle: Callable[[Engine], object] | None = attrs.field(default=None, kw_only=True, repr=False)
    """Called with the engine each time its coroutine waits for work (a cluster watches a
    draining engine with it; see :attr:`idle`); None, the default, costs nothing."""
    _core: EngineCore = attrs.field(init=False, repr=False)
    _offers: dict[int, Tentative] = attrs.field(factory=dict, init=False, repr=False)
    _holds: dict[int, _Hold] = attrs.field(factory=dict, init=False, repr=False)
    _pins_due: bool = attrs.field(default=False, init=False, repr=False)
    _serial: int = attrs.field(default=0, init=False, repr=False)
    _closed: bool = attrs.field(default=False, init=False, repr=False)
    _started: bool = attrs.field(default=False, init=False, repr=False)
    _reserved_one: bool = attrs.field(default=False, init=False, repr=False)
    _pass: Pass | None = attrs.field(default=None, init=False, repr=False)
    _wake: asyncio.Event = attrs.field(factory=asyncio.Event, init=False, repr=False)
    _kv_subscribers: list[KVCallback] = attrs.field(factory=list, init=False, repr=False)
    _reservations: dict[str, Reservation] = attrs.field(factory=dict, init=False, repr=False)
    _reservation_waiters: dict[str, asyncio.Future[Reservation]] = attrs.field(
        factory=dict, init=False, repr=False
    )
    _view: EngineView = attrs.field(init=False, repr=False)
    _run: MacroRun | None = attrs.field(default=None, init=False, repr=False)
    _clock: simclock.VirtualEventLoop | None = attrs.field(default=None, init=False, repr=False)
    _deadline: simclock.Deadline | None = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._core = EngineCore(self.index, self.config, self.timing, self.keyer, self.journal)
        self._view = EngineView(self)
        self.journal.add_syncer(self._sync)
        self.journal.add_pass_watcher(self._watched_per_pass)
        self.keyer.hold(self)

    # -- keys held, for the keyer (BlockKeyer.hold) ---------------------------------------

    def held_keys_estimate(self) -> int:
        """About how many keys the engine holds: cached, and its requests'."""
        core = self._core
        return len(core.kv.cache) + sum(len(s.keys) for s in core.seqs.values())

    def held_keys(self) -> Iterator[Sequence[int]]:
        """Every key the engine holds, as it is now: its blocks', those whose removal is
        not published yet, and every request's placed on it (in any state)."""
        self._sync()
        core = self._core
        yield core.kv.key
        yield core.kv.pending_keys
        for s in core.seqs.values():
            yield s.keys
        for hold in self._holds.values():
            yield hold.keys

    # -- read-only surface -------------------------------------------------------------------

    @property
    def view(self) -> EngineView:
        """The read-only view policies use."""
        return self._view

    @property
    def role(self) -> Role:
        """The engine's role."""
        return self.config.role

    @property
    def passes(self) -> int:
        """Passes planned so far."""
        self._sync()
        return self._core.passes

    @property
    def batch_entries(self) -> int:
        """Entries (a request's prompt chunk or decode step) summed over the passes planned
        so far: the mean batch size is this over :attr:`passes`."""
        self._sync()
        return self._core.entries

    @property
    def peak_running(self) -> int:
        """The most requests the running batch has held at once."""
        return self._core.peak_running

    @property
    def peak_kv_blocks(self) -> int:
        """The most KV blocks referenced at once so far."""
        self._sync()
        kv = self._core.kv
        return kv.num_blocks - kv.min_free

    @property
    def busy_ns(self) -> int:
        """Total duration of the passes planned so far, in ns."""
        self._sync()
        return self._core.busy_ns

    def _sync(self) -> None:
        """Bring a macro-stepped run to the state the per-pass engine has now."""
        run = self._run
        clock = self._clock
        if run is not None and clock is not None:
            # Passes ending now have committed (engine deadlines run first at an instant) unless
            # a paused session looks before anything ran at this instant. The pass starting
            # now is scheduled once the engine's instant-end turn has come: inside the loop,
            # when a waiter of a priority >= its index was released; from outside, when
            # nothing is left to run at this instant.
            now = clock.time_ns()
            level = clock.instant_end_level()
            turn = clock.deadline_turn()
            # inside the commit of a lower-ranked engine, passes ending now are not committed
            ends = turn is None or turn >= self.index
            if level is not None and level >= self.index:
                starts = True
            elif clock.in_callback():
                starts = False
            elif clock.instant_events() == 0:
                # paused before anything ran at this instant: not even its commits
                starts = ends = False
            else:
                starts = clock.next_event_ns() != now
            run.advance(now, include_end=ends, include_start=starts)

    @property
    def pass_end_ns(self) -> int | None:
        """When the pass in flight ends, or ``None`` when no pass is in flight."""
        self._sync()
        if self._pass is not None:
            return self._pass.end_ns
        run = self._run
        if run is not None and run.in_pass:
            return run.ends[run.committed]
        return None

    def _plan_in_flight(self) -> Pass | None:
        """The pass in flight with its entries and columns (after :meth:`_sync`), or None."""
        self._sync()
        if self._pass is not None:
            return self._pass
        run = self._run
        return None if run is None else run.pass_in_flight()

    def _estimate(
        self, prompt: int, output: int, cached: int, behind_queue: bool
    ) -> PlacementEstimate | None:
        """:func:`~engines._estimates.estimate_placement` from the engine's state now."""
        plan = self._plan_in_flight()
        target = max(0, min(output, self.config.context_length - prompt))
        return estimate_placement(
            self._core,
            simclock.now_ns(),
            None if plan is None else plan.end_ns,
            prompt,
            target,
            cached,
            behind_queue=behind_queue,
        )

    def step_per_pass(self) -> None:
        """Take one deadline per pass from now on (``macro_stepping`` off): a run in
        progress ends at the next pass start, as when an input reaches the engine."""
        self.macro_stepping = False
        if self._run is not None:
            self._sync()
            self._split()

    def _in_pass(self) -> bool:
        """Whether a pass is in flight (after :meth:`_sync`)."""
        return self._pass is not None or (self._run is not None and self._run.in_pass)

    def _split(self) -> None:
        """An input reached the engine during a macro-stepped run: it is seen at the next
        pass start, where the run now ends."""
        run = self._run
        if run is None:
            return
        run.truncate()
        deadline = self._deadline
        clock = self._clock
        if deadline is not None and clock is not None and deadline.armed_ns is not None:
            deadline.move(clock.time_ns() if run.done else run.next_wake_ns())

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def idle(self) -> bool:
        """Whether nothing is placed on the engine: no request in any state (waiting,
        running, held for a transfer, reserved) and no open offer."""
        self._sync()
        return not self._core.seqs and not self._offers

    def subscribe_kv(self, callback: KVCallback) -> None:
        """Call ``callback(event)`` for every :class:`KVEvent` published from now on.

        A run in progress is brought to now first (what it published before is published to
        nobody) and ends at its next pass start: the passes from here on publish at each
        pass end, as the per-pass engine does.
        """
        self._sync()
        self._kv_subscribers.append(callback)
        self._watched_per_pass()

    def _watched_per_pass(self) -> None:
        """Someone now watches what a pass records (``TOKEN`` or ``PREFILL_CHUNK`` events,
        KV events): a run in progress ends at its next pass start, and its pass in flight
        commits as the per-pass engine commits it, with its events. The callers (the
        journal, :meth:`subscribe_kv`) have brought the run to now before the new subscriber
        came, so what ran before is applied as nobody watched it."""
        run = self._run
        if run is not None:
            run.observed = True
            self._split()

    def snapshot(self) -> EngineSnapshot:
        """Return the engine's whole state as a comparable value."""
        self._sync()
        core = self._core
        kv = core.kv
        return EngineSnapshot(
            waiting=tuple(s.rid for s in core.waiting),
            running=tuple(s.rid for s in core.running),
            held=tuple(core.held),
            reserving=tuple(s.rid for s in core.reservations),
            reserved=tuple(core.reserved),
            progress=tuple(
                (s.rid, s.num_computed, s.num_output, tuple(s.blocks)) for s in core.seqs.values()
            ),
            free_queue=tuple(kv.free_blocks()),
            ref_counts=tuple(kv.ref_counts()),
            block_keys=tuple(kv.block_keys()),
            pending_offers=len(self._offers),
            prefill_outstanding=core.prefill_outstanding,
            decode_outstanding=core.decode_outstanding,
            in_pass=self._in_pass(),
            pinned=tuple(
                (serial, tuple(hold.blocks))
                for serial, hold in self._holds.items()
                if hold.blocks is not None
            ),
        )

    # -- handshake ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError(f"engine {self.index} is closed")

    def offer(
        self, request: Request, *, estimate: bool = False, inform: bool = True
    ) -> Tentative | Rejection:
        """Offer ``request`` to this engine (phase one of the dispatch handshake).

        Checks the §4.8 rejection rules. A tentative placement reports the prefix hit the
        request has here and pins those blocks until it ends (:class:`Tentative`); nothing
        else is reserved. Records ``OFFERED`` (detail ``outcome``: ``"tentative"`` or the
        rejection reason). A rejection records nothing else: the caller decides whether the
        request is rejected for good (:meth:`reject`) or tried elsewhere.

        Args:
            request: the request; its ``hash_ids`` must cover its prompt.
            estimate: also estimate its admission and first token (:meth:`EngineView.estimate`;
                costs a replay of the queue, so only when asked).
            inform: False when the caller commits or aborts the offer at once, before anything
                else runs (a dispatch with no latency): the tentative then reports no hit and
                pins nothing (nothing can be evicted before the commit), and costs nothing more
                than the admission checks.

        Returns:
            A :class:`Tentative` to commit or abort, or a :class:`Rejection`.

        Raises:
            EngineClosedError: the engine is closed.
            InvalidRequestError: the request is malformed, or already on this engine.
        """
        self._check_open()
        rid = request.id
        if rid in self._core.seqs or any(t.request.id == rid for t in self._offers.values()):
            raise InvalidRequestError(f"request {rid!r} is already placed on engine {self.index}")
        if request.input_length < 1:
            raise InvalidRequestError(
                f"request {rid!r}: input_length must be >= 1, got {request.input_length}"
            )
        if request.output_length < 0:
            raise InvalidRequestError(
                f"request {rid!r}: output_length must be >= 0, got {request.output_length}"
            )
        if len(request.hash_ids) * request.block_size < request.input_length:
            raise InvalidRequestError(
                f"request {rid!r}: {len(request.hash_ids)} hash_ids of {request.block_size} "
                f"tokens do not cover a prompt of {request.input_length} tokens"
            )
        now = simclock.now_ns()
        refused = self._core.rejection(request)
        if refused is not None:
            reason, message = refused
            self.journal.mark(now, EventKind.OFFERED, rid, self.index, (("outcome", reason),))
            return Rejection(self.index, rid, reason, message)
        self.journal.mark(now, EventKind.OFFERED, rid, self.index, _TENTATIVE)
        self._serial += 1
        serial = self._serial
        if not inform:
            tentative = Tentative(self.index, request, serial, made_ns=now)
            self._offers[serial] = tentative
            return tentative
        self._sync()
        core = self._core
        hit_keys = self._hit_keys(request)
        hit_tokens = len(hit_keys) * self.config.block_size
        queue_position = len(core.waiting) + len(core.reservations)
        guess = None
        if estimate:
            guess = self.view.estimate(
                request.input_length,
                output_length=request.output_length,
                cached_tokens=hit_tokens,
            )
        tentative = Tentative(self.index, request, serial, hit_tokens, queue_position, now, guess)
        self._offers[serial] = tentative
        if hit_keys:
            self._holds[serial] = _Hold(hit_keys)
            self._pins_due = True
            if self._run is not None:
                # the pin takes effect at the next pass start, where the run now ends
                self._split()
        return tentative

    def _known_keys(self, request: Request, limit: int) -> list[int]:
        """The keys of ``request``'s first ``limit`` prompt blocks that were ever interned
        (a key never interned is cached nowhere); interns nothing."""
        e = self.config.block_size
        memo = self.keyer.cached_block_keys(request, e)
        if memo is not None:
            return list(memo[:limit])
        keys: list[int] = []
        contents = prompt_contents(
            request.hash_ids.tolist(), request.block_size, request.input_length, e
        )
        self.keyer.known(
            keys, contents, min(limit, len(contents)), blocks_per_id(request.block_size, e)
        )
        return keys

    def _hit_keys(self, request: Request) -> list[int]:
        """The keys of the prompt blocks ``request`` finds cached here now (its lookup)."""
        if not self.config.enable_prefix_caching:
            return []
        e = self.config.block_size
        p = request.input_length
        limit = p // e if self.config.role == "decode" else (p - 1) // e
        if limit <= 0:
            return []
        keys = self._known_keys(request, limit)
        hits = self._core.kv.lookup_prefix(keys, len(keys), chain=True)
        return keys[: len(hits)]

    def _hold_offers(self) -> None:
        """Pin the promised prefix blocks of the open offers not pinned yet (at a schedule
        point: nothing was evicted since their offers, so the blocks are the same)."""
        self._pins_due = False
        kv = self._core.kv
        for serial, hold in self._holds.items():
            if hold.blocks is not None:
                continue
            hits = kv.lookup_prefix(hold.keys, len(hold.keys), chain=True)
            if len(hits) != len(hold.keys):
                raise simclock.InternalError(
                    f"offer #{serial} on engine {self.index}: {len(hits)} of its "
                    f"{len(hold.keys)} promised blocks are cached"
                )
            blocks: list[int] = []
            kv.allocate(blocks, hits, 0)  # a reference held by the offer
            hold.blocks = blocks

    def _release_hold(self, serial: int) -> bool:
        """End the pin of offer ``serial``; return whether blocks were released."""
        hold = self._holds.pop(serial, None)
        if hold is None or hold.blocks is None:
            return False
        self._sync()
        self._core.kv.release(hold.blocks)
        return True

    def _take_offer(self, tentative: Tentative) -> None:
        if tentative.engine != self.index or self._offers.get(tentative.serial) is not tentative:
            raise HandshakeError(
                f"no open offer #{tentative.serial} of request {tentative.request.id!r} "
                f"on engine {self.index}"
            )
        del self._offers[tentative.serial]

    def commit(self, tentative: Tentative) -> None:
        """Accept the offered request for real: it reaches the engine now (engine arrival).

        Records ``COMMITTED`` then ``QUEUED``; the request joins the waiting queue (the
        reservation queue on a decode-role engine) and is scheduled at the next pass
        boundary. If anything fails, the engine is rolled back to its state before the
        offer and the error propagates.

        Raises:
            HandshakeError: ``tentative`` is not an open offer of this engine.
            EngineClosedError: the engine was closed since the offer.
        """
        self._take_offer(tentative)
        self._check_open()
        now = simclock.now_ns()
        self._sync()
        # The pin ends: held for the queued request, it could block the queue's head for
        # ever (a request ahead that needs those very blocks to be admitted).
        self._release_hold(tentative.serial)
        core = self._core
        s = core.new_seq(tentative.request)
        if self.config.role == "decode":
            core.enqueue_reservation(s)
        else:
            core.enqueue(s)
        try:
            self.journal.mark(now, EventKind.COMMITTED, s.rid, self.index)
            self.journal.record(
                LifecycleEvent(now, EventKind.QUEUED, s.rid, self.index, (("role", self.role),))
            )
        except BaseException:
            core.unqueue(s)
            raise
        self._kick()

    def abort(self, tentative: Tentative, reason: str) -> None:
        """Withdraw an open offer; nothing of it remains in the engine. Records ``ABORTED``.

        Raises:
            HandshakeError: ``tentative`` is not an open offer of this engine.
        """
        self._take_offer(tentative)
        if self._release_hold(tentative.serial):
            self._kick()
        self.journal.record(
            LifecycleEvent(
                simclock.now_ns(),
                EventKind.ABORTED,
                tentative.request.id,
                self.index,
                (("reason", reason),),
            )
        )
        if self.on_idle is not None:
            self._wake.set()  # the watcher hears of it when the engine waits again

    def reject(self, rejection: Rejection) -> None:
        """Record ``rejection`` as the request's terminal outcome (``REJECTED`` now)."""
        self.journal.record(
            LifecycleEvent(
                simclock.now_ns(),
                EventKind.REJECTED,
                rejection.request_id,
                self.index,
                (("reason", rejection.reason), ("message", rejection.message)),
            )
        )

    def submit(self, request: Request) -> Tentative | Rejection:
        """Offer and, unless rejected, commit at once; a rejection is recorded (:meth:`reject`).

        Returns:
            The committed :class:`Tentative`, or the recorded :class:`Rejection`.
        """
        answer = self.offer(request, inform=False)
        if isinstance(answer, Rejection):
            self.reject(answer)
        else:
            self.commit(answer)
        return answer

    # -- roles -------------------------------------------------------------------------------

    def release_held(self, request_id: str) -> None:
        """Prefill role: free the blocks held for ``request_id``'s transfer (they stay cached).

        Raises:
            InvalidRequestError: nothing is held for ``request_id``.
        """
        if request_id not in self._core.held:
            raise InvalidRequestError(
                f"engine {self.index} holds no blocks for request {request_id!r}"
            )
        self._sync()
        self._core.release_held(request_id)
        self._kick()

    def held(self) -> tuple[str, ...]:
        """Prefill role: requests whose prompt is done and whose blocks are held."""
        return tuple(self._core.held)

    async def reserved(self, request_id: str) -> Reservation:
        """Decode role: wait until blocks are reserved for ``request_id``, and return them.

        Raises:
            InvalidRequestError: ``request_id`` is not committed to this decode engine.
            EngineError: the reservation was cancelled (:meth:`cancel_reservation`) while
                waiting.
        """
        done = self._reservations.get(request_id)
        if done is not None:
            return done
        s = self._core.seqs.get(request_id)
        if s is None or s.state != "reserving":
            raise InvalidRequestError(
                f"request {request_id!r} has no reservation on engine {self.index}"
            )
        waiter = self._reservation_waiters.get(request_id)
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
            self._reservation_waiters[request_id] = waiter
        return await waiter

    def activate(
        self,
        request_id: str,
        *,
        transfer_tokens: int | None = None,
        transfer_ms: float | None = None,
    ) -> None:
        """Decode role: the KV transfer of ``request_id`` is done (§6.4). Records
        ``TRANSFER_DONE``; the request joins the waiting queue with its prompt KV resident
        (``num_computed = P - 1``) and samples its first token in its first pass.

        Raises:
            InvalidRequestError: ``request_id`` has no reservation here.
        """
        if request_id not in self._core.reserved:
            raise InvalidRequestError(
                f"request {request_id!r} has no reservation on engine {self.index}"
            )
        detail: list[tuple[str, object]] = []
        if transfer_tokens is not None:
            detail.append(("transfer_tokens", transfer_tokens))
        if transfer_ms is not None:
            detail.append(("transfer_ms", transfer_ms))
        self._reservations.pop(request_id, None)
        now = simclock.now_ns()
        self._sync()
        self._core.activate(request_id, now, tuple(detail))
        if not self._in_pass():
            # with a pass in flight, the blocks are published at its end
            self._publish(now)
        self._kick()

    def cancel_reservation(self, request_id: str) -> None:
        """Decode role: drop ``request_id``'s queued or made reservation, freeing its blocks.

        Raises:
            InvalidRequestError: ``request_id`` has no reservation here.
        """
        s = self._core.seqs.get(request_id)
        if s is None or s.state not in ("reserving", "reserved"):
            raise InvalidRequestError(
                f"request {request_id!r} has no reservation on engine {self.index}"
            )
        self._sync()
        self._core.cancel_reservation(request_id)
        self._reservations.pop(request_id, None)
        waiter = self._reservation_waiters.pop(request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(
                EngineError(
                    f"the reservation of request {request_id!r} on engine {self.index} "
                    "was cancelled"
                )
            )
        self._kick()

    def cancel(self, request_id: str, *, record: bool = True) -> bool:
        """The client cancelled ``request_id``: drop it from this engine now.

        Wherever the request is (waiting, running, held, reserved), it leaves the queues, its
        blocks are freed (they stay cached) and ``CANCELLED`` is recorded, its terminal
        event; a pass in flight that includes it commits without it. Offline cancellation is
        immediate (REFERENCE-workloads §5.7).

        Args:
            request_id: the request.
            record: record ``CANCELLED``; False when another engine that held the request
                records it (a P/D request held by a prefill engine and reserved on a decode
                engine ends once).

        Returns:
            True if the request was on this engine, False otherwise (nothing recorded).
        """
        self._sync()
        s = self._core.cancel(request_id)
        if s is None:
            return False
        self._reservations.pop(request_id, None)
        waiter = self._reservation_waiters.pop(request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(
                EngineError(f"request {request_id!r} on engine {self.index} was cancelled")
            )
        if record:
            self.journal.record(
                LifecycleEvent(simclock.now_ns(), EventKind.CANCELLED, request_id, self.index)
            )
        self._kick()
        return True

    def crash(self) -> tuple[str, ...]:
        """The engine fails now: every request placed on it (waiting, running, held for a
        transfer, reserved) is dropped with its blocks, no event is recorded for them (the
        caller says what becomes of them), and the engine is closed. Open offers stay open
        until their owner aborts them (:meth:`abort` still works).

        Returns:
            The ids of the requests dropped, in the order they were committed here.
        """
        self._sync()
        dropped = tuple(self._core.seqs)
        for request_id in dropped:
            self.cancel(request_id, record=False)
        self.close()
        return dropped

    # -- the coroutine -----------------------------------------------------------------------

    def close(self) -> None:
        """No more work will be offered; :meth:`run` returns once the engine has drained."""
        self._closed = True
        self._wake.set()

    def _kick(self) -> None:
        """Something reached the engine: wake it when idle, split a macro-stepped run."""
        if self._run is not None:
            self._split()
        self._wake.set()

    async def _idle(self) -> None:
        self._wake.clear()
        if self.on_idle is not None:
            self.on_idle(self)
        await self._wake.wait()

    def _reserve(self, now_ns: int) -> bool:
        """Make the reservations the free blocks allow, in queue order; return whether one
        was made for a waiting transfer (:meth:`reserved`)."""
        woke = False
        made = self._core.process_reservations(now_ns)
        self._reserved_one = bool(made) and self.config.reserve_one_per_pass
        for s in made:
            reservation = Reservation(
                s.rid,
                self.index,
                now_ns,
                s.nkeyed if self.config.enable_prefix_caching else 0,
                len(s.blocks) - (s.nkeyed if self.config.enable_prefix_caching else 0),
                self.config.block_size,
            )
            self._reservations[s.rid] = reservation
            waiter = self._reservation_waiters.pop(s.rid, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(reservation)
                woke = True
        return woke

    async def run(self) -> None:
        """The engine coroutine; returns after :meth:`close` once nothing is left to do.

        Raises:
            EngineError: the coroutine was started twice.
        """
        if self._started:
            raise EngineError(f"engine {self.index} is already running")
        self._started = True
        core = self._core
        transitions = core.kv.pending_keys  # cleared in place, never replaced
        index = self.index
        waiter = f"engine[{index}]"
        instant_end = simclock.instant_end
        clock = asyncio.get_running_loop()
        if not isinstance(clock, simclock.VirtualEventLoop):
            simclock.now_ns()  # raises NotVirtualLoopError, naming the loop that runs
            raise EngineError(f"engine {index} needs a simclock.VirtualEventLoop")
        deadline = simclock.Deadline(waiter=waiter, rank=index)
        wait_until = deadline.wait_until
        self._clock = clock
        self._deadline = deadline
        journal = self.journal
        plan_run = core.scheduler.plan_run
        plan_passes = PLAN_PASSES
        # After a commit, when nothing else can run at this instant (no ready callback, no due
        # timer, no other instant-end waiter), waiting for the instant's end would resume at
        # once with nothing run in between: the pass starts straight away instead.
        settled = False
        while True:
            if not (core.running or core.waiting or core.reservations or core.reserved):
                settled = False
                if self._closed:
                    return
                await self._idle()
                continue
            if settled:
                settled = False
            else:
                await instant_end(priority=index, waiter=waiter)
            now = clock.time_ns()
            if self._pins_due:
                self._hold_offers()
            if core.reservations and self._reserve(now):
                # a transfer may complete at the instant of its reservation (zero time):
                # transfer completions come before the pass that starts then (§3.1)
                await instant_end(priority=index, waiter=waiter)
                if self._pins_due:
                    self._hold_offers()
            if (
                self.macro_stepping
                and core.running
                and not core.reservations
                and not self._kv_subscribers
                and journal.token_events_from_ns > now
            ):
                run = plan_run(now, self._publish, plan_passes)
                if run is not None:
                    self._run = run
                    try:
                        while not run.done:
                            await wait_until(run.next_wake_ns())
                            with deadline.turn():
                                run.advance(clock.time_ns(), include_end=True, include_start=False)
                    except asyncio.CancelledError:
                        # cancelled while waiting (the run is being shut down): leave the
                        # state where the per-pass engine has it. Any other exception may
                        # come from inside a commit, whose state is not to be applied again.
                        self._sync()
                        raise
                    finally:
                        self._run = None
                    plan_passes = max(PLAN_PASSES, 2 * run.committed)
                    settled = clock.next_event_ns() != clock.time_ns()
                    continue
            plan = core.schedule(now)
            if plan is None:
                self._publish(now)
                if self._reserved_one and core.reservations:
                    continue  # idle: the next reservation is made at once, in a turn of its own
                if core.has_work() or not self._closed:
                    await self._idle()
                continue
            self._pass = plan
            end = plan.end_ns
            if end > now:
                await wait_until(end)
            # else: a zero-duration pass commits at once, at the same instant
            with deadline.turn():
                core.commit(plan)
            self._pass = None
            if transitions:
                self._publish(end)
            settled = clock.next_event_ns() != end

    def _publish(self, now_ns: int) -> None:
        """Publish the key transitions of the KV cache made since the last publication.

        What was last published is the cache's key set less the transitions still pending
        (:meth:`EngineView.prefix_overlap` reads it so), so with nobody subscribed,
        publishing is forgetting the pending list.
        """
        kv = self._core.kv
        if not kv.pending_keys:
            return
        if not self._kv_subscribers:
            kv.clear_transitions()
            return
        # published before anyone is told, so a subscriber reading a view sees all of it
        pending = kv.transitions
        kv.clear_transitions()
        run_kind: bool | None = None
        run: list[int] = []
        for stored, key in pending:
            if stored is not run_kind and run:
                self._emit(now_ns, bool(run_kind), run)
                run = []
            run_kind = stored
            run.append(key)
        if run:
            self._emit(now_ns, bool(run_kind), run)

    def _published_keys(self) -> Callable[[int], bool]:
        """Return a test of whether a key was cached as of the last publication."""
        kv = self._core.kv
        cache = kv.cache
        if not kv.pending_keys:
            return cache.__contains__
        # a key's state before its first pending transition is its published state
        before: dict[int, bool] = {}
        for stored, key in zip(kv.pending_kinds, kv.pending_keys, strict=True):
            before.setdefault(key, not stored)

        def published(key: int) -> bool:
            was = before.get(key)
            return key in cache if was is None else was

        return published

    def _emit(self, now_ns: int, stored: bool, keys: list[int]) -> None:
        event = KVEvent(now_ns, self.index, "stored" if stored else "removed", tuple(keys))
        for callback in self._kv_subscribers:
            callback(event)


@attrs.frozen
class EngineView:
    """What a policy may read of an engine; every property is live.

    Attributes:
        engine: the engine viewed (read through the properties, never mutate it).
    """

    _engine: Engine = attrs.field(repr=False)

    def __repr__(self) -> str:
        return f"EngineView(engine={self._engine.index})"

    @property
    def index(self) -> int:
        """The engine's index: its stable id (:attr:`id`)."""
        return self._engine.index

    @property
    def id(self) -> int:
        """The engine's stable id: its index in the topology for the engines a run starts
        with (``0 .. n-1``), the next unused number for an engine added later; never
        reused."""
        return self._engine.index

    @property
    def role(self) -> Role:
        """The engine's role."""
        return self._engine.config.role

    @property
    def block_size(self) -> int:
        """The engine's KV block size ``E``."""
        return self._engine.config.block_size

    @property
    def waiting_count(self) -> int:
        """Requests in the waiting queue (including preempted ones and, on a decode-role
        engine, the reservation queue)."""
        core = self._engine._core
        return len(core.waiting) + len(core.reservations)

    @property
    def running_count(self) -> int:
        """Requests in the running list."""
        self._engine._sync()
        return len(self._engine._core.running)

    @property
    def outstanding_prefill_tokens(self) -> int:
        """Positions still to compute before each queued or running request next samples
        (prompt, or recompute after preemption), prefix hits not yet subtracted."""
        self._engine._sync()
        return self._engine._core.prefill_outstanding

    @property
    def outstanding_decode_tokens(self) -> int:
        """Tokens still to generate by queued and running requests."""
        self._engine._sync()
        return self._engine._core.decode_outstanding

    @property
    def kv_blocks_free(self) -> int:
        """Blocks in the free queue (cached or not)."""
        self._engine._sync()
        return self._engine._core.kv.free_count

    @property
    def kv_blocks_used(self) -> int:
        """Blocks referenced by at least one request."""
        self._engine._sync()
        kv = self._engine._core.kv
        return kv.num_blocks - kv.free_count

    @property
    def kv_blocks_total(self) -> int:
        """Usable blocks, ``num_blocks``."""
        return self._engine.config.num_blocks

    @property
    def pending_offers(self) -> int:
        """Offers made and neither committed nor aborted yet."""
        return len(self._engine._offers)

    def expected_prefix_overlap(self, block_keys: Sequence[int]) -> int:
        """Return how many leading ``block_keys`` are cached now or will be (blocks).

        Unlike :meth:`prefix_overlap`, nothing lags: a key counts when the cache holds it now
        (blocks a pass in flight computed included), or when it is among the prompt keys of
        a request placed here (waiting, running, held) or of an open offer, whose prompt
        will be computed here. So a policy that places several requests at one instant sees
        the earlier placements. It is an expectation, not a promise: a request placed here
        may be cancelled, and cached blocks may be evicted before a new request is admitted.
        """
        engine = self._engine
        engine._sync()
        keys = list(block_keys)
        if not keys or not engine.config.enable_prefix_caching:
            return 0
        first = keys[0]
        best = 0
        core = engine._core
        for s in core.seqs.values():
            if s.keys and s.keys[0] == first:
                best = max(best, _common_prefix(keys, s.keys))
        e = engine.config.block_size
        for tentative in engine._offers.values():
            request = tentative.request
            theirs = engine._known_keys(request, request.input_length // e)
            if theirs and theirs[0] == first:
                best = max(best, _common_prefix(keys, theirs))
        # and the keys cached now from there on (the cache's prefix lookup of the rest)
        rest = keys[best:]
        return best + len(core.kv.lookup_prefix(rest, len(rest)))

    @property
    def timing(self) -> TimingModel:
        """The engine's timing model (a frozen value: price a :class:`PassShape` with its
        ``pass_time_ms`` to ask what-if questions)."""
        return self._engine.timing

    @property
    def config(self) -> EngineConfig:
        """The engine's configuration (token budget, ``max_num_seqs``, KV blocks, ...)."""
        return self._engine.config

    @property
    def pass_in_flight(self) -> PassInFlight | None:
        """The pass the engine is running now (its requests, prefill and decode tokens,
        start and end), or ``None`` when it is between passes or idle."""
        engine = self._engine
        plan = engine._plan_in_flight()
        return None if plan is None else pass_in_flight(plan, engine.config.role)

    def estimate(
        self, input_length: int, *, output_length: int = 1, cached_tokens: int = 0
    ) -> PlacementEstimate | None:
        """Estimate, from the engine's state now, when a request placed here now would be
        admitted and produce its first token.

        Replays the engine's scheduling (REFERENCE-engine §3.2: the token budget, running
        requests first, FCFS admission, ``max_num_seqs``, chunked prefill) from the end of the
        pass in flight, the request last in the waiting queue, every pass priced by the
        engine's timing model. It assumes no other request arrives or leaves early, KV
        blocks suffice (no admission waits for blocks, nobody is preempted) and queued
        requests hit only what is cached now; it is exact when that holds and optimistic
        under KV pressure. On a decode engine the request's prompt KV is taken as resident.
        Reading it changes nothing.

        Args:
            input_length: the prompt length ``P``.
            output_length: the tokens to generate (``0``: the prompt's completion is the
                "first token" instant).
            cached_tokens: prompt tokens found cached here (e.g. :attr:`Tentative.hit_tokens`
                or ``PolicyContext.prefix_overlap_tokens``); capped at whole blocks below
                ``P``.

        Returns:
            The estimate, or ``None`` when the replay cannot place the request (nothing
            could run, or it takes more than ``MAX_ESTIMATE_PASSES`` passes).
        """
        return self._engine._estimate(input_length, output_length, cached_tokens, True)

    def queueing_delay_ms(self, input_length: int, *, cached_tokens: int = 0) -> float | None:
        """The estimated wait, in ms, of a request of ``input_length`` tokens placed here now
        until its admission (:meth:`estimate`'s ``admission_ns`` less now); None without an
        estimate."""
        guess = self.estimate(input_length, cached_tokens=cached_tokens)
        if guess is None:
            return None
        return (guess.admission_ns - simclock.now_ns()) / 1_000_000

    def prefill_time_ms(self, tokens: int, *, cached_tokens: int = 0) -> float | None:
        """The estimated time, in ms, to compute a prompt of ``tokens`` positions admitted at
        the next pass start alongside the requests running now (nobody queued ahead of it):
        from that pass start to the end of the pass that completes the prompt.

        Chunked by what the running requests leave of the token budget, each pass priced by
        the timing model with the running requests' steps in it (see :meth:`estimate`).
        """
        guess = self._engine._estimate(tokens, 1, cached_tokens, False)
        if guess is None:
            return None
        return (guess.first_token_ns - guess.admission_ns) / 1_000_000

    def prefix_overlap(self, block_keys: Sequence[int]) -> int:
        """Return how many leading ``block_keys`` are cached, as last published (blocks).

        The count reflects the KV events published so far: blocks cached by a pass still in
        flight are not visible yet.
        """
        engine = self._engine
        engine._sync()
        kv = engine._core.kv
        keys = list(block_keys)
        pending = kv.pending_keys
        if not pending or set(pending).isdisjoint(keys):
            # as last published is as now for every one of these keys: the cache's own
            # prefix lookup, which steps over chains cached at once
            return len(kv.lookup_prefix(keys, len(keys)))
        return overlap_by_key(engine._published_keys(), keys)


def overlap_by_key(cached: Callable[[int], bool], keys: Sequence[int]) -> int:
    """How many leading ``keys`` pass ``cached``, one key at a time (the straightforward
    reading of :meth:`EngineView.prefix_overlap`)."""
    n = 0
    for key in keys:
        if not cached(key):
            break
        n += 1
    return n


def _common_prefix(keys: list[int], other: Sequence[int]) -> int:
    """How many leading keys ``keys`` and ``other`` share. Keys chain (a key names its whole
    prefix), so they agree up to some length and differ everywhere after: a binary search."""
    lo, hi = 0, min(len(keys), len(other))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if keys[mid - 1] == other[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo
