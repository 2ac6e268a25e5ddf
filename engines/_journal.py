"""Lifecycle events and per-request traces: what happened to every request, and when.

One :class:`Journal` per run. Engines (and the layers above them: frontend, policies,
topologies) record typed :class:`LifecycleEvent` values into it; the journal keeps the
:class:`RequestTrace` of each request up to date and calls its subscribers synchronously, in
subscription order, once per event.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

import attrs

from simclock import InternalError

from ._tokentimes import TokenTimes

__all__ = ("Admission", "EventKind", "Journal", "LifecycleEvent", "RequestTrace")


class EventKind(enum.Enum):
    """What happened to a request. The value is the lower-case name, for reports.

    Recorded by the engines: ``OFFERED``, ``COMMITTED``, ``ABORTED`` (dispatch handshake),
    ``QUEUED`` (engine arrival), ``ADMITTED`` (into the running list; detail
    ``reused_tokens``, ``is_readmission``), ``PREFILL_CHUNK`` (at the pass start; detail
    ``tokens``, ``computed``, ``end_ns``), ``FIRST_TOKEN``, ``TOKEN``, ``PREEMPTED``,
    ``FINISHED`` (detail ``truncated``), ``REJECTED`` (detail ``reason``), ``PREFILL_DONE``
    (prefill role), ``RESERVED`` and ``TRANSFER_DONE`` (decode role), ``CANCELLED`` (the
    client cancelled it: a profile's grace ended). Recorded by the layers above: ``ARRIVED``,
    ``TOKENIZED``, ``FAILED``, ``CANCELLED`` for a request on no engine, and ``REQUEUED`` (a
    fault took the request off its engine and gave it back to the policy; detail ``reason``:
    ``"engine_crashed"``).
    """

    ARRIVED = "arrived"
    TOKENIZED = "tokenized"
    OFFERED = "offered"
    COMMITTED = "committed"
    ABORTED = "aborted"
    QUEUED = "queued"
    ADMITTED = "admitted"
    PREFILL_CHUNK = "prefill_chunk"
    FIRST_TOKEN = "first_token"
    TOKEN = "token"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    REJECTED = "rejected"
    PREFILL_DONE = "prefill_done"
    RESERVED = "reserved"
    TRANSFER_DONE = "transfer_done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"


@attrs.frozen(init=False)
class LifecycleEvent:
    """One state transition of one request.

    Attributes:
        time_ns: the virtual instant, in integer nanoseconds.
        kind: what happened.
        request_id: whose transition it is.
        engine: the index of the engine involved, or ``None`` (frontend, policy).
        detail: extra ``(name, value)`` pairs, in a fixed order per kind.
    """

    time_ns: int
    kind: EventKind
    request_id: str
    engine: int | None = None
    detail: tuple[tuple[str, object], ...] = ()

    def __init__(
        self,
        time_ns: int,
        kind: EventKind,
        request_id: str,
        engine: int | None = None,
        detail: tuple[tuple[str, object], ...] = (),
    ) -> None:
        # attrs' own __init__ of a frozen class, through each slot's setter: a replay makes
        # one event per request transition, and this halves what each one costs to make.
        _set_time_ns(self, time_ns)
        _set_kind(self, kind)
        _set_request_id(self, request_id)
        _set_engine(self, engine)
        _set_detail(self, detail)

    def get(self, name: str, default: object = None) -> object:
        """Return the detail value called ``name``, or ``default`` when absent."""
        for key, value in self.detail:
            if key == name:
                return value
        return default


_set_time_ns, _set_kind, _set_request_id, _set_engine, _set_detail = (
    getattr(LifecycleEvent, field.name).__set__ for field in attrs.fields(LifecycleEvent)
)


@attrs.frozen
class Admission:
    """One admission of a request into an engine's running list.

    Attributes:
        at_ns: the start of the pass that admitted it.
        reused_tokens: prompt/output positions found in the prefix cache.
        is_readmission: whether the request had been preempted before.
    """

    at_ns: int
    reused_tokens: int
    is_readmission: bool


@attrs.define(eq=False)
class RequestTrace:
    """Everything recorded about one request; updated in place while the run goes on.

    Times are integer virtual nanoseconds; ``None`` means "not (yet) happened".
    ``terminal_status`` is ``None`` while the request is in flight, then ``"completed"``,
    ``"rejected"`` or ``"failed"``.
    """

    request_id: str
    input_length: int = 0
    output_length: int = 0
    arrival_ns: int | None = None
    tokenize_start_ns: int | None = None
    tokenized_ns: int | None = None
    engine_arrival_ns: int | None = None
    engine: int | None = None
    first_admit_ns: int | None = None
    admissions: list[Admission] = attrs.Factory(list)
    token_times_ns: TokenTimes = attrs.Factory(TokenTimes)
    num_preemptions: int = 0
    reused_input_tokens: int | None = None
    terminal_ns: int | None = None
    terminal_status: str | None = None
    rejection_reason: str | None = None
    failure_reason: str | None = None
    truncated: bool = False
    prefill_worker: int | None = None
    decode_worker: int | None = None
    prefill_admit_ns: int | None = None
    prefill_done_ns: int | None = None
    destination_reserved_ns: int | None = None
    transfer_done_ns: int | None = None
    decode_admit_ns: int | None = None
    transfer_tokens: int | None = None
    transfer_ms: float | None = None
    decode_reused_tokens: int | None = None
    faults: list[tuple[int, int | None, str]] = attrs.Factory(list)
    """Faults that took the request off an engine and gave it back to the policy
    (``REQUEUED``): ``(time_ns, engine, reason)`` each, in order."""

    @property
    def first_token_ns(self) -> int | None:
        """The time of the first visible token, or ``None``."""
        return self.token_times_ns[0] if self.token_times_ns else None

    @property
    def last_token_ns(self) -> int | None:
        """The time of the last visible token, or ``None``."""
        return self.token_times_ns[-1] if self.token_times_ns else None


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value


def _token(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.token_times_ns.append(event.time_ns)


def _admitted(trace: RequestTrace, event: LifecycleEvent) -> None:
    t = event.time_ns
    reused = 0
    readmission = False
    role: object = "aggregated"
    for key, value in event.detail:
        if key == "reused_tokens":
            reused = _int(value)
        elif key == "is_readmission":
            readmission = bool(value)
        elif key == "role":
            role = value
    if role == "decode" and not readmission:
        # Activation of a transferred request: its prompt KV arrived by transfer.
        if trace.decode_admit_ns is None:
            trace.decode_admit_ns = t
        return
    trace.admissions.append(Admission(t, reused, readmission))
    if trace.first_admit_ns is None:
        trace.first_admit_ns = t
        trace.reused_input_tokens = reused
    if role == "prefill" and trace.prefill_admit_ns is None:
        trace.prefill_admit_ns = t


def _queued(trace: RequestTrace, event: LifecycleEvent) -> None:
    if trace.engine_arrival_ns is None:
        trace.engine_arrival_ns = event.time_ns
        trace.engine = event.engine
    if event.get("role") == "prefill" and trace.prefill_worker is None:
        trace.prefill_worker = event.engine


def _preempted(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.num_preemptions += 1


def _finished(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.terminal_ns = event.time_ns
    trace.terminal_status = "completed"
    trace.truncated = bool(event.get("truncated", False))


def _rejected(trace: RequestTrace, event: LifecycleEvent) -> None:
    t = event.time_ns
    if trace.engine_arrival_ns is None:
        trace.engine_arrival_ns = t
        trace.engine = event.engine
    trace.terminal_ns = t
    trace.terminal_status = "rejected"
    reason = event.get("reason")
    trace.rejection_reason = None if reason is None else str(reason)


def _failed(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.terminal_ns = event.time_ns
    trace.terminal_status = "failed"
    reason = event.get("reason")
    trace.failure_reason = None if reason is None else str(reason)


def _cancelled(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.terminal_ns = event.time_ns
    trace.terminal_status = "cancelled"


def _arrived(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.arrival_ns = event.time_ns
    trace.input_length = _int(event.get("input_length", trace.input_length))
    trace.output_length = _int(event.get("output_length", trace.output_length))


def _tokenized(trace: RequestTrace, event: LifecycleEvent) -> None:
    t = event.time_ns
    start = event.get("start_ns")
    trace.tokenize_start_ns = t if start is None else _int(start)
    trace.tokenized_ns = t


def _prefill_done(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.prefill_done_ns = event.time_ns


def _reserved(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.decode_worker = event.engine
    trace.destination_reserved_ns = event.time_ns
    trace.decode_reused_tokens = _int(event.get("reused_tokens", 0))


def _transfer_done(trace: RequestTrace, event: LifecycleEvent) -> None:
    trace.transfer_done_ns = event.time_ns
    tokens = event.get("transfer_tokens")
    if tokens is not None:
        trace.transfer_tokens = _int(tokens)
    ms = event.get("transfer_ms")
    if isinstance(ms, int | float) and not isinstance(ms, bool):
        trace.transfer_ms = float(ms)


def _requeued(trace: RequestTrace, event: LifecycleEvent) -> None:
    """The request lost its engine (and every token and block it had there) and goes back to
    the policy: what an engine did with it is forgotten; its release, its counters
    (preemptions) and the fault are kept."""
    reason = event.get("reason")
    trace.faults.append((event.time_ns, event.engine, "fault" if reason is None else str(reason)))
    trace.engine_arrival_ns = None
    trace.engine = None
    trace.first_admit_ns = None
    trace.admissions = []
    trace.token_times_ns = TokenTimes()
    trace.reused_input_tokens = None
    trace.truncated = False
    trace.prefill_worker = trace.decode_worker = None
    trace.prefill_admit_ns = trace.prefill_done_ns = None
    trace.destination_reserved_ns = trace.transfer_done_ns = trace.decode_admit_ns = None
    trace.transfer_tokens = trace.decode_reused_tokens = None
    trace.transfer_ms = None


def _nothing(trace: RequestTrace, event: LifecycleEvent) -> None:
    pass


#: How each kind of event changes a trace: the one place that knows the mapping.
_APPLY: dict[EventKind, Callable[[RequestTrace, LifecycleEvent], None]] = {
    EventKind.ARRIVED: _arrived,
    EventKind.TOKENIZED: _tokenized,
    EventKind.OFFERED: _nothing,
    EventKind.COMMITTED: _nothing,
    EventKind.ABORTED: _nothing,
    EventKind.QUEUED: _queued,
    EventKind.ADMITTED: _admitted,
    EventKind.PREFILL_CHUNK: _nothing,
    EventKind.FIRST_TOKEN: _token,
    EventKind.TOKEN: _token,
    EventKind.PREEMPTED: _preempted,
    EventKind.FINISHED: _finished,
    EventKind.REJECTED: _rejected,
    EventKind.PREFILL_DONE: _prefill_done,
    EventKind.RESERVED: _reserved,
    EventKind.TRANSFER_DONE: _transfer_done,
    EventKind.FAILED: _failed,
    EventKind.CANCELLED: _cancelled,
    EventKind.REQUEUED: _requeued,
}


#: ``_APPLY`` keyed by the kind's value: hashing an enum member runs Python code, a str's not.
#: The kinds whose events change no trace (what :meth:`Journal.mark` takes).
_TRACELESS = frozenset(kind._value_ for kind, apply in _APPLY.items() if apply is _nothing)

_APPLY_BY_VALUE: dict[str, Callable[[RequestTrace, LifecycleEvent], None]] = {
    kind._value_: apply for kind, apply in _APPLY.items()
}

Subscriber = Callable[[LifecycleEvent], object]

_TOKEN = EventKind.TOKEN._value_
_CHUNK = EventKind.PREFILL_CHUNK._value_
#: An instant after every instant of a run: "never" for :attr:`Journal.token_events_from_ns`.
NEVER_NS = 2**63
#: The kinds an engine records at every pass (its tokens, its prompt chunks): a subscriber
#: for them makes engines step pass by pass while it watches.
PASS_KINDS: frozenset[EventKind] = frozenset((EventKind.TOKEN, EventKind.PREFILL_CHUNK))
_PASS_KIND_VALUES = frozenset(kind._value_ for kind in PASS_KINDS)


def _watch(
    kinds: Iterable[EventKind] | None, passes_from_ns: int
) -> tuple[frozenset[str] | None, int]:
    """A subscription's kind values (None: every kind) and its ``passes_from_ns``, checked."""
    if (
        isinstance(passes_from_ns, bool)
        or not isinstance(passes_from_ns, int)
        or passes_from_ns < 0
    ):
        raise ValueError(f"passes_from_ns: must be an int >= 0, got {passes_from_ns!r}")
    values = None if kinds is None else frozenset(EventKind(kind)._value_ for kind in kinds)
    return values, passes_from_ns


@attrs.define(eq=False)
class Journal:
    """The run's record of lifecycle events and per-request traces.

    ``record(event)`` folds the event into ``traces[event.request_id]`` (created on first
    sight, so ``traces`` iterates in first-event order), appends it to ``events`` when
    ``keep_events`` is on, then calls every subscriber watching its kind (see
    :meth:`subscribe`), in subscription order. A subscriber's
    exception propagates to whoever recorded the event.

    Attributes:
        keep_events: keep every event in ``events`` (off for long runs that only need traces).
        token_events: record a ``TOKEN`` event for every token after the first; when off,
            engines append those token times to the traces directly (no event object, no
            subscriber call), which is much faster for long runs. They do so too when events
            are not kept and no subscriber watches ``TOKEN``. ``FIRST_TOKEN`` is always
            recorded.
        traces: request id -> trace, in first-event order.
        events: every recorded event, in record order (empty when ``keep_events`` is off).
        forgotten: traces removed by :meth:`forget`, counted by terminal status.
    """

    keep_events: bool = attrs.field(default=True, kw_only=True)
    token_events: bool = attrs.field(default=True, kw_only=True)
    traces: dict[str, RequestTrace] = attrs.field(factory=dict, init=False, repr=False)
    events: list[LifecycleEvent] = attrs.field(factory=list, init=False, repr=False)
    forgotten: dict[str, int] = attrs.field(factory=dict, init=False, repr=False)
    _subscribers: list[Subscriber] = attrs.field(factory=list, init=False, repr=False)
    # per subscriber, the kind values it watches (None: all), in subscription order
    _kinds: list[frozenset[str] | None] = attrs.field(factory=list, init=False, repr=False)
    _filtered: bool = attrs.field(default=False, init=False, repr=False)
    _watch_all: bool = attrs.field(default=False, init=False, repr=False)
    _watched: frozenset[str] = attrs.field(default=frozenset(), init=False, repr=False)
    _syncers: list[Callable[[], object]] = attrs.field(factory=list, init=False, repr=False)
    _pass_watchers: list[Callable[[], object]] = attrs.field(factory=list, init=False, repr=False)
    # per subscriber, from when it needs per-pass events; the earliest for each kind
    _passes_from: list[int] = attrs.field(factory=list, init=False, repr=False)
    _token_from: int = attrs.field(default=NEVER_NS, init=False, repr=False)
    _chunk_from: int = attrs.field(default=NEVER_NS, init=False, repr=False)

    def add_syncer(self, callback: Callable[[], object]) -> None:
        """Register ``callback``, called by :meth:`sync` (engines that step lazily)."""
        self._syncers.append(callback)

    def add_pass_watcher(self, callback: Callable[[], object]) -> None:
        """Register ``callback``, called when ``TOKEN`` or ``PREFILL_CHUNK`` events come to
        be wanted (a subscriber for them arrived): an engine that steps lazily ends its run
        there, so the new subscriber sees every event the per-pass engine records from now
        on."""
        self._pass_watchers.append(callback)

    def _wants_pass_kinds(self) -> bool:
        """Whether ``TOKEN`` or ``PREFILL_CHUNK`` events are wanted."""
        return self.wants_token_events or self.wants(EventKind.PREFILL_CHUNK)

    def _before_watch(self, values: frozenset[str] | None) -> bool:
        """Before a subscriber for the kinds ``values`` (None: all) comes: whether per-pass
        kinds are wanted already; if they are not and will be, bring engines that step
        lazily to now first (what ran before is applied as nobody watched it)."""
        before = self._wants_pass_kinds()
        if not before and (values is None or not values.isdisjoint(_PASS_KIND_VALUES)):
            self.sync()
        return before

    def _after_watch(self, before: bool) -> None:
        """After a subscriber came: tell the pass watchers if per-pass kinds are now wanted."""
        if not before and self._wants_pass_kinds():
            for callback in self._pass_watchers:
                callback()

    def sync(self) -> None:
        """Bring every trace up to the current instant.

        Macro-stepping engines apply the passes they jump over lazily; a reader of
        :attr:`traces` in the middle of a run calls this first.
        """
        for callback in self._syncers:
            callback()

    def subscribe(
        self,
        callback: Subscriber,
        *,
        kinds: Iterable[EventKind] | None = None,
        passes_from_ns: int = 0,
    ) -> None:
        """Call ``callback(event)`` for every event recorded from now on.

        Args:
            callback: the subscriber.
            kinds: only call it for events of these kinds (default: every kind). A
                subscriber that leaves out ``TOKEN`` and ``PREFILL_CHUNK`` lets engines keep
                their fast path of folding per-token times straight into the traces.
            passes_from_ns: the subscriber needs the ``TOKEN`` and ``PREFILL_CHUNK`` events
                of every pass that ends at or after this instant, and of each engine's last
                pass that ends before it; engines may leave out those of earlier passes (they
                macro-step them) and give it the others as the per-pass engine records them.
                Default 0: every pass's.

        Raises:
            ValueError: ``passes_from_ns`` is negative.
        """
        values, start = _watch(kinds, passes_from_ns)
        before = self._before_watch(values)
        self._subscribers.append(callback)
        self._kinds.append(values)
        self._passes_from.append(start)
        self._refresh_watch()
        self._after_watch(before)

    def resubscribe(
        self,
        callback: Subscriber,
        *,
        kinds: Iterable[EventKind] | None = None,
        passes_from_ns: int = 0,
    ) -> None:
        """Change which events reach ``callback`` (subscribed before), from the next event on.

        A subscriber that needed ``TOKEN`` or ``PREFILL_CHUNK`` events for a while (a
        timeline window) gives them up here, and engines take their fast path again once no
        one else watches those kinds.

        Args:
            callback: a subscriber; the first subscription equal to it is changed.
            kinds: only call it for events of these kinds (default: every kind).
            passes_from_ns: as for :meth:`subscribe`.

        Raises:
            ValueError: ``callback`` is not subscribed, or ``passes_from_ns`` is negative.
        """
        index = next((i for i, s in enumerate(self._subscribers) if s == callback), None)
        if index is None:
            raise ValueError(f"resubscribe: {callback!r} is not subscribed to this journal")
        values, start = _watch(kinds, passes_from_ns)
        before = self._before_watch(values)
        self._kinds[index] = values
        self._passes_from[index] = start
        self._refresh_watch()
        self._after_watch(before)

    def _refresh_watch(self) -> None:
        """Work out what the subscribers watch, and from when engines owe them per-pass
        events, after a subscription changed."""
        watched = [v for v in self._kinds if v is not None]
        self._watch_all = len(watched) < len(self._kinds)
        self._filtered = bool(watched)
        self._watched = frozenset().union(*watched)
        token_from = chunk_from = NEVER_NS
        for values, start in zip(self._kinds, self._passes_from, strict=True):
            if values is None or _TOKEN in values:
                token_from = min(token_from, start)
            if values is None or _CHUNK in values:
                chunk_from = min(chunk_from, start)
        self._token_from = token_from
        self._chunk_from = chunk_from

    @property
    def token_events_from_ns(self) -> int:
        """From when ``TOKEN`` events are owed (:meth:`subscribe`'s ``passes_from_ns``): 0
        when events are kept or someone watches every pass's, :data:`NEVER_NS` when nobody
        watches them (or ``token_events`` is off). Engines macro-step only before it."""
        if not self.token_events:
            return NEVER_NS
        return 0 if self.keep_events else self._token_from

    @property
    def chunk_events_from_ns(self) -> int:
        """From when ``PREFILL_CHUNK`` events are owed, as :attr:`token_events_from_ns`."""
        return 0 if self.keep_events else self._chunk_from

    def wants(self, kind: EventKind) -> bool:
        """Whether an event of ``kind`` is kept or watched by a subscriber."""
        return self.keep_events or self._watch_all or kind._value_ in self._watched

    @property
    def observed(self) -> bool:
        """Whether recorded events are kept or watched (else only traces are updated)."""
        return self.keep_events or bool(self._subscribers)

    @property
    def wants_token_events(self) -> bool:
        """Whether every ``TOKEN`` must be recorded as an event (see ``token_events``)."""
        # wants(EventKind.TOKEN), inlined: engines ask at every pass
        return self.token_events and (
            self.keep_events or self._watch_all or _TOKEN in self._watched
        )

    def trace(
        self, request_id: str, *, input_length: int = 0, output_length: int = 0
    ) -> RequestTrace:
        """Return the trace of ``request_id``, creating an empty one if needed.

        Args:
            request_id: the request.
            input_length: prompt tokens, set on creation.
            output_length: requested output tokens, set on creation.
        """
        trace = self.traces.get(request_id)
        if trace is None:
            trace = RequestTrace(request_id, input_length, output_length)
            self.traces[request_id] = trace
        return trace

    def forget(self, request_id: str) -> RequestTrace | None:
        """Remove and return the trace of ``request_id`` (None if it has none).

        A run that streams its records drops each trace once its request settled and its
        record is built, so memory follows the requests in flight, not the whole run. The
        forgotten traces are still counted by terminal status in :attr:`forgotten`.
        """
        trace = self.traces.pop(request_id, None)
        if trace is not None:
            status = trace.terminal_status or "none"
            self.forgotten[status] = self.forgotten.get(status, 0) + 1
        return trace

    def mark(
        self,
        time_ns: int,
        kind: EventKind,
        request_id: str,
        engine: int | None = None,
        detail: tuple[tuple[str, object], ...] = (),
    ) -> None:
        """:meth:`record` an event of a kind that changes no trace (``OFFERED``,
        ``COMMITTED``, ``ABORTED``), made only when it is kept or watched.

        Otherwise the request's trace is made if it has none, as :meth:`record` does, and
        :meth:`_marked` is told of the kind.

        Raises:
            simclock.InternalError: ``kind`` changes traces (use :meth:`record`).
        """
        if self.wants(kind):
            self.record(LifecycleEvent(time_ns, kind, request_id, engine, detail))
            return
        if kind._value_ not in _TRACELESS:
            raise InternalError(f"{kind._value_} events change traces: record them")
        if request_id not in self.traces:
            self.traces[request_id] = RequestTrace(request_id)
        self._marked(kind._value_)

    def _marked(self, name: str) -> None:
        """An event of kind ``name`` was marked and not made (:meth:`mark`); a journal that
        counts events counts it here."""

    def record(self, event: LifecycleEvent) -> None:
        """Apply ``event`` to its trace, keep it, and tell the subscribers.

        Args:
            event: the transition; its ``time_ns`` must be the current virtual time.
        """
        trace = self.traces.get(event.request_id)
        if trace is None:
            trace = RequestTrace(event.request_id)
            self.traces[event.request_id] = trace
        _APPLY_BY_VALUE[event.kind._value_](trace, event)
        if self.keep_events:
            self.events.append(event)
        if not self._filtered:
            for callback in self._subscribers:
                callback(event)
            return
        value = event.kind._value_
        for callback, kinds in zip(self._subscribers, self._kinds, strict=True):
            if kinds is None or value in kinds:
                callback(event)
