"""Finalization: lifecycle records in, a typed :class:`ReplayResult` out (REFERENCE-engine §8).

:func:`finalize` is the one place a run's per-request traces become the report. The built-in
topologies call it after the loop finishes; a user-supplied composition calls it the same way.
Nothing here reads the wall clock or writes files: the wall time arrives in :class:`RunMeta`
from the caller, and :mod:`replay._output` writes what the caller asks for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np
import numpy.typing as npt

import simclock
from engines import Journal, LifecycleEvent, RequestTrace, TokenTimes
from loadgen import (
    DriverReport,
    PlayOutcome,
    Request,
    RequestOutcome,
    Workload,
    lineage_to_json,
)

from ._metrics import SLO, Distribution

__all__ = (
    "PLAY_OUTCOMES",
    "SCHEMA_VERSION",
    "TERMINAL_STATUSES",
    "AdmissionRecord",
    "EngineSummary",
    "EngineUsage",
    "EventCounter",
    "Goodput",
    "Handoff",
    "LifecycleEvidence",
    "PlaySummary",
    "ReplayResult",
    "RequestRecord",
    "RunMeta",
    "Summary",
    "TerminalStatus",
    "finalize",
)

SCHEMA_VERSION = 1
"""Version of the report schema (``summary.json``, ``requests.jsonl``, ``config.json``)."""

TerminalStatus = Literal[
    "completed",
    "rejected",
    "unplaced",
    "incomplete",
    "failed",
    "cancelled",
    "skipped",
    "never_issued",
]
"""The one terminal state each request ends in."""

TERMINAL_STATUSES: tuple[TerminalStatus, ...] = (
    "completed",
    "rejected",
    "unplaced",
    "incomplete",
    "failed",
    "cancelled",
    "skipped",
    "never_issued",
)
"""Every terminal status, in the order the report lists them."""

PLAY_OUTCOMES: tuple[str, ...] = ("completed", "failed", "incomplete")
"""Every play outcome (REFERENCE-workloads §5.3), in the order the report lists them."""

# Statuses only the release driver knows: a request it cancelled, skipped or never issued.
_DRIVER_STATUSES: frozenset[str] = frozenset({"cancelled", "skipped", "never_issued"})

_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000

IntArray = npt.NDArray[np.int64]


# --------------------------------------------------------------------------------------------
# Lifecycle evidence.


@attrs.define(eq=False)
class EventCounter:
    """A journal subscriber that counts lifecycle events by kind.

    A run that does not keep its events (``Journal(keep_events=False)``) subscribes one and
    passes its :attr:`counts` to :class:`RunMeta` so the report still has lifecycle evidence.

    Attributes:
        counts: events seen so far, by kind value, in first-seen order.
    """

    counts: dict[str, int] = attrs.Factory(dict)

    def __call__(self, event: LifecycleEvent) -> None:
        """Count ``event``."""
        key = event.kind.value
        self.counts[key] = self.counts.get(key, 0) + 1


# --------------------------------------------------------------------------------------------
# The result.


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
        meets_slo: whether it meets every configured SLO; None without an SLO or outside the
            metric population.
        admissions: every admission, first included.
        token_times_ms: the time of every produced token.
        conversation_id: its conversation, if any.
        turn_index: its position in the conversation.
        play_id: its agentic play, if any.
        phase: ``measure``, ``primer`` or ``warmup``.
        lineage: conversation lineage as a JSON object, None when absent.
        handoff: the prefill→decode handoff, None in an aggregated topology.
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
    token_times_ms: tuple[float, ...]
    conversation_id: str | None = None
    turn_index: int | None = None
    play_id: str | None = None
    phase: str = "measure"
    lineage: Mapping[str, object] | None = None
    handoff: Handoff | None = None
    token_time_runs_ns: tuple[tuple[int, int, int], ...] = attrs.field(default=(), repr=False)


@attrs.frozen
class EngineUsage:
    """What the runner measured on one engine, handed to :func:`finalize` in :class:`RunMeta`.

    Attributes:
        index: the engine index.
        busy_ns: total virtual time spent in passes, in ns.
        passes: how many passes ran.
    """

    index: int
    busy_ns: int
    passes: int = 0


@attrs.frozen
class EngineSummary:
    """Per-engine figures of the report.

    Attributes:
        index: the engine index.
        busy_ms: total virtual time spent in passes.
        utilisation: ``busy_ms`` divided by the run's span: latest completion minus
            earliest arrival of any request, primers and warm-ups included (None without a
            span). Without plays this span is ``Summary.duration_s``.
        passes: how many passes ran.
        preemptions: preemptions of requests held by this engine (in a prefill/decode
            topology, of requests whose decode engine it is).
        completed: requests completed on this engine (their decode engine, with P/D).
    """

    index: int
    busy_ms: float | None
    utilisation: float | None
    passes: int | None
    preemptions: int
    completed: int


@attrs.frozen
class Goodput:
    """Completed requests meeting every configured SLO.

    Attributes:
        count: how many requests are good.
        request_goodput: good requests per second of duration (vLLM ``request_goodput``).
        output_throughput: output tokens of good requests per second.
        attainment: good / completed requests of phase ``measure`` (None when nothing
            completed).
        attainment_of_all: good / all requests of phase ``measure``, whatever their status.
    """

    count: int
    request_goodput: float | None
    output_throughput: float | None
    attainment: float | None
    attainment_of_all: float | None


@attrs.frozen
class PlaySummary:
    """What became of a run's agentic plays (REFERENCE-workloads §5.2, §5.3, §5.7).

    Attributes:
        plays: play instances the run started.
        outcome_counts: plays per outcome (``completed``, ``failed``, ``incomplete``), every
            outcome listed.
        trajectory_ms: trajectory latency of the completed plays: last terminal time minus
            first release time of their measured requests.
        profile_start_ms: the warm-up barrier, None without a warm-up.
        cutoff_ms: the profile cutoff, None without a profile.
        idle_shifts: how many times a profile idle cap moved pending timers.
        outcomes: one outcome per play instance, in start order.
    """

    plays: int
    outcome_counts: Mapping[str, int]
    trajectory_ms: Distribution
    profile_start_ms: float | None
    cutoff_ms: float | None
    idle_shifts: int
    outcomes: tuple[PlayOutcome, ...]

    @classmethod
    def of(cls, report: DriverReport) -> PlaySummary:
        """Summarise the plays of a driver report."""
        counts = dict.fromkeys(PLAY_OUTCOMES, 0)
        for play in report.plays:
            counts[play.outcome] = counts.get(play.outcome, 0) + 1
        return cls(
            plays=len(report.plays),
            outcome_counts=counts,
            trajectory_ms=Distribution.of(
                p.trajectory_ms for p in report.plays if p.trajectory_ms is not None
            ),
            profile_start_ms=report.profile_start_ms,
            cutoff_ms=report.cutoff_ms,
            idle_shifts=len(report.idle_shifts),
            outcomes=report.plays,
        )


@attrs.frozen
class Summary:
    """The run's metrics (REFERENCE-engine §8); names follow vLLM's serving benchmark.

    Only phase ``measure`` is measured (REFERENCE-workloads §5.6): the *measured cohort* is
    the completed requests of phase ``measure``, and the metric population is the cohort's
    requests with at least one token. Primer and warm-up requests count in ``requests``,
    ``status_counts``, ``preemptions`` and the engine figures only. Without plays every
    request is of phase ``measure``.

    Attributes:
        requests: how many requests the run accounted for (every phase).
        status_counts: requests per terminal status, every status listed (every phase).
        completed: the measured cohort's size: completed requests of phase ``measure``.
        duration_s: latest completion of the cohort minus earliest arrival of a ``measure``
            request, seconds (None if nothing was measured).
        total_input_tokens: prompt tokens of the cohort.
        total_output_tokens: tokens produced by the cohort.
        request_throughput: cohort requests per second of ``duration_s``.
        input_throughput: prompt tokens of the cohort per second.
        output_throughput: output tokens of the cohort per second.
        total_token_throughput: prompt plus output tokens of the cohort per second.
        ttft_ms: time to first token.
        ttst_ms: time to second token (two or more tokens).
        tpot_ms: per-request time per output token (two or more tokens).
        itl_ms: pooled inter-token gaps of every request in the population.
        e2el_ms: end-to-end latency.
        queueing_delay_ms: engine queueing delay (first admission - engine arrival).
        tokenization_ms: ``tokenized - arrival`` where the tokenizer stage ran.
        routing_delay_ms: ``engine_arrival - max(arrival, tokenized)``: time with the policy.
        output_tokens_per_s_per_user: pooled ``1000 / gap_ms`` over positive gaps.
        slo: the configured SLO, None when none.
        goodput: goodput figures, None without an SLO.
        reused_input_tokens: prefix-cache hits at first admission, of the cohort.
        reused_input_tokens_with_readmissions: hits at every admission, of the cohort.
        prefix_reuse_ratio: ``reused_input_tokens / total_input_tokens``.
        prefix_reuse_ratio_with_readmissions: the same with readmission hits included.
        preemptions: preemptions over all requests (every phase).
        engines: per-engine figures, by index (every phase; utilisation over the whole
            run's span, preparation included).
        plays: agentic play outcomes and trajectory latency; None when the workload has no
            plays (or the run kept no release accounting).
    """

    requests: int
    status_counts: Mapping[str, int]
    completed: int
    duration_s: float | None
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float | None
    input_throughput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    ttft_ms: Distribution
    ttst_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2el_ms: Distribution
    queueing_delay_ms: Distribution
    tokenization_ms: Distribution
    routing_delay_ms: Distribution
    output_tokens_per_s_per_user: Distribution
    slo: SLO | None
    goodput: Goodput | None
    reused_input_tokens: int
    reused_input_tokens_with_readmissions: int
    prefix_reuse_ratio: float | None
    prefix_reuse_ratio_with_readmissions: float | None
    preemptions: int
    engines: tuple[EngineSummary, ...]
    plays: PlaySummary | None = None


@attrs.frozen
class LifecycleEvidence:
    """What happened, counted: the evidence that every request was accounted for.

    ``event_counts`` is the same whether or not the run kept or watched its events: ``token``
    counts every token after a request's first (from the records, as engines fold per-token
    events straight into the traces when no one watches), and per-pass ``prefill_chunk``
    events are not counted.

    Attributes:
        event_counts: lifecycle events by event kind value, keys sorted.
        status_counts: requests per terminal status (every status listed).
        accounted: the number of requests with a terminal status; equals ``requests``.
        requests: the number of requests the run knew of.
    """

    event_counts: Mapping[str, int]
    status_counts: Mapping[str, int]
    accounted: int
    requests: int


@attrs.frozen
class RunMeta:
    """Run metadata the runner hands to :func:`finalize`.

    Attributes:
        seed: the run seed.
        config: the resolved configuration, as JSON-compatible values (echoed to
            ``config.json``).
        virtual_duration_ms: virtual time at the end of the run, in milliseconds.
        wall_time_s: real seconds the run took (console and result only, never in files).
        events_processed: events the virtual loop processed.
        engines: what each engine measured, by index.
        event_counts: lifecycle events by kind, from an :class:`EventCounter`; None to count
            the journal's kept events instead.
        schema_version: the report schema version.
        simclock_version: the simclock version that produced the run.
    """

    seed: int
    config: Mapping[str, object] = attrs.field(factory=dict)
    virtual_duration_ms: float = 0.0
    wall_time_s: float = 0.0
    events_processed: int = 0
    engines: tuple[EngineUsage, ...] = ()
    event_counts: Mapping[str, int] | None = None
    schema_version: int = SCHEMA_VERSION
    simclock_version: str = simclock.__version__


@attrs.frozen
class ReplayResult:
    """The typed result of a replay.

    Attributes:
        summary: the metrics.
        requests: one record per request: the workload's requests in workload order, then any
            other request the journal saw (e.g. play instances) in first-event order.
        evidence: lifecycle event and terminal-status counts.
        meta: run metadata.
        workload_source: the workload's source label.
        workload_format: the workload's format name.
    """

    summary: Summary
    requests: tuple[RequestRecord, ...]
    evidence: LifecycleEvidence
    meta: RunMeta
    workload_source: str | None = None
    workload_format: str | None = None


# --------------------------------------------------------------------------------------------
# finalize


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / _NS_PER_MS


def _status_of(trace: RequestTrace | None) -> TerminalStatus:
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


def _identity_fields(request: Request | None) -> dict[str, object]:
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


def _handoff(trace: RequestTrace) -> Handoff | None:
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


@attrs.define
class _Accumulator:
    """Samples gathered over the metric population while building records."""

    ttft: list[float] = attrs.Factory(list)
    ttst: list[float] = attrs.Factory(list)
    tpot: list[float] = attrs.Factory(list)
    e2e: list[float] = attrs.Factory(list)
    queueing: list[float] = attrs.Factory(list)
    tokenization: list[float] = attrs.Factory(list)
    routing: list[float] = attrs.Factory(list)
    gaps_ns: list[IntArray] = attrs.Factory(list)
    good: int = 0
    good_output_tokens: int = 0
    # The measured span (phase ``measure`` only, REFERENCE-workloads §5.6, §5.7): the latest
    # completion and the earliest arrival of measure requests.
    last_completion_ns: int | None = None
    first_arrival_ns: int | None = None
    # The whole run's span, preparation included: the engines' utilisation is over it.
    run_last_completion_ns: int | None = None
    run_first_arrival_ns: int | None = None

    def span(self, *, measured: bool) -> int | None:
        """Latest completion minus earliest arrival, in ns (None without both)."""
        if measured:
            last, first = self.last_completion_ns, self.first_arrival_ns
        else:
            last, first = self.run_last_completion_ns, self.run_first_arrival_ns
        return None if last is None or first is None else last - first


def _record(
    request: Request | None,
    trace: RequestTrace | None,
    *,
    slo: SLO | None,
    acc: _Accumulator,
    outcome: RequestOutcome | None = None,
) -> RequestRecord:
    status = _status_of(trace)
    if outcome is not None and outcome.status in _DRIVER_STATUSES:
        status = outcome.status  # type: ignore[assignment]
    if request is None and outcome is not None:
        request = outcome.request
    identity = _identity_fields(request)
    if request is None and outcome is not None:
        identity = {"play_id": outcome.play_id, "phase": outcome.phase}
    if trace is None:
        if request is None:
            raise simclock.InternalError("a record needs a request or a trace")
        return _untraced_record(
            request.id,
            status,
            input_length=request.input_length,
            output_length=request.output_length,
            identity=identity,
        )

    held = trace.token_times_ns
    if not isinstance(held, TokenTimes):  # a trace built by hand may hold a plain list
        held = TokenTimes(held)
    tokens_ns = held.array()
    n = int(tokens_ns.size)
    ttft = ttst = tpot = e2e = queueing = None
    meets: bool | None = None
    arrival_ns = trace.arrival_ns
    # Primer and warm-up requests are never measured (REFERENCE-workloads §5.6).
    measured = identity.get("phase", "measure") == "measure"
    if arrival_ns is not None:
        acc.run_first_arrival_ns = _earliest(acc.run_first_arrival_ns, arrival_ns)
        if measured:
            acc.first_arrival_ns = _earliest(acc.first_arrival_ns, arrival_ns)
    if status == "completed":
        if trace.terminal_ns is None:
            raise simclock.InternalError(f"completed request {trace.request_id!r} has no end time")
        acc.run_last_completion_ns = _latest(acc.run_last_completion_ns, trace.terminal_ns)
        if measured:
            acc.last_completion_ns = _latest(acc.last_completion_ns, trace.terminal_ns)
    if status == "completed" and n >= 1 and measured:
        if arrival_ns is None:
            raise simclock.InternalError(f"completed request {trace.request_id!r} has no arrival")
        first, last = int(tokens_ns[0]), int(tokens_ns[-1])
        ttft = (first - arrival_ns) / _NS_PER_MS
        e2e = (last - arrival_ns) / _NS_PER_MS
        acc.ttft.append(ttft)
        acc.e2e.append(e2e)
        if n >= 2:
            ttst = (int(tokens_ns[1]) - first) / _NS_PER_MS
            tpot = (last - first) / (n - 1) / _NS_PER_MS
            acc.ttst.append(ttst)
            acc.tpot.append(tpot)
            acc.gaps_ns.append(np.diff(tokens_ns))
        if trace.first_admit_ns is not None and trace.engine_arrival_ns is not None:
            queueing = (trace.first_admit_ns - trace.engine_arrival_ns) / _NS_PER_MS
            acc.queueing.append(queueing)
        if trace.tokenized_ns is not None:
            acc.tokenization.append((trace.tokenized_ns - arrival_ns) / _NS_PER_MS)
        if trace.engine_arrival_ns is not None:
            ready_ns = arrival_ns if trace.tokenized_ns is None else trace.tokenized_ns
            acc.routing.append((trace.engine_arrival_ns - max(arrival_ns, ready_ns)) / _NS_PER_MS)
        if slo is not None:
            meets = slo.met(ttft_ms=ttft, tpot_ms=tpot, e2e_ms=e2e)
            if meets:
                acc.good += 1
                acc.good_output_tokens += n

    return RequestRecord(
        request_id=trace.request_id,
        status=status,
        engine=trace.engine,
        input_length=trace.input_length,
        output_length=trace.output_length,
        output_tokens=n,
        reused_input_tokens=trace.reused_input_tokens or 0,
        num_preemptions=trace.num_preemptions,
        truncated=trace.truncated,
        rejection_reason=trace.rejection_reason,
        failure_reason=trace.failure_reason,
        arrival_ms=_ms(arrival_ns),
        tokenize_start_ms=_ms(trace.tokenize_start_ns),
        tokenized_ms=_ms(trace.tokenized_ns),
        engine_arrival_ms=_ms(trace.engine_arrival_ns),
        first_admit_ms=_ms(trace.first_admit_ns),
        first_token_ms=float(tokens_ns[0]) / _NS_PER_MS if n else None,
        last_token_ms=float(tokens_ns[-1]) / _NS_PER_MS if n else None,
        terminal_ms=_ms(trace.terminal_ns),
        ttft_ms=ttft,
        ttst_ms=ttst,
        tpot_ms=tpot,
        e2e_ms=e2e,
        queueing_delay_ms=queueing,
        meets_slo=meets,
        admissions=tuple(
            AdmissionRecord(
                at_ms=a.at_ns / _NS_PER_MS,
                reused_tokens=a.reused_tokens,
                is_readmission=a.is_readmission,
            )
            for a in trace.admissions
        ),
        token_times_ms=tuple((tokens_ns / _NS_PER_MS).tolist()),
        handoff=_handoff(trace),
        token_time_runs_ns=tuple(held.runs()),
        **identity,  # type: ignore[arg-type]
    )


def _earliest(current: int | None, value: int) -> int:
    return value if current is None or value < current else current


def _latest(current: int | None, value: int) -> int:
    return value if current is None or value > current else current


def _rate(amount: float, duration_s: float | None) -> float | None:
    if duration_s is None or duration_s <= 0:
        return None
    return amount / duration_s


def _ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else numerator / denominator


def finalize(
    journal: Journal,
    *,
    workload: Workload,
    meta: RunMeta,
    slo: SLO | None = None,
    driver: DriverReport | None = None,
) -> ReplayResult:
    """Turn a finished run's journal into a :class:`ReplayResult`.

    Every request of ``workload`` gets exactly one record and one terminal status, then every
    other request the journal traced (play instances). A trace whose status the run left
    unset is classified: never traced → ``never_issued``; traced but never at an engine →
    ``unplaced``; at an engine → ``incomplete``.

    With the release driver's accounting (``driver``), the statuses only the driver knows
    win: ``cancelled`` (a profile's grace ended), ``skipped`` (a dependency or the play
    failed) and ``never_issued``. The records are then the requests the driver accounted for:
    the workload's requests in workload order, then play instance requests in the order they
    entered the run; a corpus request that only ran as an instance, and snapshot history, get
    no record of their own. An instance record's identity (conversation id, turn, play id,
    phase, lineage, all in the ``P#k`` namespace) is that of the request the driver ran
    (``RequestOutcome.request``), released or not. When the workload has plays, the summary
    gains a ``plays`` section (:class:`PlaySummary`).

    Summary metrics are over the measured cohort (completed requests of phase ``measure``,
    REFERENCE-workloads §5.6, §5.7); status counts, preemptions and engine figures cover
    every request.

    Args:
        journal: the run's journal: its ``traces`` give every record; its kept ``events`` are
            counted unless ``meta.event_counts`` is given.
        workload: the workload that was replayed.
        meta: run metadata measured by the runner.
        slo: service-level objectives for goodput; None (or an empty SLO) for none.
        driver: the release driver's accounting (``loadgen.DriverReport``), or None.

    Returns:
        The typed result: summary, per-request records, lifecycle evidence, metadata.

    Raises:
        simclock.InternalError: a trace is inconsistent (unknown status, a completed request
            without an arrival time).
    """
    if slo is not None and slo.is_empty:
        slo = None
    traces = journal.traces
    acc = _Accumulator()
    records: list[RequestRecord] = []
    seen: set[str] = set()
    if driver is None:
        for request in workload.requests:
            seen.add(request.id)
            records.append(_record(request, traces.get(request.id), slo=slo, acc=acc))
    else:
        outcomes = {o.request_id: o for o in driver.requests}
        for request in workload.requests:
            found = outcomes.get(request.id)
            trace = traces.get(request.id)
            if found is None and trace is None:
                continue  # ran as a play instance, or snapshot history
            seen.add(request.id)
            records.append(_record(request, trace, slo=slo, acc=acc, outcome=found))
        by_id = {r.id: r for r in workload.requests} if workload.plays else {}
        for found in driver.requests:
            if found.request_id in seen:
                continue
            seen.add(found.request_id)
            trace = traces.get(found.request_id)
            if trace is None:
                records.append(_unreleased_record(found, by_id))
            else:
                records.append(_record(None, trace, slo=slo, acc=acc, outcome=found))
    for request_id, trace in traces.items():
        if request_id not in seen:
            records.append(_record(None, trace, slo=slo, acc=acc))

    status_counts: dict[str, int] = dict.fromkeys(TERMINAL_STATUSES, 0)
    for record in records:
        status_counts[record.status] += 1

    # Summary metrics are over the measured cohort: completed requests of phase ``measure``
    # (REFERENCE-workloads §5.6, §5.7); status counts and engine figures cover every request.
    measured = [r for r in records if r.phase == "measure"]
    completed = [r for r in measured if r.status == "completed"]
    duration_ns = acc.span(measured=True)
    duration_s = None if duration_ns is None else duration_ns / _NS_PER_S

    total_input = sum(r.input_length for r in completed)
    total_output = sum(r.output_tokens for r in completed)
    reused_first = sum(r.reused_input_tokens for r in completed)
    reused_all = sum(a.reused_tokens for r in completed for a in r.admissions)

    gaps_ns = np.concatenate(acc.gaps_ns) if acc.gaps_ns else np.zeros(0, dtype=np.int64)
    itl_ms = gaps_ns / _NS_PER_MS
    positive = itl_ms[gaps_ns > 0]

    goodput: Goodput | None = None
    if slo is not None:
        goodput = Goodput(
            count=acc.good,
            request_goodput=_rate(acc.good, duration_s),
            output_throughput=_rate(acc.good_output_tokens, duration_s),
            attainment=_ratio(acc.good, len(completed)),
            attainment_of_all=_ratio(acc.good, len(measured)),
        )

    summary = Summary(
        requests=len(records),
        status_counts=status_counts,
        completed=len(completed),
        duration_s=duration_s,
        total_input_tokens=total_input,
        total_output_tokens=total_output,
        request_throughput=_rate(len(completed), duration_s),
        input_throughput=_rate(total_input, duration_s),
        output_throughput=_rate(total_output, duration_s),
        total_token_throughput=_rate(total_input + total_output, duration_s),
        ttft_ms=Distribution.of(acc.ttft),
        ttst_ms=Distribution.of(acc.ttst),
        tpot_ms=Distribution.of(acc.tpot),
        itl_ms=Distribution.of(itl_ms),
        e2el_ms=Distribution.of(acc.e2e),
        queueing_delay_ms=Distribution.of(acc.queueing),
        tokenization_ms=Distribution.of(acc.tokenization),
        routing_delay_ms=Distribution.of(acc.routing),
        output_tokens_per_s_per_user=Distribution.of(1000.0 / positive),
        slo=slo,
        goodput=goodput,
        reused_input_tokens=reused_first,
        reused_input_tokens_with_readmissions=reused_all,
        prefix_reuse_ratio=_ratio(reused_first, total_input),
        prefix_reuse_ratio_with_readmissions=_ratio(reused_all, total_input),
        preemptions=sum(r.num_preemptions for r in records),
        engines=_engine_summaries(records, meta.engines, acc.span(measured=False)),
        plays=None if driver is None or not driver.plays else PlaySummary.of(driver),
    )
    evidence = LifecycleEvidence(
        event_counts=_event_counts(journal, meta, records),
        status_counts=dict(status_counts),
        accounted=sum(status_counts.values()),
        requests=len(records),
    )
    return ReplayResult(
        summary=summary,
        requests=tuple(records),
        evidence=evidence,
        meta=meta,
        workload_source=workload.source,
        workload_format=workload.format,
    )


def _corpus_request(outcome: RequestOutcome, by_id: Mapping[str, Request]) -> Request | None:
    """The corpus request a play instance request was made from (``P#k/x`` → ``P/x``)."""
    play = outcome.play_id
    if play is None or "#" not in play or not outcome.request_id.startswith(play):
        return None
    corpus_play = play.rsplit("#", 1)[0]
    return by_id.get(corpus_play + outcome.request_id[len(play) :])


def _unreleased_record(outcome: RequestOutcome, by_id: Mapping[str, Request]) -> RequestRecord:
    """The record of a play instance request the driver never released (no trace).

    Lengths and identity come from the request the driver ran (``outcome.request``); an
    outcome without one (built by hand) falls back to the corpus request's lengths and to
    the play id and phase the outcome names.
    """
    status = outcome.status if outcome.status in TERMINAL_STATUSES else "never_issued"
    request = outcome.request
    if request is not None:
        return _untraced_record(
            outcome.request_id,
            status,
            input_length=request.input_length,
            output_length=request.output_length,
            terminal_ms=_ms(outcome.terminal_ns),
            identity=_identity_fields(request),
        )
    corpus = _corpus_request(outcome, by_id)
    return _untraced_record(
        outcome.request_id,
        status,
        input_length=0 if corpus is None else corpus.input_length,
        output_length=0 if corpus is None else corpus.output_length,
        terminal_ms=_ms(outcome.terminal_ns),
        identity={"play_id": outcome.play_id, "phase": outcome.phase},
    )


def _untraced_record(
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


_PER_PASS_KINDS = frozenset({"prefill_chunk"})


def _event_counts(
    journal: Journal, meta: RunMeta, records: Sequence[RequestRecord]
) -> dict[str, int]:
    """Event counts that do not depend on whether the run was observed.

    Engines fold per-token events straight into the traces when no one keeps or watches the
    events, so ``token`` is counted from the records (every token after a request's first),
    and per-pass ``prefill_chunk`` events are left out. Keys are sorted.
    """
    if meta.event_counts is not None:
        counts = dict(meta.event_counts)
    else:
        counter = EventCounter()
        for event in journal.events:
            counter(event)
        counts = counter.counts
    for kind in _PER_PASS_KINDS:
        counts.pop(kind, None)
    tokens = sum(max(r.output_tokens - 1, 0) for r in records)
    if tokens:
        counts["token"] = tokens
    else:
        counts.pop("token", None)
    return dict(sorted(counts.items()))


def _owner(record: RequestRecord) -> int | None:
    """The engine a request's completion and preemptions count on: its decode engine once a
    prefill/decode handoff reached one, else the engine it was placed on."""
    if record.handoff is not None and record.handoff.decode_worker is not None:
        return record.handoff.decode_worker
    return record.engine


def _engine_summaries(
    records: Sequence[RequestRecord],
    usage: Sequence[EngineUsage],
    duration_ns: int | None,
) -> tuple[EngineSummary, ...]:
    by_index = {u.index: u for u in usage}
    indices = set(by_index)
    owners = [_owner(r) for r in records]
    indices.update(owner for owner in owners if owner is not None)
    preemptions = dict.fromkeys(indices, 0)
    completed = dict.fromkeys(indices, 0)
    for record, owner in zip(records, owners, strict=True):
        if owner is None:
            continue
        preemptions[owner] += record.num_preemptions
        if record.status == "completed":
            completed[owner] += 1
    summaries = []
    for index in sorted(indices):
        u = by_index.get(index)
        busy_ms = None if u is None else u.busy_ns / _NS_PER_MS
        utilisation = None
        if u is not None and duration_ns is not None and duration_ns > 0:
            utilisation = u.busy_ns / duration_ns
        summaries.append(
            EngineSummary(
                index=index,
                busy_ms=busy_ms,
                utilisation=utilisation,
                passes=None if u is None else u.passes,
                preemptions=preemptions[index],
                completed=completed[index],
            )
        )
    return tuple(summaries)
