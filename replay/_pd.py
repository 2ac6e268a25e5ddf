"""Disaggregated prefill/decode (REFERENCE-engine §6): two pools, a KV link, two handshakes.

:class:`Disaggregated` is a topology for :func:`replay.run`: a prefill pool and a decode pool
of engines (prefill engines are indexed first, ``0 .. P-1``, then decode engines
``P .. P+D-1``), a :class:`KVLink`, and a placement order. It supplies the run's policy
runtime, :class:`PDRuntime`, which drives a :class:`policies.PDPolicy`: one ordinary policy
runtime per pool, plus the handoff between them.

A request's way through (source-first, the default)::

    released ─► prefill side places it (offer → commit on a prefill engine)
    ─► prefill engine computes the prompt; at prefill_done its blocks stay held
    ─► decode side places it (offer → commit on a decode engine), in
       (prefill_done, prefill worker index) order, at the end of that instant
    ─► decode engine reserves blocks (FIFO reservation queue)  ─► destination_reserved
    ─► KV transfer (KVLink)  ─► transfer_done: prefill blocks released, request activated
    ─► decode engine admits it (decode_admit), first token, ..., finished

Destination-first: both engines are offered, and both commits made (decode first), when the
request is released; if either side refuses or fails, both are rolled back.

Failure rule: a failure on either side, in either phase, never leaves KV blocks reserved, a
request half-placed, or a request lost. A request whose decode placement fails ends
``rejected`` (an engine refused) or ``failed`` (a commit failed); the prefill blocks it held are
released at that instant. When the run stops early, every handoff in progress is undone (held
prefill blocks released, decode reservations cancelled); the requests concerned end ``failed``
when the run failed, else they are reported as the report classifies them (``incomplete``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import attrs
import numpy as np

import simclock
from engines import (
    BlockKeyer,
    Engine,
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
from policies import (
    ENGINE_CRASHED,
    EngineFailure,
    InactivePlacement,
    PDPolicy,
    PolicyContext,
    PolicyRuntime,
    RequestStatus,
    RequestStream,
)

from ._pd_topology import KVLink, PDConfigError, PlacementOrder

__all__ = (
    "TRANSFER_FAILED",
    "PDRuntime",
)

TRANSFER_FAILED = "transfer_failed"
"""The reason of a request whose KV transfer failed (``REQUEUED`` or ``FAILED``)."""

_NS_PER_MS = 1_000_000

# --------------------------------------------------------------------------------------------
# pool handles: what each pool's policy runtime sees of an engine


@attrs.define(eq=False)
class _PoolEngine:
    """An engine seen from its pool's policy runtime, by its stable id.

    After a successful commit on a decode engine, the P/D runtime is told, so it can start
    the handoff.
    """

    engine: Engine
    on_commit: Callable[[Engine, Tentative], None] | None = None

    @property
    def index(self) -> int:
        return self.engine.index

    @property
    def view(self) -> EngineView:
        return self.engine.view

    def offer(
        self, request: Request, *, estimate: bool = False, inform: bool = True
    ) -> Tentative | Rejection:
        return self.engine.offer(request, estimate=estimate, inform=inform)

    def commit(self, tentative: Tentative) -> None:
        self.engine.commit(tentative)
        if self.on_commit is not None:
            self.on_commit(self.engine, tentative)

    def abort(self, tentative: Tentative, reason: str) -> None:
        self.engine.abort(tentative, reason)

    def subscribe_kv(self, callback: Callable[[KVEvent], None]) -> None:
        self.engine.subscribe_kv(callback)


@attrs.define(eq=False)
class _PairedEngine(_PoolEngine):
    """Destination-first: a prefill engine whose handshake also covers a decode engine.

    ``offer`` offers the prefill engine, asks the P/D policy for a decode engine and offers it;
    ``commit`` commits the decode engine first, then the prefill engine, undoing the decode
    commit (cancelling its reservation) if the prefill commit fails; ``abort`` aborts both.
    Either side refusing makes the whole offer a rejection, with nothing left open.
    """

    owner: PDRuntime | None = None
    _pending: dict[int, Tentative] = attrs.field(factory=dict)

    @property
    def pending(self) -> dict[int, Tentative]:
        """The decode offers paired with open offers of this engine, by offer serial."""
        return self._pending

    def _runtime(self) -> PDRuntime:
        if self.owner is None:
            raise simclock.InternalError("paired engine without a P/D runtime")
        return self.owner

    def offer(
        self, request: Request, *, estimate: bool = False, inform: bool = True
    ) -> Tentative | Rejection:
        answer = self.engine.offer(request, estimate=estimate, inform=inform)
        if isinstance(answer, Rejection):
            return answer
        owner = self._runtime()
        try:
            decode = owner.choose_decode_engine(request)
            decode_answer = (
                decode if isinstance(decode, Rejection) else decode.offer(request, inform=inform)
            )
        except BaseException as error:
            _abort_keeping(
                self.engine, answer, f"decode choice failed: {type(error).__name__}", error
            )
            raise
        if isinstance(decode_answer, Rejection):
            self.engine.abort(
                answer, f"decode engine {decode_answer.engine} rejected: {decode_answer.reason}"
            )
            return Rejection(
                decode_answer.engine,
                request.id,
                decode_answer.reason,
                f"decode engine {decode_answer.engine}: {decode_answer.message}",
            )
        self._pending[answer.serial] = decode_answer
        return answer

    def _decode_engine(self, tentative: Tentative) -> tuple[Engine, Tentative]:
        decode_tentative = self._pending.pop(tentative.serial, None)
        if decode_tentative is None:
            raise simclock.InternalError(
                f"no decode offer paired with offer #{tentative.serial} of request "
                f"{tentative.request.id!r}"
            )
        return self._runtime().engine(decode_tentative.engine), decode_tentative

    def commit(self, tentative: Tentative) -> None:
        decode, decode_tentative = self._decode_engine(tentative)
        rid = tentative.request.id
        try:
            decode.commit(decode_tentative)
        except BaseException as error:
            _abort_keeping(self.engine, tentative, "decode commit failed", error)
            raise
        try:
            self.engine.commit(tentative)
        except BaseException as error:
            try:
                decode.cancel_reservation(rid)
            except BaseException as cleanup:
                error.add_note(
                    f"during cleanup: cancelling the reservation of request {rid!r} on decode "
                    f"engine {decode.index} raised {type(cleanup).__name__}: {cleanup}"
                )
            raise
        self._runtime().handoff_committed(decode, tentative, prefill=self.engine)

    def abort(self, tentative: Tentative, reason: str) -> None:
        decode, decode_tentative = self._decode_engine(tentative)
        first: BaseException | None = None
        try:
            decode.abort(decode_tentative, reason)
        except BaseException as error:
            first = error
        try:
            self.engine.abort(tentative, reason)
        except BaseException as error:
            if first is not None:
                first.add_note(
                    f"during cleanup: abort on prefill engine {self.engine.index} raised "
                    f"{type(error).__name__}: {error}"
                )
                raise first from None
            raise
        if first is not None:
            raise first


def _record_time(record: InactivePlacement) -> int:
    return record.time_ns


def _abort_keeping(engine: Engine, tentative: Tentative, reason: str, error: BaseException) -> None:
    """Abort ``tentative`` on ``engine``; a failure is noted on ``error``, never swallowed."""
    try:
        engine.abort(tentative, reason)
    except BaseException as cleanup:
        error.add_note(
            f"during cleanup: abort of request {tentative.request.id!r} on engine "
            f"{engine.index} raised {type(cleanup).__name__}: {cleanup}"
        )


# --------------------------------------------------------------------------------------------
# the P/D runtime


@attrs.define(eq=False)
class _Handoff:
    """A request between its two engines."""

    request: Request
    prefill: Engine | None = None
    decode: Engine | None = None
    prefill_done_ns: int | None = None
    held: bool = False
    reserved: bool = False
    task: asyncio.Task[None] | None = None
    cancelled: bool = False
    lost: tuple[int | None, bool, str] | None = None
    """Its KV was lost while the decode policy held it: (engine, requeue, reason) of the
    give-back made when the decode policy places it."""


class _Inspector:
    """The policy of the inspection runtime: it never runs."""

    name = "pd:inspect"

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        raise simclock.InternalError("the P/D inspection runtime is never started")


@attrs.define(eq=False)
class PDRuntime:
    """The policy runtime of a disaggregated run: two pool runtimes and the handoff.

    It has the interface :func:`replay.run` uses of a :class:`policies.PolicyRuntime`
    (``start``, ``submit``, ``close``, ``shutdown``, ``status``, ``held_request_ids``,
    ``request_terminal``, ``failure``). The prefill pool's runtime runs ``policy.prefill``
    over the prefill engines; the decode pool's runtime runs ``policy.decode`` over the decode
    engines (source-first) or lends its context to ``policy.choose_decode`` (destination-first).
    A failure in either pool runtime, or in a handoff, poisons the run. Both pools address
    engines by stable id; :meth:`add_engine`, :meth:`drain_engine` and :meth:`remove_engine`
    change a pool (an added engine joins the pool of its role).

    Args:
        policy: the P/D policy.
        prefill_engines: the prefill pool, in index order.
        decode_engines: the decode pool, in index order.
        journal: the run's journal.
        keyer: the run's block keyer.
        rng: the policy's generator; each pool gets a child stream (``rng.spawn(3)``: prefill,
            decode, inspection).
        link: the KV link.
        order: the placement order.
        on_poison: called once with the first failure.
    """

    policy: PDPolicy
    prefill_engines: tuple[Engine, ...]
    decode_engines: tuple[Engine, ...]
    journal: Journal = attrs.field(kw_only=True)
    keyer: BlockKeyer = attrs.field(kw_only=True)
    rng: np.random.Generator = attrs.field(kw_only=True)
    link: KVLink = attrs.field(factory=KVLink, kw_only=True)
    order: PlacementOrder = attrs.field(default="source_first", kw_only=True)
    on_poison: Callable[[BaseException], None] | None = attrs.field(default=None, kw_only=True)
    prefill: PolicyRuntime = attrs.field(init=False)
    decode: PolicyRuntime = attrs.field(init=False)
    transfers: int = attrs.field(default=0, init=False)
    _failure: BaseException | None = attrs.field(default=None, init=False)
    _by_index: dict[int, Engine] = attrs.field(factory=dict, init=False)
    _handoffs: dict[str, _Handoff] = attrs.field(factory=dict, init=False)
    _requests: dict[str, Request] = attrs.field(factory=dict, init=False)
    _batch: list[tuple[int, int, str]] = attrs.field(factory=list, init=False)
    _flush_task: asyncio.Task[None] | None = attrs.field(default=None, init=False)
    _tasks: list[asyncio.Task[None]] = attrs.field(factory=list, init=False)
    _stopped: bool = attrs.field(default=False, init=False)
    _inspector: PolicyRuntime = attrs.field(init=False)
    _failures_ns: tuple[int, ...] = attrs.field(default=(), init=False)
    _failure_p: float = attrs.field(default=0.0, init=False)
    _failure_rng: np.random.Generator | None = attrs.field(default=None, init=False)
    _failure_requeue: bool = attrs.field(default=True, init=False)

    #: KV transfers are timed work no engine shows (:class:`replay.Runtime`).
    runs_timed_work = True

    def __attrs_post_init__(self) -> None:
        for engine in (*self.prefill_engines, *self.decode_engines):
            self._by_index[engine.index] = engine
        prefill_rng, decode_rng, inspect_rng = self.rng.spawn(3)
        self.prefill = PolicyRuntime(
            self.policy.prefill,
            tuple(self._prefill_handle(engine) for engine in self.prefill_engines),
            self.journal,
            self.keyer,
            prefill_rng,
            on_poison=self._poison,
        )
        self.decode = PolicyRuntime(
            self.policy.decode,
            tuple(self._decode_handle(engine) for engine in self.decode_engines),
            self.journal,
            self.keyer,
            decode_rng,
            on_poison=self._poison,
        )
        # Never started and never given a request: dispatching through it is refused.
        self._inspector = PolicyRuntime(
            _Inspector(),
            (*self.prefill_engines, *self.decode_engines),
            self.journal,
            self.keyer,
            inspect_rng,
        )

    @property
    def pool_runtimes(self) -> tuple[PolicyRuntime, PolicyRuntime]:
        """The prefill and the decode pool's policy runtimes (each places on its pool)."""
        return (self.prefill, self.decode)

    def _prefill_handle(self, engine: Engine) -> _PoolEngine:
        if self.order == "destination_first":
            return _PairedEngine(engine, owner=self)
        return _PoolEngine(engine)

    def _decode_handle(self, engine: Engine) -> _PoolEngine:
        return _PoolEngine(engine, self._decode_committed)

    # -- what the runner uses ----------------------------------------------------------------

    @property
    def failure(self) -> BaseException | None:
        """The first failure of either pool runtime or of a handoff, or None."""
        return self._failure

    @property
    def name(self) -> str:
        """The policy's name."""
        return self.policy.name

    @property
    def stream(self) -> RequestStream:
        """The requests released and not yet taken by the prefill side."""
        return self.prefill.stream

    @property
    def unsettled(self) -> int:
        """Requests neither terminal nor committed, on either side."""
        return self.prefill.unsettled + self.decode.unsettled

    @property
    def context(self) -> PolicyContext:
        """A context over every engine by global index (inspection: views, prefix overlap).

        Placing through it is refused: each pool's policy places through its own context.
        """
        return self._inspector.context

    def start(self) -> None:
        """Start both pool runtimes and watch the journal for prefill completions."""
        # Only the kinds the handoff acts on: watching tokens would make every engine record
        # an event per token.
        self.journal.subscribe(
            self._on_event,
            kinds=(
                EventKind.PREFILL_DONE,
                EventKind.REJECTED,
                EventKind.FAILED,
                EventKind.CANCELLED,
            ),
        )
        self.prefill.start()
        self.decode.start()
        if self._failures_ns:
            task = asyncio.get_running_loop().create_task(
                self._fail_transfers(), name="pd:transfer_failures"
            )
            self._tasks.append(task)
            task.add_done_callback(self._task_done)

    def submit(self, request: Request) -> None:
        """Hand a released request to the prefill side."""
        self.prefill.submit(request)
        self._requests[request.id] = request

    def close(self) -> None:
        """No more requests will be released; both pool streams end."""
        self.prefill.close()
        self.decode.close()

    def status(self, request_id: str) -> RequestStatus | None:
        """The request's status in the pool runtime that has it last (decode, else prefill)."""
        status = self.decode.status(request_id)
        return status if status is not None else self.prefill.status(request_id)

    @property
    def wakeup_watch(self) -> Callable[[str], None] | None:
        """Called after every wakeup of either pool's policy (as ``PolicyRuntime``'s)."""
        return self.prefill.wakeup_watch

    @wakeup_watch.setter
    def wakeup_watch(self, watch: Callable[[str], None] | None) -> None:
        self.prefill.wakeup_watch = watch
        self.decode.wakeup_watch = watch

    def held_request_ids(self) -> list[str]:
        """Requests a policy holds: not yet placed on a prefill engine, or prefilled and not
        yet placed on a decode engine."""
        return [*self.prefill.held_request_ids(), *self.decode.held_request_ids()]

    def request_terminal(self, trace: RequestTrace) -> None:
        """A request ended: tell the pool runtimes that had it; forget its handoff."""
        rid = trace.request_id
        self.prefill.request_terminal(trace)
        if self.decode.status(rid) is not None:
            self.decode.request_terminal(trace)
        handoff = self._handoffs.get(rid)
        if handoff is not None and not handoff.held and not handoff.reserved:
            del self._handoffs[rid]
        if handoff is None or rid not in self._handoffs:
            self._requests.pop(rid, None)

    async def shutdown(self) -> None:
        """Stop both pool runtimes and undo every handoff in progress. Never raises."""
        self._stopped = True
        await self.prefill.shutdown()
        await self.decode.shutdown()
        tasks = [t for t in (self._flush_task, *self._tasks) if t is not None]
        for task in tasks:
            if not task.done():
                task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        pending = self._batch[:]
        self._batch.clear()
        for _, _, rid in pending:
            self._stop_handoff(rid)
        for rid in list(self._handoffs):
            self._stop_handoff(rid)

    # -- the cluster ------------------------------------------------------------------------

    def add_engine(self, engine: Engine) -> None:
        """An engine joined the pool of its role (``"prefill"`` or ``"decode"``).

        Raises:
            PDConfigError: the engine's role is neither.
        """
        if engine.role == "prefill":
            pool, handle = self.prefill, self._prefill_handle(engine)
        elif engine.role == "decode":
            pool, handle = self.decode, self._decode_handle(engine)
        else:
            raise PDConfigError(
                f"engine {engine.index} has role {engine.role!r}; a disaggregated topology "
                "adds 'prefill' or 'decode' engines"
            )
        self._by_index[engine.index] = engine
        self._inspector.add_engine(engine)
        pool.add_engine(handle)

    def drain_engine(self, engine: int) -> None:
        """Engine ``engine`` accepts no new placement in its pool."""
        self._pool_of(engine).drain_engine(engine)

    def remove_engine(self, engine: int) -> None:
        """Engine ``engine`` left its pool."""
        self._pool_of(engine).remove_engine(engine)

    def fail_engine(
        self, engine: int, request_ids: Sequence[str], *, requeue: bool
    ) -> EngineFailure:
        """Engine ``engine`` crashed and dropped ``request_ids`` (:meth:`engines.Engine.crash`).

        Every request it had (waiting, running, held for a transfer, reserved, in transfer
        to or from it) loses its KV: a transfer it was part of is cancelled, and what the
        other engine of the handoff holds for the request is released. The request goes
        back to the prefill pool's request stream (``requeue``) or fails (reason
        ``"engine_crashed"``). A request that finished its prefill on the crashed engine and
        is still with the decode policy is given back when the decode policy places it (its
        reservation is then cancelled at once). The crashed engine's pool policy hears
        ``on_engine_removed`` and ``on_engine_failed``.

        Returns:
            What the crashed engine's pool policy was told.
        """
        pool = self._pool_of(engine)
        dropped = [
            rid for rid in request_ids if self._release(rid, engine, requeue, ENGINE_CRASHED)
        ]
        if pool is self.prefill:
            return self.prefill.fail_engine(engine, dropped, requeue=requeue)
        event = self.decode.fail_engine(engine, (), requeue=requeue, lost=dropped)
        if self.order == "destination_first":
            # prefill offers paired with an offer of the crashed engine are withdrawn too
            paired = sorted(
                tentative.request.id
                for index in self.prefill.membership.ids()
                if isinstance(handle := self.prefill.membership.handle(index), _PairedEngine)
                for tentative in handle.pending.values()
                if tentative.engine == engine
            )
            for rid in paired:
                self.prefill.withdraw(rid, ENGINE_CRASHED)
        for rid in dropped:
            self._give_back(rid, engine, requeue, ENGINE_CRASHED)
        return event

    def set_transfer_failures(
        self,
        at_ns: Sequence[int],
        probability: float,
        rng: np.random.Generator,
        *,
        requeue: bool,
    ) -> None:
        """Make KV transfers fail: every transfer in progress at each instant of ``at_ns``,
        and each transfer, at its end, with ``probability`` (drawn from ``rng``, one draw per
        transfer in the order transfers start, only when ``probability > 0``). A failed
        transfer's request goes back to the prefill pool's stream (``requeue``) or fails
        (reason ``"transfer_failed"``); its held prefill blocks and its decode reservation
        are released. Call before :meth:`start`."""
        self._failures_ns = tuple(sorted(at_ns))
        self._failure_p = probability
        self._failure_rng = rng
        self._failure_requeue = requeue

    async def _fail_transfers(self) -> None:
        for at_ns in self._failures_ns:
            if at_ns > simclock.now_ns():
                await simclock.sleep_until_ns(at_ns, waiter="pd:transfer_failures")
            failing = [
                rid
                for rid, handoff in self._handoffs.items()
                if handoff.task is not None and not handoff.task.done()
            ]
            for rid in failing:
                self._fail_transfer(rid)

    def _fail_transfer(self, rid: str) -> None:
        handoff = self._handoffs[rid]
        engine = None if handoff.decode is None else handoff.decode.index
        requeue = self._failure_requeue
        if self._release(rid, None, requeue, TRANSFER_FAILED):
            self._give_back(rid, engine, requeue, TRANSFER_FAILED)

    def _release(self, rid: str, crashed: int | None, requeue: bool, reason: str) -> bool:
        """``rid`` lost its KV (on engine ``crashed``, or in transfer when None): stop its
        transfer, free what the engines of its handoff still hold for it, and take it off
        the decode side. Returns whether it can be given back now (else the decode policy
        holds it, and it is given back when placed)."""
        handoff = self._handoffs.get(rid)
        if handoff is None:
            return True
        task = handoff.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        handoff.task = None
        handoff.held = handoff.reserved = False
        for other in (handoff.prefill, handoff.decode):
            if other is not None and other.index != crashed:
                other.cancel(rid, record=False)
        if self._batch:
            self._batch[:] = [item for item in self._batch if item[2] != rid]
        status = self.decode.status(rid)
        if status in ("held", "offered"):
            handoff.lost = (crashed, requeue, reason)
            return False
        del self._handoffs[rid]
        if status == "committed":
            self.decode.forget(rid)
        return True

    def _give_back(self, rid: str, engine: int | None, requeue: bool, reason: str) -> None:
        """Give ``rid`` back to the prefill side (requeued or failed)."""
        self.prefill.give_back(rid, engine, requeue=requeue, reason=reason)

    def _give_back_lost(self, handoff: _Handoff) -> None:
        """The decode policy placed a request whose KV was lost: cancel its reservation and
        give it back."""
        if handoff.lost is None:
            return
        engine, requeue, reason = handoff.lost
        rid = handoff.request.id
        self._handoffs.pop(rid, None)
        if handoff.decode is not None:
            handoff.decode.cancel(rid, record=False)
        self.decode.forget(rid)
        self._give_back(rid, engine, requeue, reason)

    @property
    def inactive_placements(self) -> tuple[InactivePlacement, ...]:
        """Offers refused, and commits made, on engines of either pool not accepting
        placements, in time order (prefill first at one instant)."""
        both = (*self.prefill.inactive_placements, *self.decode.inactive_placements)
        return tuple(sorted(both, key=_record_time))

    def _pool_of(self, engine: int) -> PolicyRuntime:
        return self.prefill if self.prefill.membership.state(engine) is not None else self.decode

    # -- context for destination-first ------------------------------------------------------

    def engine(self, index: int) -> Engine:
        """Return the engine with stable id ``index``."""
        return self._by_index[index]

    def choose_decode_engine(self, request: Request) -> Engine | Rejection:
        """Destination-first: ask the policy for ``request``'s decode engine.

        Returns:
            The engine, or the refusal when it accepts no placements (draining or removed;
            the decode pool keeps it with its refused offers).

        Raises:
            policies.PlacementError: the policy returned an unknown engine id.
        """
        engine = self.policy.choose_decode(request, self.decode.context)
        self.decode.view(engine)  # validates the id
        if engine in self.decode.membership.accepting:
            return self._by_index[engine]
        return self.decode.refuse(request, engine)

    # -- the handoff --------------------------------------------------------------------------

    def _handoff(self, request: Request) -> _Handoff:
        handoff = self._handoffs.get(request.id)
        if handoff is None:
            handoff = _Handoff(request)
            self._handoffs[request.id] = handoff
        return handoff

    def _decode_committed(self, engine: Engine, tentative: Tentative) -> None:
        handoff = self._handoff(tentative.request)
        handoff.decode = engine
        if handoff.lost is not None:
            # its KV was lost while the decode policy held it: undo once the commit is made
            asyncio.get_running_loop().call_soon(self._give_back_lost, handoff)
            return
        handoff.reserved = True
        if handoff.prefill_done_ns is not None:
            self._start_transfer(handoff)

    def handoff_committed(self, decode: Engine, tentative: Tentative, *, prefill: Engine) -> None:
        """Destination-first: both engines committed ``tentative.request``."""
        handoff = self._handoff(tentative.request)
        handoff.prefill = prefill
        handoff.decode = decode
        handoff.reserved = True

    def _on_event(self, event: LifecycleEvent) -> None:
        kind = event.kind
        if kind is EventKind.PREFILL_DONE:
            engine = event.engine
            if engine is None or engine not in self._by_index:
                return
            prefill = self._by_index[engine]
            request = self._requests.get(event.request_id)
            if request is None:
                return  # not released through this runtime
            handoff = self._handoff(request)
            handoff.prefill = prefill
            handoff.prefill_done_ns = event.time_ns
            handoff.held = True
            if self._stopped:
                self._stop_handoff(event.request_id)
                return
            self._batch.append((engine, len(self._batch), event.request_id))
            if self._flush_task is None:
                self._flush_task = asyncio.get_running_loop().create_task(
                    self._flush(), name="pd:handoff"
                )
                self._flush_task.add_done_callback(self._task_done)
        elif kind is EventKind.CANCELLED:
            # The engines dropped the request wherever it was (held on the prefill side,
            # reserved on the decode side) and freed its blocks: nothing is left to undo, and
            # its handoff stops where it is.
            stopped = self._handoffs.get(event.request_id)
            if stopped is not None:
                stopped.cancelled = True
                stopped.held = stopped.reserved = False
                if stopped.task is not None and not stopped.task.done():
                    stopped.task.cancel()
        elif kind is EventKind.REJECTED or kind is EventKind.FAILED:
            # The request ended before its handoff: release what it still holds, at once.
            ended = self._handoffs.get(event.request_id)
            if ended is not None and (ended.task is None or ended.task.done()):
                try:
                    self._undo(ended)
                except Exception as error:  # a broken engine: the run fails, naming it
                    self._poison(error)

    async def _flush(self) -> None:
        """At the end of the instant, hand prefilled requests on in prefill worker order."""
        try:
            await simclock.instant_end(priority=-1, waiter="pd:handoff")
        finally:
            self._flush_task = None
        batch = sorted(self._batch)
        self._batch.clear()
        for _, _, rid in batch:
            handoff = self._handoffs[rid]
            if handoff.cancelled:
                continue
            if self._stopped:
                self._stop_handoff(rid)
            elif self.order == "source_first":
                self.decode.submit(handoff.request)
            elif handoff.decode is not None:
                self._start_transfer(handoff)
            else:
                raise simclock.InternalError(
                    f"request {rid!r} finished prefill without a decode engine"
                )

    def _start_transfer(self, handoff: _Handoff) -> None:
        task = asyncio.get_running_loop().create_task(
            self._transfer(handoff), name=f"pd:transfer:{handoff.request.id}"
        )
        handoff.task = task
        self._tasks.append(task)
        task.add_done_callback(self._task_done)

    async def _transfer(self, handoff: _Handoff) -> None:
        request = handoff.request
        rid = request.id
        prefill, decode = handoff.prefill, handoff.decode
        if prefill is None or decode is None or handoff.prefill_done_ns is None:
            raise simclock.InternalError(f"transfer of request {rid!r} started too early")
        fails = self._failure_p > 0 and self._draw_failure()
        reservation = await decode.reserved(rid)
        start_ns = max(reservation.at_ns, handoff.prefill_done_ns)
        tokens = self.link.transfer_tokens(
            prompt_tokens=request.input_length,
            missing_blocks=reservation.missing_blocks,
            block_size=reservation.block_size,
        )
        transfer_ms = self.link.transfer_ms(tokens)
        done_ns = start_ns + round(transfer_ms * _NS_PER_MS)
        if done_ns > simclock.now_ns():
            await simclock.sleep_until_ns(done_ns, waiter=f"pd:transfer:{rid}")
        if fails:
            self._fail_transfer(rid)
            return
        handoff.held = False
        prefill.release_held(rid)
        handoff.reserved = False
        decode.activate(rid, transfer_tokens=tokens, transfer_ms=transfer_ms)
        self.transfers += 1

    def _draw_failure(self) -> bool:
        rng = self._failure_rng
        if rng is None:
            raise simclock.InternalError("transfer failures without a generator")
        return bool(rng.random() < self._failure_p)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._poison(error)

    def _undo(self, handoff: _Handoff) -> None:
        """Release what ``handoff`` still holds on either engine."""
        rid = handoff.request.id
        if handoff.reserved and handoff.decode is not None:
            handoff.reserved = False
            handoff.decode.cancel_reservation(rid)
        if handoff.held and handoff.prefill is not None:
            handoff.held = False
            handoff.prefill.release_held(rid)

    def _stop_handoff(self, rid: str) -> None:
        """The run stopped: undo ``rid``'s handoff; it fails if the run failed."""
        handoff = self._handoffs.get(rid)
        if handoff is None or (not handoff.held and not handoff.reserved):
            return
        in_progress = handoff.prefill_done_ns is not None
        try:
            self._undo(handoff)
        except Exception as error:  # a broken engine: keep it with the run's failure
            self._poison(error)
        trace = self.journal.traces.get(rid)
        if (
            in_progress
            and self._failure is not None
            and trace is not None
            and trace.terminal_status is None
        ):
            self.journal.record(
                LifecycleEvent(
                    simclock.now_ns(),
                    EventKind.FAILED,
                    rid,
                    None,
                    (("reason", "handoff stopped: the run failed"),),
                )
            )

    def _poison(self, failure: BaseException) -> None:
        if self._failure is not None:
            if failure is not self._failure:
                self._failure.add_note(f"later failure: {type(failure).__name__}: {failure}")
            return
        self._failure = failure
        if self.on_poison is not None:
            self.on_poison(failure)
