"""What a replay session shows and stops on: breakpoints, stops, and the states of engines,
requests and the policy (:mod:`replay._session`), with the formatting they share."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

from engines import EventKind, LifecycleEvent, PassInFlight, RequestTrace

if TYPE_CHECKING:
    from ._session import ReplaySession

__all__ = (
    "STATE_OF",
    "TERMINAL",
    "Breakpoint",
    "BreakpointKind",
    "EngineState",
    "PolicyState",
    "RequestState",
    "Stop",
    "StopReason",
    "describe_event",
    "describe_pass",
    "event_kind",
    "format_ns",
)

StopReason = Literal["step", "time", "predicate", "request", "breakpoint", "finished", "rewind"]
BreakpointKind = Literal["time", "request", "event", "predicate"]

_EVENT_ALIASES: dict[str, EventKind] = {
    "preemption": EventKind.PREEMPTED,
    "rejection": EventKind.REJECTED,
    "abort": EventKind.ABORTED,
    "dispatch_abort": EventKind.ABORTED,
    "failure": EventKind.FAILED,
}
TERMINAL = frozenset(
    {EventKind.FINISHED, EventKind.REJECTED, EventKind.FAILED, EventKind.CANCELLED}
)
STATE_OF: dict[EventKind, str] = {
    EventKind.ARRIVED: "routing",
    EventKind.TOKENIZED: "routing",
    EventKind.OFFERED: "offered",
    EventKind.ABORTED: "routing",
    EventKind.COMMITTED: "committed",
    EventKind.QUEUED: "waiting",
    EventKind.ADMITTED: "running",
    EventKind.PREFILL_CHUNK: "running",
    EventKind.FIRST_TOKEN: "running",
    EventKind.TOKEN: "running",
    EventKind.PREEMPTED: "waiting",
    EventKind.PREFILL_DONE: "awaiting_decode",
    EventKind.RESERVED: "transferring",
    EventKind.TRANSFER_DONE: "waiting",
    EventKind.FINISHED: "completed",
    EventKind.REJECTED: "rejected",
    EventKind.FAILED: "failed",
    EventKind.CANCELLED: "cancelled",
}


def format_ns(time_ns: int) -> str:
    """Return a virtual time as seconds with all nine decimals, e.g. ``"12.500000000 s"``."""
    seconds, rest = divmod(time_ns, 1_000_000_000)
    return f"{seconds}.{rest:09d} s"


def describe_event(event: LifecycleEvent) -> str:
    """Return one line describing a lifecycle event.

    Example: ``"0.500000000 s  request 'B'  preempted on engine 0 (num_output=40)"``.

    Args:
        event: the event.

    Returns:
        The time, the request, what happened, where, and the event's details.
    """
    where = "" if event.engine is None else f" on engine {event.engine}"
    detail = ", ".join(f"{k}={v!r}" for k, v in event.detail)
    tail = f" ({detail})" if detail else ""
    return (
        f"{format_ns(event.time_ns)}  request {event.request_id!r}  {event.kind.value}{where}{tail}"
    )


def event_kind(value: EventKind | str) -> EventKind:
    if isinstance(value, EventKind):
        return value
    if value in _EVENT_ALIASES:
        return _EVENT_ALIASES[value]
    try:
        return EventKind(value)
    except ValueError:
        names = ", ".join([*sorted(_EVENT_ALIASES), *(k.value for k in EventKind)])
        raise ValueError(f"unknown event kind {value!r}; expected one of: {names}") from None


@attrs.frozen
class Breakpoint:
    """A condition that stops :meth:`ReplaySession.resume` (and the other run methods).

    Attributes:
        number: its number in the session (1, 2, ...).
        kind: ``"time"`` (a virtual instant), ``"request"`` (an event of one request),
            ``"event"`` (an event of some kinds) or ``"predicate"`` (a condition on the session).
        description: what it waits for, in words.
        time_ns: the instant of a time breakpoint.
        request_id: the request of a request breakpoint.
        kinds: the event kinds that trigger it (empty: any kind, for a request breakpoint).
        predicate: the condition of a predicate breakpoint, called with the session before
            every callback.
    """

    number: int
    kind: BreakpointKind
    description: str
    time_ns: int | None = None
    request_id: str | None = None
    kinds: frozenset[EventKind] = frozenset()
    predicate: Callable[[ReplaySession], bool] | None = attrs.field(default=None, eq=False)

    def __repr__(self) -> str:
        return f"<Breakpoint {self.number}: {self.description}>"

    def matches(self, event: LifecycleEvent) -> bool:
        """Whether ``event`` triggers this breakpoint (request and event breakpoints)."""
        if self.kind == "request":
            return event.request_id == self.request_id and (
                not self.kinds or event.kind in self.kinds
            )
        if self.kind == "event":
            return event.kind in self.kinds
        return False


@attrs.frozen
class Stop:
    """Where and why a session stopped.

    Attributes:
        reason: ``"step"``, ``"time"`` (reached the instant asked for), ``"predicate"``,
            ``"request"`` (the request reached the state asked for), ``"breakpoint"``,
            ``"finished"`` (the run is over; :attr:`ReplaySession.result` is set) or
            ``"rewind"`` (:meth:`ReplaySession.back` or a :meth:`ReplaySession.goto` into the
            past re-executed the run up to an earlier stop or instant).
        now_ns: the virtual time.
        events: the lifecycle events that explain the stop: those recorded by the last step,
            or those that matched the breakpoint or request state.
        breakpoint: the breakpoint hit, if any.
        description: all of the above in words (also ``str(stop)``).
    """

    reason: StopReason
    now_ns: int
    events: tuple[LifecycleEvent, ...] = ()
    breakpoint: Breakpoint | None = None
    description: str = ""

    def __str__(self) -> str:
        return self.description

    def __repr__(self) -> str:
        head = self.description.split("\n", 1)[0] or f"{self.reason} at {format_ns(self.now_ns)}"
        tail = f" [{_count(len(self.events), 'event')}]" if self.events else ""
        return f"<Stop {head}{tail}>"


def describe_pass(p: PassInFlight) -> str:
    """One line: a pass's interval and composition."""
    return (
        f"pass {format_ns(p.start_ns)} -> {format_ns(p.end_ns)}: "
        f"{_count(len(p.request_ids), 'request')}, {p.prefill_tokens} prefill + "
        f"{p.decode_tokens} decode tokens"
    )


