"""A replay's timeline as Chrome trace-event JSON, loadable in Perfetto and chrome://tracing.

A :class:`TimelineRecorder` subscribes to the run's journal and turns lifecycle events into
trace events as they happen, keeping only what the timeline needs (not the events):

- one process per engine (``engine 0``, ...), one for the router (frontend and policy), and
  one for the KV link when a request is transferred (prefill/decode topologies);
- an ``X`` slice per engine pass on the engine's ``passes`` thread, with ``batch_size``,
  ``prefill_tokens``, ``decode_tokens`` and ``request_ids`` in ``args``. Passes are rebuilt
  from the engine's events: a pass ends where its tokens (or its prefill chunks) end; it
  starts at its prefill chunks' start, else at an admission since the previous pass, else
  where the previous pass ended (an engine with running requests never idles);
- nestable async spans (``b``/``e``, category ``request``, ``id2.local`` = the request id) for
  each phase of a request: ``tokenize`` and ``route`` on the router, ``queued``,
  ``prefill`` and ``decode`` on an engine, ``reserve`` (waiting for a decode reservation: on
  the prefill engine until a decode engine is chosen, then on that engine) and ``transfer``
  on the KV link. A phase left at the instant it began is not shown;
- flow arrows from the router's ``dispatch`` slice to the pass that first runs the request,
  and from the prefill engine's pass to the decode engine's pass;
- counters per engine: ``requests`` (``waiting``, ``running``) and ``kv_blocks`` (``used``),
  sampled from the engines' read-only views when an event touches the engine (once per
  instant for token events);
- instants for preemptions, rejections, dispatch aborts, failures and cancellations.

Times are microseconds (``ts``, ``dur``) computed from integer nanoseconds. The output is
deterministic: the same run gives the same bytes. Filters (a virtual time window, a set of
request ids) keep timelines of long traces small.
"""

from __future__ import annotations

import gc
import io
import json
import os
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import BinaryIO, Protocol

import attrs

from engines import PASS_KINDS, EngineView, EventKind, Journal, LifecycleEvent

from ._cost import engine_count
from ._files import write_file_set
from ._report import EngineUsage

__all__ = (
    "EngineCounters",
    "Timeline",
    "TimelineFilter",
    "TimelineRecorder",
    "timeline_from_events",
)

ROUTER_PID = 0
#: An instant no event reaches.
_NEVER = 2**63
_TOKEN = EventKind.TOKEN
_FIRST_TOKEN = EventKind.FIRST_TOKEN
_PASSES_TID = 0
_DISPATCH_TID = 0

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
TraceEvent = dict[str, JsonValue]


class EngineCounters(Protocol):
    """What the recorder samples from an engine (``engines.EngineView`` satisfies it)."""

    @property
    def waiting_count(self) -> int:
        """Requests in the waiting queue."""
        ...

    @property
    def running_count(self) -> int:
        """Requests in the running list."""
        ...

    @property
    def kv_blocks_used(self) -> int:
        """KV blocks held by requests."""
        ...


@attrs.frozen
class TimelineFilter:
    """Which part of a run a timeline shows.

    Attributes:
        start_ns: show nothing that ends before this virtual instant (``None``: from 0).
        end_ns: show nothing that starts after this virtual instant (``None``: to the end).
            Spans crossing a bound are clipped to it.
        request_ids: show only these requests' spans, flows and instants, and only the
            passes that ran at least one of them or ran on an engine while one of them
            waited there (``None``: every request). Counters are shown whatever the
            request filter.
    """

    start_ns: int | None = attrs.field(default=None, kw_only=True)
    end_ns: int | None = attrs.field(default=None, kw_only=True)
    request_ids: frozenset[str] | None = attrs.field(
        default=None,
        kw_only=True,
        converter=attrs.converters.optional(frozenset),
    )

    def __attrs_post_init__(self) -> None:
        if self.start_ns is not None and self.end_ns is not None and self.end_ns < self.start_ns:
            raise ValueError(
                f"timeline window ends ({self.end_ns} ns) before it starts ({self.start_ns} ns)"
            )

    def overlaps(self, start_ns: int, end_ns: int) -> bool:
        """Whether ``[start_ns, end_ns]`` meets the window."""
        return (self.start_ns is None or end_ns >= self.start_ns) and (
            self.end_ns is None or start_ns <= self.end_ns
        )

    def clip(self, start_ns: int, end_ns: int) -> tuple[int, int]:
        """Return ``[start_ns, end_ns]`` clipped to the window (assumes they overlap)."""
        lo = start_ns if self.start_ns is None else max(start_ns, self.start_ns)
        hi = end_ns if self.end_ns is None else min(end_ns, self.end_ns)
        return lo, hi

    def shows(self, request_id: str) -> bool:
        """Whether ``request_id`` passes the request filter."""
        return self.request_ids is None or request_id in self.request_ids


