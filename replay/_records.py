"""Per-request records: what the report says about one request, and how a trace becomes one.

A record is built from the request's trace once the request has settled (its terminal state
is final): at the end of a run by :func:`replay.finalize`, or, when a run streams its records,
the moment the request settles. Either way the same function builds it, so the record, and
the line of ``requests.jsonl`` it becomes (:func:`request_line`), are the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import attrs

import simclock
from engines import RequestTrace, TokenTimes
from loadgen import TERMINAL_STATUSES, Request, RequestOutcome, TerminalStatus, lineage_to_json

from ._metrics import SLO
from ._token_times_ms import TokenTimesMs

__all__ = (
    "TERMINAL_STATUSES",
    "TOKEN_TIMES_MODES",
    "AdmissionRecord",
    "FaultHit",
    "Handoff",
    "RequestRecord",
    "TerminalStatus",
    "TokenTimesMode",
    "request_json",
)


# Statuses only the release driver knows: a request it cancelled, skipped or never issued.
DRIVER_STATUSES: frozenset[str] = frozenset({"cancelled", "skipped", "never_issued"})

_NS_PER_MS = 1_000_000


@attrs.frozen
class AdmissionRecord:
    """One admission of a request, in milliseconds.

    Attributes:
        at_ms: virtual time of the admission.
        reused_tokens: prefix-cache hit at this admission, in tokens.
        is_readmission: True for an admission after a preemption.
    """

    at_ms: float
    reused_tokens: int
    is_readmission: bool


@attrs.frozen
class Handoff:
    """The prefill→decode handoff of a request in a disaggregated topology (REFERENCE-engine §6).

    Attributes:
        prefill_worker: index of the prefill engine.
        decode_worker: index of the decode engine.
        prefill_admit_ms: admission on the prefill worker.
        prefill_done_ms: end of the prefill.
        destination_reserved_ms: when the decode worker reserved its blocks.
        transfer_done_ms: end of the KV transfer.
        decode_admit_ms: admission on the decode worker.
        transfer_tokens: tokens whose KV was transferred.
        transfer_ms: duration of the transfer.
        decode_reused_tokens: tokens already resident on the decode worker.
    """

    prefill_worker: int | None = None
    decode_worker: int | None = None
    prefill_admit_ms: float | None = None
    prefill_done_ms: float | None = None
    destination_reserved_ms: float | None = None
    transfer_done_ms: float | None = None
    decode_admit_ms: float | None = None
    transfer_tokens: int | None = None
    transfer_ms: float | None = None
    decode_reused_tokens: int | None = None


@attrs.frozen
class FaultHit:
    """A fault that took a request off an engine and gave it back to the policy, which
    placed it again (its record's other fields describe that last placement).

    Attributes:
        at_ms: the instant of the fault.
        engine: the engine it was on.
        reason: what happened (``"engine_crashed"``).
    """

    at_ms: float
    engine: int | None
    reason: str


@attrs.frozen
class RequestRecord:
    """Everything the report knows about one request; times in virtual milliseconds.

    The per-request metrics (``ttft_ms`` ... ``queueing_delay_ms``) are set only for requests
    in the metric population (status ``completed`` with at least one output token) and are the
    values the summary distributions are built from.

    Attributes:
        request_id: the request id.
        status: its terminal state.
        engine: the engine that held it, None if it never reached one.
        input_length: prompt tokens ``P``.
        output_length: requested output tokens ``N``.
        output_tokens: tokens actually produced.
        reused_input_tokens: prefix-cache hit at the first admission.
        num_preemptions: times it was preempted.
        truncated: whether the output was cut at the context limit.
        rejection_reason: why an engine rejected it, if one did.
        failure_reason: why it failed, if it did.
        arrival_ms: release at the frontend (None if never released).
        tokenize_start_ms: start of tokenization (optional stage).
        tokenized_ms: end of tokenization.
        engine_arrival_ms: first arrival in an engine's waiting queue.
        first_admit_ms: first admission.
        first_token_ms: first produced token.
        last_token_ms: last produced token.
        terminal_ms: when it reached its terminal state.
        ttft_ms: ``first_token - arrival``.
        ttst_ms: ``second_token - first_token`` (two or more tokens).
        tpot_ms: ``(last_token - first_token) / (n - 1)`` (two or more tokens).
        e2e_ms: ``last_token - arrival``.
        queueing_delay_ms: ``first_admit - engine_arrival``.
        meets_slo: whether it meets its SLO (its own, else the run's); None without one or
            outside the metric population.
        admissions: every admission, first included.
        token_times_ms: the time of every produced token (a :class:`TokenTimesMs` in a
            record a run built: it reads as the tuple of floats, made when first read).
        conversation_id: its conversation, if any.
        turn_index: its position in the conversation.
        play_id: its agentic play, if any.
        phase: ``measure``, ``primer`` or ``warmup``.
        lineage: conversation lineage as a JSON object, None when absent.
        handoff: the prefill→decode handoff, None in an aggregated topology.
        faults: every fault that took it off an engine and gave it back to the policy
            (:class:`FaultHit`), in order; empty (and left out of ``requests.jsonl``) when
            none did.
        token_time_runs_ns: the token times as runs of equal spacing
            ``(start_ns, step_ns, count)`` (``--token-times runs``).
    """

    request_id: str
    status: TerminalStatus
    engine: int | None
    input_length: int
    output_length: int
    output_tokens: int
    reused_input_tokens: int
    num_preemptions: int
    truncated: bool
    rejection_reason: str | None
    failure_reason: str | None
    arrival_ms: float | None
    tokenize_start_ms: float | None
    tokenized_ms: float | None
    engine_arrival_ms: float | None
    first_admit_ms: float | None
    first_token_ms: float | None
    last_token_ms: float | None
    terminal_ms: float | None
    ttft_ms: float | None
    ttst_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    queueing_delay_ms: float | None
    meets_slo: bool | None
    admissions: tuple[AdmissionRecord, ...]
    token_times_ms: Sequence[float]
    conversation_id: str | None = None
    turn_index: int | None = None
    play_id: str | None = None
    phase: str = "measure"
    lineage: Mapping[str, object] | None = None
    handoff: Handoff | None = None
    faults: tuple[FaultHit, ...] = ()
    token_time_runs_ns: tuple[tuple[int, int, int], ...] = attrs.field(default=(), repr=False)


class _RecordBeingBuilt(RequestRecord):
    """A :class:`RequestRecord` being built: it adds no slot and stores its fields plainly
    (a store the interpreter specialises, not a call through each slot's descriptor), then
    is given ``RequestRecord`` as its class, which CPython allows because the layouts are the
    same: the technique of ``loadgen``'s readers (``bench/read.py`` measures it)."""

    __slots__ = ()
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__
    __init__ = object.__init__


def _blank_record() -> Callable[[], Any] | None:
    """:class:`_RecordBeingBuilt` (called, an empty instance), or None where the class
    assignment is refused."""
    make: Callable[[], Any] = _RecordBeingBuilt
    probe = make()
    try:
        probe.__class__ = RequestRecord
    except TypeError:  # pragma: no cover - CPython allows it
        return None
    return make


_BLANK_RECORD = _blank_record()


class _Fields:
    """A record's fields gathered as plain attributes, where blanks are refused."""


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / _NS_PER_MS


def status_of(trace: RequestTrace | None) -> TerminalStatus:
    """The terminal status of a request; derived when the run left it unset.

    No trace: the request was never released (``never_issued``). Released but never reached
    an engine: the policy held it (``unplaced``). Reached an engine without a terminal state:
    in flight when the run stopped (``incomplete``).
    """
    if trace is None:
        return "never_issued"
    status = trace.terminal_status
    if status is None:
        if trace.engine is None and trace.engine_arrival_ns is None:
            return "unplaced"
        return "incomplete"
    if status not in TERMINAL_STATUSES:
        raise simclock.InternalError(
            f"request {trace.request_id!r} has unknown terminal status {status!r}"
        )
    return status


def identity_fields(request: Request | None) -> dict[str, object]:
    if request is None:
        return {}
    identity = request.identity
    return {
        "conversation_id": identity.conversation_id,
        "turn_index": identity.turn_index,
        "play_id": identity.play_id,
        "phase": identity.phase,
        "lineage": lineage_to_json(identity.lineage),
    }


def handoff_of(trace: RequestTrace) -> Handoff | None:
    if trace.prefill_worker is None and trace.decode_worker is None:
        return None
    return Handoff(
        prefill_worker=trace.prefill_worker,
        decode_worker=trace.decode_worker,
        prefill_admit_ms=_ms(trace.prefill_admit_ns),
        prefill_done_ms=_ms(trace.prefill_done_ns),
        destination_reserved_ms=_ms(trace.destination_reserved_ns),
        transfer_done_ms=_ms(trace.transfer_done_ns),
        decode_admit_ms=_ms(trace.decode_admit_ns),
        transfer_tokens=trace.transfer_tokens,
        transfer_ms=trace.transfer_ms,
        decode_reused_tokens=trace.decode_reused_tokens,
    )


@attrs.frozen
class Settled:
    """A record and the exact figures the summary needs beside it (integer ns, and the
    two delays the record does not carry).

    Attributes:
        record: the request's record.
        arrival_ns: its release, None if never released.
        completion_ns: its end, for a completed request; else None.
        tokenization_ms: ``tokenized - arrival`` for a measured request (else None).
        routing_ms: ``engine_arrival - max(arrival, tokenized)`` likewise.
    """

    record: RequestRecord
    arrival_ns: int | None = None
    completion_ns: int | None = None
    tokenization_ms: float | None = None
    routing_ms: float | None = None


def build_record(
    request: Request | None,
    trace: RequestTrace | None,
    *,
    slo: SLO | None,
    outcome: RequestOutcome | None = None,
) -> Settled:
    """Build the record of one settled request from its workload request and its trace.

    Args:
        request: the workload request (None for a request only the journal knows).
        trace: its trace, None if it was never released.
        slo: the run's SLO (an empty one is None), for ``meets_slo`` of a request without
            an SLO of its own.
        outcome: the release driver's accounting of it, if any: the statuses only the
            driver knows (``cancelled``, ``skipped``, ``never_issued``) win.

    Raises:
        simclock.InternalError: the trace is inconsistent.
    """
    return build_records([(request, trace, outcome)], slo=slo)[0]


ToBuild = tuple[Request | None, RequestTrace | None, RequestOutcome | None]
"""What :func:`build_records` takes per record: ``(request, trace, outcome)``."""


def build_records(items: Sequence[ToBuild], *, slo: SLO | None) -> list[Settled]:
    """:func:`build_record` of each ``(request, trace, outcome)`` of ``items``, in order.

    The records are the same as built one by one; each holds its token times as the runs
    of its trace, in milliseconds when read (:class:`TokenTimesMs`).

    Raises:
        simclock.InternalError: a trace is inconsistent.
    """
    out = []
    for request, trace, outcome in items:
        runs: list[tuple[int, int, int]] = []
        if trace is not None:
            held = trace.token_times_ns
            if not isinstance(held, TokenTimes):  # a trace built by hand may hold a plain list
                held = TokenTimes(held)
            runs = held.runs()
        out.append(_build(request, trace, slo=slo, outcome=outcome, runs=runs))
    return out


def _build(
    request: Request | None,
    trace: RequestTrace | None,
    *,
    slo: SLO | None,
    outcome: RequestOutcome | None,
    runs: list[tuple[int, int, int]],
) -> Settled:
    """The record of one request (see :func:`build_record`), its token instants given as
    runs of integer ns."""
    status = status_of(trace)
    if outcome is not None and outcome.status in DRIVER_STATUSES:
        status = outcome.status  # type: ignore[assignment]
    if request is None and outcome is not None:
        request = outcome.request
    identity = identity_fields(request)
    if request is None and outcome is not None:
        identity = {"play_id": outcome.play_id, "phase": outcome.phase}
    if trace is None:
        if request is None:
            raise simclock.InternalError("a record needs a request or a trace")
        return Settled(
            untraced_record(
                request.id,
                status,
                input_length=request.input_length,
                output_length=request.output_length,
                identity=identity,
            )
        )

    times_ms = TokenTimesMs(runs)
    n = len(times_ms)
    ttft = ttst = tpot = e2e = queueing = tokenization = routing = None
    meets: bool | None = None
    arrival_ns = trace.arrival_ns
    completion_ns: int | None = None
    # Primer and warm-up requests are never measured (REFERENCE-workloads §5.6).
    measured = identity.get("phase", "measure") == "measure"
    if status == "completed":
        if trace.terminal_ns is None:
            raise simclock.InternalError(f"completed request {trace.request_id!r} has no end time")
        completion_ns = trace.terminal_ns
    if status == "completed" and n >= 1 and measured:
        if arrival_ns is None:
            raise simclock.InternalError(f"completed request {trace.request_id!r} has no arrival")
        start, step, count = runs[0]
        first = start
        start, step, count = runs[-1]
        last = start + step * (count - 1)
        ttft = (first - arrival_ns) / _NS_PER_MS
        e2e = (last - arrival_ns) / _NS_PER_MS
        if n >= 2:
            start, step, count = runs[0]
            second = start + step if count >= 2 else runs[1][0]
            ttst = (second - first) / _NS_PER_MS
            tpot = (last - first) / (n - 1) / _NS_PER_MS
        if trace.first_admit_ns is not None and trace.engine_arrival_ns is not None:
            queueing = (trace.first_admit_ns - trace.engine_arrival_ns) / _NS_PER_MS
        if trace.tokenized_ns is not None:
            tokenization = (trace.tokenized_ns - arrival_ns) / _NS_PER_MS
        if trace.engine_arrival_ns is not None:
            ready_ns = arrival_ns if trace.tokenized_ns is None else trace.tokenized_ns
            routing = (trace.engine_arrival_ns - max(arrival_ns, ready_ns)) / _NS_PER_MS
        # a request's own SLO (its trace's, its synthetic spec's) takes the run's place
        judge = slo if request is None or request.slo is None else request.slo
        if judge is not None:
            meets = judge.met(ttft_ms=ttft, tpot_ms=tpot, e2e_ms=e2e)

    # Built with plain stores (_RecordBeingBuilt): the same record as ``RequestRecord(...)``
    # with these values, at a fifth of the cost of its per-field __init__.
    record: Any = _BLANK_RECORD() if _BLANK_RECORD is not None else _Fields()
    record.request_id = trace.request_id
    record.status = status
    record.engine = trace.engine
    record.input_length = trace.input_length
    record.output_length = trace.output_length
    record.output_tokens = n
    record.reused_input_tokens = trace.reused_input_tokens or 0
    record.num_preemptions = trace.num_preemptions
    record.truncated = trace.truncated
    record.rejection_reason = trace.rejection_reason
    record.failure_reason = trace.failure_reason
    record.arrival_ms = _ms(arrival_ns)
    record.tokenize_start_ms = _ms(trace.tokenize_start_ns)
    record.tokenized_ms = _ms(trace.tokenized_ns)
    record.engine_arrival_ms = _ms(trace.engine_arrival_ns)
    record.first_admit_ms = _ms(trace.first_admit_ns)
    record.first_token_ms = runs[0][0] / _NS_PER_MS if n else None
    record.last_token_ms = (
        (runs[-1][0] + runs[-1][1] * (runs[-1][2] - 1)) / _NS_PER_MS if n else None
    )
    record.terminal_ms = _ms(trace.terminal_ns)
    record.ttft_ms = ttft
    record.ttst_ms = ttst
    record.tpot_ms = tpot
    record.e2e_ms = e2e
    record.queueing_delay_ms = queueing
    record.meets_slo = meets
    record.admissions = tuple(
        [
            AdmissionRecord(a.at_ns / _NS_PER_MS, a.reused_tokens, a.is_readmission)
            for a in trace.admissions
        ]
    )
    record.token_times_ms = times_ms
    record.conversation_id = identity.get("conversation_id")
    record.turn_index = identity.get("turn_index")
    record.play_id = identity.get("play_id")
    record.phase = identity.get("phase", "measure")
    record.lineage = identity.get("lineage")
    record.handoff = handoff_of(trace)
    record.faults = _fault_hits(getattr(trace, "faults", None))
    record.token_time_runs_ns = tuple(runs)
    if _BLANK_RECORD is None:  # pragma: no cover - CPython allows the blanks
        record = RequestRecord(**vars(record))
    else:
        record.__class__ = RequestRecord
    return Settled(record, arrival_ns, completion_ns, tokenization, routing)


def _fault_hits(faults: Sequence[tuple[int, int | None, str]] | None) -> tuple[FaultHit, ...]:
    """A trace's faults as records (a trace without the field has none)."""
    if not faults:
        return ()
    return tuple([FaultHit(t / _NS_PER_MS, engine, why) for t, engine, why in faults])


def _corpus_request(outcome: RequestOutcome, by_id: Mapping[str, Request]) -> Request | None:
    """The corpus request a play instance request was made from (``P#k/x`` → ``P/x``)."""
    play = outcome.play_id
    if play is None or "#" not in play or not outcome.request_id.startswith(play):
        return None
    corpus_play = play.rsplit("#", 1)[0]
    return by_id.get(corpus_play + outcome.request_id[len(play) :])


def unreleased_record(outcome: RequestOutcome, by_id: Mapping[str, Request]) -> RequestRecord:
    """The record of a play instance request the driver never released (no trace).

    Lengths and identity come from the request the driver ran (``outcome.request``); an
    outcome without one (built by hand) falls back to the corpus request's lengths and to
    the play id and phase the outcome names.
    """
    status = outcome.status if outcome.status in TERMINAL_STATUSES else "never_issued"
    request = outcome.request
    if request is not None:
        return untraced_record(
            outcome.request_id,
            status,
            input_length=request.input_length,
            output_length=request.output_length,
            terminal_ms=_ms(outcome.terminal_ns),
            identity=identity_fields(request),
        )
    corpus = _corpus_request(outcome, by_id)
    return untraced_record(
        outcome.request_id,
        status,
        input_length=0 if corpus is None else corpus.input_length,
        output_length=0 if corpus is None else corpus.output_length,
        terminal_ms=_ms(outcome.terminal_ns),
        identity={"play_id": outcome.play_id, "phase": outcome.phase},
    )


def untraced_record(
    request_id: str,
    status: str,
    *,
    input_length: int,
    output_length: int,
    identity: Mapping[str, Any],
    terminal_ms: float | None = None,
) -> RequestRecord:
    """The record of a request that never reached an engine: no timeline, no tokens."""
    return RequestRecord(
        request_id=request_id,
        status=status,  # type: ignore[arg-type]
        engine=None,
        input_length=input_length,
        output_length=output_length,
        output_tokens=0,
        reused_input_tokens=0,
        num_preemptions=0,
        truncated=False,
        rejection_reason=None,
        failure_reason=None,
        arrival_ms=None,
        tokenize_start_ms=None,
        tokenized_ms=None,
        engine_arrival_ms=None,
        first_admit_ms=None,
        first_token_ms=None,
        last_token_ms=None,
        terminal_ms=terminal_ms,
        ttft_ms=None,
        ttst_ms=None,
        tpot_ms=None,
        e2e_ms=None,
        queueing_delay_ms=None,
        meets_slo=None,
        admissions=(),
        token_times_ms=(),
        **identity,
    )


def owner_of(record: RequestRecord) -> int | None:
    """The engine a request's completion and preemptions count on: its decode engine once a
    prefill/decode handoff reached one, else the engine it was placed on."""
    if record.handoff is not None and record.handoff.decode_worker is not None:
        return record.handoff.decode_worker
    return record.engine


# --------------------------------------------------------------------------------------------
# One line of requests.jsonl


TokenTimesMode = Literal["full", "runs", "none"]
TOKEN_TIMES_MODES: tuple[TokenTimesMode, ...] = ("full", "runs", "none")
"""How ``requests.jsonl`` holds token times: every time (``token_times_ms``, the default),
runs of equal spacing (``token_time_runs_ms``: ``[start_ms, step_ms, count]`` each), or not
at all."""


def check_token_times(token_times: str) -> None:
    """Raise ``ValueError`` unless ``token_times`` is one of :data:`TOKEN_TIMES_MODES`."""
    if token_times not in TOKEN_TIMES_MODES:
        raise ValueError(
            f"token_times: must be one of {', '.join(TOKEN_TIMES_MODES)}, got {token_times!r}"
        )


def dumps(value: object, *, indent: int | None) -> str:
    """``value`` as the report files write JSON: no NaN, non-ASCII kept, fixed separators."""
    separators = (", ", ": ") if indent is None else (",", ": ")
    return json.dumps(
        value, indent=indent, ensure_ascii=False, allow_nan=False, separators=separators
    )


def jsonable(value: object) -> object:
    """A JSON-compatible copy of ``value`` (mappings, sequences, attrs values, scalars)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, TokenTimesMs):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    cls = type(value)
    if attrs.has(cls):
        return {f.name: jsonable(getattr(value, f.name)) for f in attrs.fields(cls)}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot write {type(value).__name__} value {value!r} to JSON")


def request_json(
    record: RequestRecord, *, token_times: TokenTimesMode = "full"
) -> dict[str, object]:
    """One line of ``requests.jsonl`` as a dict: every field of the record in order.

    ``lineage``, ``handoff`` and ``faults`` are left out when absent, so records of
    workloads without lineage, disaggregation or faults carry no empty keys.
    ``token_times`` chooses how token times are written (:data:`TOKEN_TIMES_MODES`).
    """
    out: dict[str, object] = {}
    for field in _RECORD_FIELDS:
        name = field.name
        value = getattr(record, name)
        if name in ("lineage", "handoff") and value is None:
            continue
        if name == "faults" and not value:
            continue
        if name == "token_time_runs_ns":
            continue
        if name == "token_times_ms":
            if token_times == "none":
                continue
            if token_times == "runs":
                out["token_time_runs_ms"] = [
                    [start / _NS_PER_MS, step / _NS_PER_MS, count]
                    for start, step, count in record.token_time_runs_ns
                ]
                continue
        out[name] = jsonable(value)
    return out


_RECORD_FIELDS = attrs.fields(RequestRecord)


def request_line(record: RequestRecord, *, token_times: TokenTimesMode = "full") -> bytes:
    """One line of ``requests.jsonl``, newline included, UTF-8 encoded."""
    return (dumps(request_json(record, token_times=token_times), indent=None) + "\n").encode()