@attrs.frozen
class EngineState:
    """One engine, as seen between two steps.

    Attributes:
        index: the engine's index.
        role: ``aggregated``, ``prefill`` or ``decode``.
        waiting: request ids in the waiting queue, head first.
        running: request ids in the running list (the batch the next pass serves).
        in_pass: whether a pass is in flight.
        pass_end_ns: when the pass in flight ends (its deadline), if any.
        kv_blocks_used: KV blocks held by requests.
        kv_blocks_free: KV blocks free (cached or not).
        kv_blocks_total: all KV blocks.
        cached_blocks: blocks that hold a reusable prefix key (held or free).
        held: prefill role, requests whose KV is held for a transfer.
        reserving: decode role, requests waiting for a reservation.
        passes: passes planned so far.
        prefill_outstanding: prompt (or recompute) positions still to compute before each
            queued or running request next samples, prefix hits not yet subtracted.
        decode_outstanding: tokens still to generate by queued and running requests.
        current_pass: the pass in flight (interval and composition), if any.
    """

    index: int
    role: str
    waiting: tuple[str, ...]
    running: tuple[str, ...]
    in_pass: bool
    pass_end_ns: int | None
    kv_blocks_used: int
    kv_blocks_free: int
    kv_blocks_total: int
    cached_blocks: int
    held: tuple[str, ...]
    reserving: tuple[str, ...]
    passes: int
    prefill_outstanding: int = 0
    decode_outstanding: int = 0
    current_pass: PassInFlight | None = None

    def describe(self) -> str:
        """Return a few lines about the engine."""
        head = f"engine {self.index} ({self.role}): {self.passes} passes"
        if self.in_pass and self.pass_end_ns is not None:
            head += f", pass in flight until {format_ns(self.pass_end_ns)}"
        lines = [
            head,
            f"  waiting ({len(self.waiting)}): {_ids(self.waiting)}",
            f"  running ({len(self.running)}): {_ids(self.running)}",
            f"  KV blocks: {self.kv_blocks_used} used, {self.kv_blocks_free} free of "
            f"{self.kv_blocks_total}; {self.cached_blocks} hold cached prefixes",
            f"  outstanding: {self.prefill_outstanding} prefill, {self.decode_outstanding} "
            "decode tokens",
        ]
        if self.current_pass is not None:
            lines.append(f"  {describe_pass(self.current_pass)}")
        if self.held:
            lines.append(f"  held for transfer: {_ids(self.held)}")
        if self.reserving:
            lines.append(f"  awaiting reservation: {_ids(self.reserving)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        flight = ""
        if self.current_pass is not None:
            p = self.current_pass
            flight = (
                f", pass to {format_ns(p.end_ns)} ({_count(len(p.request_ids), 'request')}, "
                f"{p.prefill_tokens}+{p.decode_tokens} tokens)"
            )
        return (
            f"<EngineState {self.index} ({self.role}) {len(self.waiting)} waiting, "
            f"{len(self.running)} running, KV {self.kv_blocks_used}/{self.kv_blocks_total}"
            f"{flight}>"
        )


@attrs.frozen
class RequestState:
    """One request, as seen between two steps.

    Attributes:
        request_id: the request.
        state: ``"pending"`` (not released yet), ``"routing"`` (with the policy),
            ``"offered"``, ``"committed"``, ``"waiting"``, ``"running"``,
            ``"awaiting_decode"``, ``"transferring"``, ``"completed"``, ``"rejected"``,
            ``"failed"`` or ``"cancelled"``.
        engine: the engine of its last engine event, if any.
        history: its lifecycle events so far, except per-token ones (the token times are in
            ``trace.token_times_ns``).
        trace: its live :class:`engines.RequestTrace` (``None`` while pending).
    """

    request_id: str
    state: str
    engine: int | None
    history: tuple[LifecycleEvent, ...]
    trace: RequestTrace | None = attrs.field(eq=False)

    def describe(self) -> str:
        """Return the request's state and history, one event per line."""
        where = "" if self.engine is None else f" on engine {self.engine}"
        lines = [f"request {self.request_id!r}: {self.state}{where}"]
        if self.trace is not None and self.trace.token_times_ns:
            lines.append(
                f"  tokens: {len(self.trace.token_times_ns)}, first at "
                f"{format_ns(self.trace.token_times_ns[0])}"
            )
        lines.extend(f"  {describe_event(e)}" for e in self.history)
        return "\n".join(lines)

    def __repr__(self) -> str:
        where = "" if self.engine is None else f" on engine {self.engine}"
        events = _count(len(self.history), "event")
        return f"<RequestState {self.request_id!r} {self.state}{where}, {events}>"


@attrs.frozen
class PolicyState:
    """The policy, as seen between two steps.

    Attributes:
        name: the policy's name.
        held: ids of requests the policy holds (received, not placed, not ended).
        queued: requests released to the policy that it has not taken from its stream yet.
        unsettled: requests received that are neither terminal nor committed to an engine.
        next_wakeup_ns: the earliest instant a policy coroutine sleeps until, if any.
    """

    name: str
    held: tuple[str, ...]
    queued: int
    unsettled: int
    next_wakeup_ns: int | None

    def describe(self) -> str:
        """Return a few lines about the policy."""
        wakeup = "none" if self.next_wakeup_ns is None else format_ns(self.next_wakeup_ns)
        return (
            f"policy {self.name!r}: holds {len(self.held)} ({_ids(self.held)}), "
            f"{self.queued} not yet taken, {self.unsettled} unsettled; next wakeup: {wakeup}"
        )

    def __repr__(self) -> str:
        return (
            f"<PolicyState {self.name!r} holds {len(self.held)}, {self.queued} not yet taken, "
            f"{self.unsettled} unsettled>"
        )


def _ids(ids: tuple[str, ...], limit: int = 8) -> str:
    if not ids:
        return "-"
    shown = ", ".join(ids[:limit])
    return shown + (f", ... (+{len(ids) - limit})" if len(ids) > limit else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