@attrs.define(eq=False)
class _PassAcc:
    """Everything seen so far of the pass of one engine that ends at one instant."""

    chunk_start_ns: int | None = None
    prefill: dict[str, int] = attrs.Factory(dict)
    sampled: list[str] = attrs.Factory(list)

    def batch(self, admitted: Sequence[str]) -> list[str]:
        """The pass's requests: continuing ones (sampling first), then those it admitted."""
        fresh = [r for r in admitted if r in self.prefill or r in self.sampled]
        skip = set(fresh)
        out = [r for r in self.sampled if r not in skip]
        skip.update(out)
        out += [r for r in self.prefill if r not in skip]
        return out + fresh


@attrs.frozen
class _Span:
    request_id: str
    name: str
    pid: int
    start_ns: int
    end_ns: int
    args: tuple[tuple[str, JsonValue], ...]


@attrs.define(eq=False)
class _Open:
    name: str
    pid: int
    start_ns: int
    args: tuple[tuple[str, JsonValue], ...] = ()


@attrs.frozen
class _Instant:
    time_ns: int
    pid: int
    name: str
    request_id: str
    args: tuple[tuple[str, JsonValue], ...]


@attrs.frozen
class _Flow:
    request_id: str
    name: str
    source_pid: int
    source_ns: int
    target_pid: int
    target_ns: int


def _json_safe(value: object) -> JsonValue:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, tuple | list):
        return [_json_safe(v) for v in value]
    return str(value)


def _us(time_ns: int) -> int | float:
    """Microseconds from integer nanoseconds: an int when whole, else the exact decimal."""
    whole, rest = divmod(time_ns, 1000)
    return whole if rest == 0 else time_ns / 1000


@attrs.define(eq=False)
class TimelineRecorder:
    """Builds a timeline from lifecycle events, as a journal subscriber.

    Usage: ``recorder = TimelineRecorder(views=[e.view for e in engines])``,
    ``recorder.attach(journal)`` (or ``journal.subscribe(recorder.on_event)``, which never
    gives up an event kind), run, then ``recorder.timeline()``. Without
    ``views`` there are no counters. Feeding a finished run's ``journal.events`` to
    :meth:`on_event` gives the same timeline minus the counters
    (:func:`timeline_from_events`).

    State: per request, the open phase span; per engine, the passes not yet complete; the
    closed spans, instants, flows and counter samples so far. The recorder only reads what
    it is given: recording never changes a run.

    With a ``filter``, the recorder keeps only what the filter can show: spans, instants,
    flows, dispatches and counter samples outside the window or of other requests are
    dropped as they are recorded, and so are passes outside the window (a pass ends where
    it ends, and starts no earlier than the previous pass's end, so both are known in time).
    Its memory follows the window, not the run; the timeline is the one the same filter
    gives over a recorder that kept everything.

    Attributes:
        views: the engines' read-only views, by engine index (sampled for counters).
        engine_usage: the run's engine usage (``replay.Run``'s), read when the timeline is
            built: when the cluster changed, an ``engines`` counter on the router holds the
            engines starting, active and draining over time.
        engine_names: display names by engine index (default ``engine <i>`` plus the role).
        filter: the window and requests the timeline will show; applied while recording.
    """

    views: Sequence[EngineCounters] = attrs.field(default=(), kw_only=True)
    engine_usage: Callable[[], Sequence[EngineUsage]] | None = attrs.field(
        default=None, kw_only=True
    )
    engine_names: Sequence[str] = attrs.field(default=(), kw_only=True)
    filter: TimelineFilter = attrs.field(factory=lambda: TimelineFilter(), kw_only=True)
    _open: dict[str, _Open] = attrs.field(factory=dict, init=False)
    _spans: list[_Span] = attrs.field(factory=list, init=False)
    _instants: list[_Instant] = attrs.field(factory=list, init=False)
    _flows: list[_Flow] = attrs.field(factory=list, init=False)
    _dispatches: list[tuple[int, str, int]] = attrs.field(factory=list, init=False)
    _pending_commit: dict[tuple[str, int], int] = attrs.field(factory=dict, init=False)
    _last_pass: dict[str, tuple[int, int]] = attrs.field(factory=dict, init=False)
    _passes: dict[int, dict[int, _PassAcc]] = attrs.field(factory=dict, init=False)
    _admissions: dict[int, list[int]] = attrs.field(factory=dict, init=False)
    _admitted: dict[tuple[int, int], list[str]] = attrs.field(factory=dict, init=False)
    _counters: dict[int, list[tuple[int, int, int, int | None]]] = attrs.field(
        factory=dict, init=False
    )
    _roles: dict[int, str] = attrs.field(factory=dict, init=False)
    _engines_seen: set[int] = attrs.field(factory=set, init=False)
    _uses_link: bool = attrs.field(default=False, init=False)
    _last_ns: int = attrs.field(default=0, init=False)
    # per engine: the latest end of a pass that ended before the window (not kept), and the
    # first end of a pass after the window's end (later passes start after it: not kept)
    _ended_before: dict[int, int] = attrs.field(factory=dict, init=False)
    _ended_after: dict[int, int] = attrs.field(factory=dict, init=False)
    # attached to a journal with a window end: after this instant, see whether the per-pass
    # kinds can be given up (_NEVER once they are, or when they cannot be)
    _narrow_after: int = attrs.field(default=_NEVER, init=False)
    _give_up_pass_kinds: Callable[[], object] = attrs.field(
        default=lambda: None, init=False
    )  # replaced by attach() with a window end

    def attach(self, journal: Journal) -> None:
        """Subscribe to ``journal``: ``journal.subscribe(recorder.on_event)``, and more.

        With a window start, the recorder needs the per-pass events of the passes ending in
        the window and of each engine's last pass before it (where the first pass shown
        starts), not of the passes before: engines macro-step up to there
        (``passes_from_ns``). With a window end and the engines' own views
        (``engines.EngineView``), it gives up ``TOKEN`` and ``PREFILL_CHUNK`` events once
        nothing they carry can be shown: at the first event after the window's end at which
        no engine runs a pass that started in the window and no readmitted request the
        window shows is still computing its prompt. Engines then take their fast path again
        for the rest of the run. The timeline is the same bytes as a recorder that took
        every event.

        Args:
            journal: the run's journal.
        """
        journal.subscribe(self.on_event, passes_from_ns=self.filter.start_ns or 0)
        end = self.filter.end_ns
        if end is not None:
            self._narrow_after = end
            self._give_up_pass_kinds = partial(
                journal.resubscribe, self.on_event, kinds=_WITHOUT_PASS_KINDS
            )

    def _narrow(self) -> None:
        """Give up the per-pass kinds if nothing they would bring can be shown (see
        :meth:`attach`); called for events after the window's end until it does."""
        end = self._narrow_after
        for view in self.views:
            if not isinstance(view, EngineView):
                self._narrow_after = _NEVER  # what a view runs cannot be asked: keep them
                return
            running = view.pass_in_flight
            if running is not None and running.start_ns <= end:
                return  # its tokens end a pass the window shows
        for phase in self._open.values():
            if phase.name == "prefill" and phase.start_ns <= end and _READMISSION in phase.args:
                return  # a token (not a first token) ends it
        self._narrow_after = _NEVER
        self._give_up_pass_kinds()

    # -- recording ------------------------------------------------------------------

    def on_event(self, event: LifecycleEvent) -> None:
        """Journal subscriber: fold one lifecycle event into the timeline.

        Args:
            event: the event just recorded (events arrive in non-decreasing time).
        """
        t = event.time_ns
        if t > self._last_ns:
            self._last_ns = t
            if t > self._narrow_after:
                self._narrow()
        kind = event.kind
        rid = event.request_id
        engine = event.engine
        if engine is not None and (kind is _TOKEN or kind is _FIRST_TOKEN):
            # The hot path: one event per sampled token.
            acc = self._pass(engine, t)
            if acc is not None:
                acc.sampled.append(rid)
            current = self._open.get(rid)
            if current is not None and current.name == "prefill":
                self._switch(rid, t, "decode", engine + 1)
            samples = self._counters.get(engine)
            if not samples or samples[-1][0] != t:
                self._sample(engine, t)
            return
        if engine is not None:
            self._engines_seen.add(engine)
            if kind is EventKind.QUEUED or kind is EventKind.ADMITTED:
                role = event.get("role")
                if isinstance(role, str) and role != "aggregated":
                    self._roles.setdefault(engine, role)
        if kind is EventKind.ARRIVED:
            self._switch(rid, t, "route", ROUTER_PID)
        elif kind is EventKind.TOKENIZED:
            current = self._open.get(rid)
            if current is not None and current.name == "route":
                current.name = "tokenize"
            self._switch(rid, t, "route", ROUTER_PID)
        elif kind is EventKind.COMMITTED and engine is not None:
            current = self._open.get(rid)
            if current is not None and current.name == "route":
                self._close(rid, t)
            if self.filter.shows(rid) and self.filter.overlaps(t, t):
                self._dispatches.append((t, rid, engine))
            self._pending_commit[(rid, engine)] = t
        elif kind is EventKind.ABORTED:
            self._instant(t, ROUTER_PID, "dispatch aborted", event)
        elif kind is EventKind.QUEUED and engine is not None:
            current = self._open.get(rid)
            if current is not None and current.name == "reserve":
                # P/D: the reservation request reached the decode engine; wait there.
                if current.pid != engine + 1:
                    self._switch(rid, t, "reserve", engine + 1)
            elif current is None or current.name != "queued" or current.pid != engine + 1:
                self._switch(rid, t, "queued", engine + 1)
        elif kind is EventKind.ADMITTED and engine is not None:
            self._on_admitted(event, t, rid, engine)
        elif kind is EventKind.PREFILL_CHUNK and engine is not None:
            end = event.get("end_ns")
            tokens = event.get("tokens")
            end_ns = end if isinstance(end, int) else t
            acc = self._pass(engine, end_ns)
            if acc is not None:
                acc.chunk_start_ns = t if acc.chunk_start_ns is None else min(acc.chunk_start_ns, t)
                acc.prefill[rid] = acc.prefill.get(rid, 0) + (
                    tokens if isinstance(tokens, int) else 0
                )
            self._last_pass[rid] = (engine, t)
        elif kind is EventKind.PREEMPTED and engine is not None:
            self._instant(t, engine + 1, "preempted", event)
            self._switch(rid, t, "queued", engine + 1, (("after_preemption", True),))
        elif kind is EventKind.PREFILL_DONE and engine is not None:
            self._switch(rid, t, "reserve", engine + 1)
        elif kind is EventKind.RESERVED:
            self._uses_link = True
            self._switch(rid, t, "transfer", -1)
        elif kind is EventKind.TRANSFER_DONE and engine is not None:
            self._switch(rid, t, "queued", engine + 1)
        elif kind is EventKind.FINISHED:
            self._close(rid, t)
        elif kind is EventKind.REJECTED:
            self._close(rid, t)
            self._instant(t, ROUTER_PID if engine is None else engine + 1, "rejected", event)
        elif kind is EventKind.FAILED:
            self._close(rid, t)
            self._instant(t, ROUTER_PID if engine is None else engine + 1, "failed", event)
        elif kind is EventKind.CANCELLED:
            self._close(rid, t)
            self._instant(t, ROUTER_PID if engine is None else engine + 1, "cancelled", event)
        if engine is not None and kind is not EventKind.PREFILL_CHUNK:
            self._sample(engine, t)

    def _sample(self, engine: int, t: int) -> None:
        """Sample engine ``engine``'s counters at ``t`` (the last sample of an instant wins)."""
        if engine >= len(self.views) or not self.filter.overlaps(t, t):
            return
        view = self.views[engine]
        sample = (t, view.waiting_count, view.running_count, view.kv_blocks_used)
        samples = self._counters.setdefault(engine, [])
        if samples and samples[-1][0] == t:
            samples[-1] = sample
        else:
            samples.append(sample)

    def _on_admitted(self, event: LifecycleEvent, t: int, rid: str, engine: int) -> None:
        readmission = bool(event.get("is_readmission", False))
        decode_activation = event.get("role") == "decode" and not readmission
        args: tuple[tuple[str, JsonValue], ...] = (
            ("reused_tokens", _json_safe(event.get("reused_tokens", 0))),
        )
        if readmission:
            args += (("readmission", True),)
        self._switch(rid, t, "decode" if decode_activation else "prefill", engine + 1, args)
        after = self._ended_after.get(engine)
        if after is None or t < after:  # later admissions start passes not shown
            self._admissions.setdefault(engine, []).append(t)
            self._admitted.setdefault((engine, t), []).append(rid)
        commit_ns = self._pending_commit.pop((rid, engine), None)
        if commit_ns is not None:
            self._flow(_Flow(rid, "dispatch", ROUTER_PID, commit_ns, engine + 1, t))
        previous = self._last_pass.get(rid)
        if previous is not None and previous[0] != engine:
            self._flow(_Flow(rid, "handoff", previous[0] + 1, previous[1], engine + 1, t))
        self._last_pass[rid] = (engine, t)

    def _flow(self, flow: _Flow) -> None:
        f = self.filter
        if (
            f.shows(flow.request_id)
            and f.overlaps(flow.source_ns, flow.source_ns)
            and f.overlaps(flow.target_ns, flow.target_ns)
        ):
            self._flows.append(flow)

    def _pass(self, engine: int, end_ns: int) -> _PassAcc | None:
        """The pass of ``engine`` ending at ``end_ns``; None when the window cannot show it."""
        by_end = self._passes.setdefault(engine, {})
        acc = by_end.get(end_ns)
        if acc is not None:
            return acc
        f = self.filter
        if f.start_ns is not None and end_ns < f.start_ns:
            # ends before the window: only its end matters (the next pass starts there)
            if end_ns > self._ended_before.get(engine, -1):
                self._ended_before[engine] = end_ns
                self._prune_admissions(engine, end_ns)
            return None
        after = self._ended_after.get(engine)
        if after is not None and end_ns > after:
            return None  # starts after a pass that ended after the window
        if f.end_ns is not None and end_ns > f.end_ns and after is None:
            self._ended_after[engine] = end_ns
        acc = by_end[end_ns] = _PassAcc()
        return acc

    def _prune_admissions(self, engine: int, before_ns: int) -> None:
        """Forget admissions of ``engine`` before ``before_ns`` (no later pass starts there),
        once there are many of them."""
        admissions = self._admissions.get(engine)
        if admissions is None or len(admissions) < _PRUNE_AT:
            return
        keep = [a for a in admissions if a >= before_ns]
        for a in admissions:
            if a < before_ns:
                self._admitted.pop((engine, a), None)
        self._admissions[engine] = keep

    def _switch(
        self,
        rid: str,
        t: int,
        name: str,
        pid: int,
        args: tuple[tuple[str, JsonValue], ...] = (),
    ) -> None:
        self._close(rid, t)
        self._open[rid] = _Open(name, pid, t, args)

    def _close(self, rid: str, t: int) -> None:
        current = self._open.pop(rid, None)
        if current is None:
            return
        f = self.filter
        if f.shows(rid) and f.overlaps(current.start_ns, t):
            self._spans.append(
                _Span(rid, current.name, current.pid, current.start_ns, t, current.args)
            )

    def _instant(self, t: int, pid: int, name: str, event: LifecycleEvent) -> None:
        if not self.filter.shows(event.request_id) or not self.filter.overlaps(t, t):
            return
        args: tuple[tuple[str, JsonValue], ...] = (("request_id", event.request_id),)
        if event.engine is not None:
            args += (("engine", event.engine),)
        args += tuple((k, _json_safe(v)) for k, v in event.detail)
        self._instants.append(_Instant(t, pid, name, event.request_id, args))

    # -- output ---------------------------------------------------------------------

    def timeline(self, filter: TimelineFilter | None = None) -> Timeline:
        """Return the timeline of everything recorded so far.

        Phases still open are closed at the latest event time with ``incomplete: true``.

        Args:
            filter: the window and requests to show: by default, the recorder's own filter;
                a recorder built with a filter shows only that one.

        Raises:
            ValueError: ``filter`` differs from the filter the recorder was built with.

        Returns:
            The :class:`Timeline`, ready to serialize.
        """
        # Hundreds of thousands of small dicts: the cyclic collector would rescan the
        # recorder's containers again and again while they are built (none form cycles).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._build(self._output_filter(filter))
        finally:
            if was_enabled:
                gc.enable()

    def _output_filter(self, filter: TimelineFilter | None) -> TimelineFilter:
        if filter is None or filter == self.filter:
            return self.filter
        if self.filter != TimelineFilter():
            raise ValueError(
                "timeline: this recorder kept only what its own filter shows; "
                "ask for that filter (or none)"
            )
        return filter

    def _build(self, f: TimelineFilter) -> Timeline:
        link_pid = max([*self._engines_seen, len(self.views) - 1, -1]) + 2
        records: list[tuple[int, int, TraceEvent]] = []
        seq = 0

        def add(time_ns: int, event: TraceEvent) -> None:
            nonlocal seq
            records.append((time_ns, seq, event))
            seq += 1

        passes = self._pass_list()
        waits = self._waits(f)
        for engine, start, end, acc in passes:
            batch = acc.batch(self._admitted.get((engine, start), ()))
            shown = f.request_ids is None or any(r in f.request_ids for r in batch)
            if not shown:
                # the passes that ran while a shown request waited on this engine: what
                # made it wait
                shown = any(lo < end and start < hi for lo, hi in waits.get(engine, ()))
            if not shown or not f.overlaps(start, end):
                continue
            prefill_tokens = sum(acc.prefill.values())
            decode_tokens = sum(1 for r in acc.sampled if r not in acc.prefill)
            add(
                start,
                {
                    "name": "pass",
                    "cat": "pass",
                    "ph": "X",
                    "ts": _us(start),
                    "dur": _us(end - start),
                    "pid": engine + 1,
                    "tid": _PASSES_TID,
                    "args": {
                        "batch_size": len(batch),
                        "prefill_tokens": prefill_tokens,
                        "decode_tokens": decode_tokens,
                        "request_ids": list[JsonValue](batch),
                    },
                },
            )
        for t, rid, engine in self._dispatches:
            if f.shows(rid) and f.overlaps(t, t):
                add(
                    t,
                    {
                        "name": "dispatch",
                        "cat": "dispatch",
                        "ph": "X",
                        "ts": _us(t),
                        "dur": 0,
                        "pid": ROUTER_PID,
                        "tid": _DISPATCH_TID,
                        "args": {"request_id": rid, "engine": engine},
                    },
                )
        spans = list(self._spans)
        spans.extend(
            _Span(
                rid, o.name, o.pid, o.start_ns, max(o.start_ns, self._last_ns), o.args + _INCOMPLETE
            )
            for rid, o in self._open.items()
        )
        for span in spans:
            if not f.shows(span.request_id) or not f.overlaps(span.start_ns, span.end_ns):
                continue
            lo, hi = f.clip(span.start_ns, span.end_ns)
            if lo == hi and span.args[-1:] != _INCOMPLETE:
                continue  # a phase left at the instant it began (or clipped to nothing)
            pid = link_pid if span.pid == -1 else span.pid
            common: TraceEvent = {
                "name": span.name,
                "cat": "request",
                "id2": {"local": span.request_id},
                "pid": pid,
                "tid": 0,
            }
            args: dict[str, JsonValue] = {"request_id": span.request_id}
            args.update(span.args)
            add(lo, {**common, "ph": "b", "ts": _us(lo), "args": args})
            add(hi, {**common, "ph": "e", "ts": _us(hi)})
        flow_id = 0
        for flow in self._flows:
            if not f.shows(flow.request_id) or not f.overlaps(flow.source_ns, flow.target_ns):
                continue
            if not (f.overlaps(flow.source_ns, flow.source_ns)) or not f.overlaps(
                flow.target_ns, flow.target_ns
            ):
                continue
            flow_id += 1
            tid = _DISPATCH_TID if flow.source_pid == ROUTER_PID else _PASSES_TID
            common = {"name": flow.name, "cat": "flow", "id": flow_id}
            add(
                flow.source_ns,
                {
                    **common,
                    "ph": "s",
                    "ts": _us(flow.source_ns),
                    "pid": flow.source_pid,
                    "tid": tid,
                },
            )
            add(
                flow.target_ns,
                {
                    **common,
                    "ph": "f",
                    "bp": "e",
                    "ts": _us(flow.target_ns),
                    "pid": flow.target_pid,
                    "tid": _PASSES_TID,
                },
            )
        for instant in self._instants:
            if not f.shows(instant.request_id) or not f.overlaps(instant.time_ns, instant.time_ns):
                continue
            add(
                instant.time_ns,
                {
                    "name": instant.name,
                    "cat": "event",
                    "ph": "i",
                    "s": "t",
                    "ts": _us(instant.time_ns),
                    "pid": instant.pid,
                    "tid": _DISPATCH_TID if instant.pid == ROUTER_PID else _PASSES_TID,
                    "args": dict(instant.args),
                },
            )
        for engine in sorted(self._counters):
            previous: tuple[int, int] | None = None
            previous_kv: int | None = None
            for t, waiting, running, kv_used in self._counters[engine]:
                if not f.overlaps(t, t):
                    continue
                if previous != (waiting, running):
                    previous = (waiting, running)
                    add(
                        t,
                        {
                            "name": "requests",
                            "ph": "C",
                            "ts": _us(t),
                            "pid": engine + 1,
                            "args": {"waiting": waiting, "running": running},
                        },
                    )
                if kv_used is not None and kv_used != previous_kv:
                    previous_kv = kv_used
                    add(
                        t,
                        {
                            "name": "kv_blocks",
                            "ph": "C",
                            "ts": _us(t),
                            "pid": engine + 1,
                            "args": {"used": kv_used},
                        },
                    )
        if self.engine_usage is not None:
            # the cluster's engines by state, on the router (only when the cluster changed)
            for count in engine_count(self.engine_usage()):
                t = round(count.at_ms * 1_000_000)
                if not f.overlaps(t, t):
                    continue
                add(
                    t,
                    {
                        "name": "engines",
                        "ph": "C",
                        "ts": _us(t),
                        "pid": ROUTER_PID,
                        "args": {
                            "starting": count.starting,
                            "active": count.active,
                            "draining": count.draining,
                        },
                    },
                )
        records.sort(key=lambda r: (r[0], r[1]))
        metadata = self._metadata(link_pid)
        return Timeline(tuple(metadata + [event for _, _, event in records]))

    def _waits(self, f: TimelineFilter) -> dict[int, list[tuple[int, int]]]:
        """Per engine, the intervals in which a request of ``f``'s request filter waited
        there (its ``queued`` spans); empty without a request filter."""
        if f.request_ids is None:
            return {}
        waits: dict[int, list[tuple[int, int]]] = {}
        spans = [(s.request_id, s.name, s.pid, s.start_ns, s.end_ns) for s in self._spans]
        spans.extend(
            (rid, o.name, o.pid, o.start_ns, max(o.start_ns, self._last_ns))
            for rid, o in self._open.items()
        )
        for rid, name, pid, start, end in spans:
            if pid > ROUTER_PID and name in _WAITING and rid in f.request_ids:
                waits.setdefault(pid - 1, []).append((start, end))
        return waits

    def _pass_list(self) -> list[tuple[int, int, int, _PassAcc]]:
        """Every complete-looking pass as ``(engine, start_ns, end_ns, acc)``, in time order."""
        out: list[tuple[int, int, int, _PassAcc]] = []
        for engine in sorted(self._passes):
            by_end = self._passes[engine]
            admissions = sorted(self._admissions.get(engine, []))
            previous_end: int | None = self._ended_before.get(engine)
            cursor = 0
            for end in sorted(by_end):
                acc = by_end[end]
                while cursor < len(admissions) and admissions[cursor] < end:
                    cursor += 1
                if acc.chunk_start_ns is not None:
                    start = acc.chunk_start_ns
                else:
                    lower = previous_end if previous_end is not None else -1
                    admitted = [a for a in admissions[:cursor] if a >= lower]
                    if admitted:
                        start = admitted[-1]
                    elif previous_end is not None:
                        start = previous_end
                    else:
                        start = end
                out.append((engine, start, end, acc))
                previous_end = end
        return out

    def _metadata(self, link_pid: int) -> list[TraceEvent]:
        engines = sorted(self._engines_seen | set(range(len(self.views))))
        out: list[TraceEvent] = []

        def process(pid: int, name: str, thread: str) -> None:
            out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
            out.append(
                {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}}
            )
            out.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": thread}}
            )

        process(ROUTER_PID, "router", "dispatch")
        for engine in engines:
            if engine < len(self.engine_names):
                name = self.engine_names[engine]
            else:
                role = self._roles.get(engine)
                name = f"engine {engine}" + ("" if role is None else f" ({role})")
            process(engine + 1, name, "passes")
        if self._uses_link:
            process(link_pid, "KV link", "transfers")
        return out


_INCOMPLETE: tuple[tuple[str, JsonValue], ...] = (("incomplete", True),)
_READMISSION: tuple[str, JsonValue] = ("readmission", True)
#: The kinds a recorder past its window still takes: all but those of every pass.
_WITHOUT_PASS_KINDS = frozenset(EventKind) - PASS_KINDS
_WAITING = frozenset({"queued"})
_PRUNE_AT = 4096


@attrs.frozen
class Timeline:
    """A finished timeline: Chrome trace events, in output order.

    Attributes:
        events: the trace events: metadata first, then everything else by time (ties in
            recording order).
    """

    events: tuple[TraceEvent, ...]

    def to_bytes(self) -> bytes:
        """Serialize as Chrome trace JSON (object form), one event per line, keys sorted.

        Returns:
            UTF-8 bytes; the same timeline always gives the same bytes.
        """
        buffer = io.BytesIO()
        self._dump(buffer)
        return buffer.getvalue()

    def _dump(self, out: BinaryIO) -> None:
        encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
        out.write(b'{"displayTimeUnit":"ms","traceEvents":[\n')
        separator = b""
        for event in self.events:
            out.write(separator + encode(event).encode("utf-8"))
            separator = b",\n"
        out.write(b"\n]}\n")

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_bytes` to ``path`` atomically (a temporary file, then a rename).

        The events are encoded as they are written, so the file is never held in memory. The
        file gets the same mode as the report files; on failure a file already at ``path``
        is left as it was.

        Args:
            path: the file to create or replace; its directory must exist.

        Raises:
            OutputError: the file cannot be written (the message names ``path``).
        """
        write_file_set([(Path(path), self._dump)], what="timeline")


def timeline_from_events(
    events: Iterable[LifecycleEvent],
    *,
    filter: TimelineFilter | None = None,
    engine_names: Sequence[str] = (),
) -> Timeline:
    """Build the timeline of a finished run from its kept events (no counters).

    Args:
        events: the run's ``journal.events``, in record order.
        filter: the window and requests to show.
        engine_names: display names by engine index.

    Returns:
        The :class:`Timeline`.
    """
    recorder = TimelineRecorder(engine_names=engine_names)
    for event in events:
        recorder.on_event(event)
    return recorder.timeline(filter)
