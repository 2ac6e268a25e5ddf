"""Finalization: lifecycle records in, a typed :class:`ReplayResult` out (REFERENCE-engine §8).

:func:`finalize` is the one place a run's per-request traces become the report. The built-in
topologies call it after the loop finishes; a user-supplied composition calls it the same way.
Nothing here reads the wall clock or writes files: the wall time arrives in :class:`RunMeta`
from the caller, and :mod:`replay._output` writes what the caller asks for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

import simclock
from engines import Journal, LifecycleEvent, RequestTrace
from loadgen import (
    DriverReport,
    Outcomes,
    PlayOutcome,
    Request,
    RequestOutcome,
    SyntheticRequests,
    Workload,
)

from ._columns import RequestColumns
from ._cost import CostSummary, cost_summary
from ._metric_table import DISTRIBUTIONS
from ._metrics import SLO, Distribution
from ._pd_metrics import PDPhases
from ._records import DRIVER_STATUSES, Settled, ToBuild, build_records, unreleased_record
from ._records import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._records import AdmissionRecord as AdmissionRecord
from ._records import Handoff as Handoff
from ._records import RequestRecord as RequestRecord
from ._records import TerminalStatus as TerminalStatus
from ._stream import RecordStream

__all__ = (
    "PLAY_OUTCOMES",
    "SCHEMA_VERSION",
    "EngineSummary",
    "EngineUsage",
    "EventCounter",
    "Goodput",
    "LifecycleEvidence",
    "PlaySummary",
    "ReplayResult",
    "RunMeta",
    "ServedEngineSummary",
    "Summary",
    "finalize",
)

SCHEMA_VERSION = 1
"""Version of the report schema (``summary.json``, ``requests.jsonl``, ``config.json``)."""

PLAY_OUTCOMES: tuple[str, ...] = ("completed", "failed", "incomplete")
"""Every play outcome (REFERENCE-workloads §5.3), in the order the report lists them."""

_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000


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
class EngineUsage:
    """What the runner measured on one engine, handed to :func:`finalize` in :class:`RunMeta`.

    Attributes:
        index: the engine index.
        busy_ns: total virtual time spent in passes, in ns.
        passes: how many passes ran.
        batch_entries: entries (prompt chunks and decode steps) summed over the passes.
        peak_running: the most requests running at once.
        peak_kv_blocks: the most KV blocks referenced at once.
        kv_blocks: the engine's usable KV blocks (0: not known).
        served: ``(joined_ns, removed_ns)`` when the cluster changed during the run
            (``removed_ns`` None if the engine stayed to the end); None otherwise.
        gpus: the GPUs the engine runs on (its tensor-parallel degree).
        states: when the cluster changed, the engine's state changes as
            ``(instant_ns, state)`` (``starting``, ``active``, ``draining``, ``removed``).
    """

    index: int
    busy_ns: int
    passes: int = 0
    batch_entries: int = 0
    peak_running: int = 0
    peak_kv_blocks: int = 0
    kv_blocks: int = 0
    served: tuple[int, int | None] | None = attrs.field(default=None, kw_only=True)
    gpus: int = attrs.field(default=1, kw_only=True)
    states: tuple[tuple[int, str], ...] = attrs.field(default=(), kw_only=True)


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
        mean_batch_size: entries per pass (a request's prompt chunk or decode step is one
            entry), over the passes that ran (None without passes).
        peak_running: the most requests running at once (None when not measured).
        peak_kv_usage: the most KV blocks referenced at once, as a fraction of the engine's
            blocks (None when not measured).
    """

    index: int
    busy_ms: float | None
    utilisation: float | None
    passes: int | None
    preemptions: int
    completed: int
    mean_batch_size: float | None = None
    peak_running: int | None = None
    peak_kv_usage: float | None = None


@attrs.frozen
class ServedEngineSummary(EngineSummary):
    """An engine's figures in a run whose cluster changed: an :class:`EngineSummary` with
    the interval the engine served.

    Attributes:
        joined_ms: when it joined (0 for the topology's engines).
        removed_ms: when it was removed, or None if it stayed to the end.
    """

    joined_ms: float = attrs.field(kw_only=True)
    removed_ms: float | None = attrs.field(kw_only=True)


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
        slo: the run's SLO (the one for requests without an SLO of their own), None when none.
        goodput: goodput figures, None when no request had an SLO (the run's or its own).
        reused_input_tokens: prefix-cache hits at first admission, of the cohort.
        reused_input_tokens_with_readmissions: hits at every admission, of the cohort.
        prefix_reuse_ratio: ``reused_input_tokens / total_input_tokens``.
        prefix_reuse_ratio_with_readmissions: the same with readmission hits included.
        preemptions: preemptions over all requests (every phase).
        engines: per-engine figures, by index (every phase; utilisation over the whole
            run's span, preparation included).
        plays: agentic play outcomes and trajectory latency; None when the workload has no
            plays (or the run kept no release accounting).
        pd_phases: where the time to first token goes in a prefill/decode run; None when no
            request had a prefill/decode handoff.
        cost: engine-seconds, GPU-seconds, requests and output tokens per engine-hour, and
            the engine count over time (:class:`replay.CostSummary`); None when no engine
            measured its usage.
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
    pd_phases: PDPhases | None = None
    cost: CostSummary | None = None


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
            other request the journal saw (e.g. play instances) in first-event order. Empty
            when the run streamed its records instead of keeping them (``replay.RequestLog``):
            the summary is the same either way.
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

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<ReplayResult {self.workload_source or 'workload'}: {s.completed} of "
            f"{s.requests} requests completed, {len(self.requests)} records>"
        )


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
    stream: RecordStream | None = None,
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
    every request. They are computed from compact per-request columns
    (``replay/_columns.py``), whether the records are kept or streamed.

    Args:
        journal: the run's journal: its ``traces`` give every record not yet streamed; its
            kept ``events`` are counted unless ``meta.event_counts`` is given.
        workload: the workload that was replayed.
        meta: run metadata measured by the runner.
        slo: service-level objectives for goodput; None (or an empty SLO) for none.
        driver: the release driver's accounting (``loadgen.DriverReport``), or None.
        stream: the stream that took the records of requests that settled during the run
            (the runner's, when it streams them); None: every record is built here and kept.

    Returns:
        The typed result: summary, per-request records (unless streamed), lifecycle
        evidence, metadata.

    Raises:
        simclock.InternalError: a trace is inconsistent (unknown status, a completed request
            without an arrival time).
    """
    if slo is not None and slo.is_empty:
        slo = None
    if stream is None:
        requests = workload.requests
        positions = requests.positions() if isinstance(requests, SyntheticRequests) else None
        stream = RecordStream(requests, positions=positions)
    traces = journal.traces
    # Ids recorded so far beyond the workload's: a workload request is recorded at its
    # position (or, never run and never accounted, skipped: then it has no outcome and no
    # trace either), so the workload's ids need no set of their own.
    seen: set[str] = set()
    builder = _Builder(stream, slo)
    if driver is None:
        requests = workload.requests
        for position in range(len(requests)):
            if not stream.settled(position):
                request = requests[position]
                builder.add(position, request, traces.get(request.id))
    else:
        outcomes = driver.requests
        others: list[RequestOutcome] = []
        found_at: Sequence[RequestOutcome | None]
        by_position = isinstance(outcomes, Outcomes) and len(outcomes) == len(workload.requests)
        if by_position:
            # a run at the timestamps: outcome i is workload request i's, built when read
            found_at = outcomes
        else:
            # the driver's outcome of each workload position (the last one listed for its id)
            listed: list[RequestOutcome | None] = [None] * len(workload.requests)
            for found in outcomes:
                at = stream.position(found.request_id)
                if at is None:
                    others.append(found)
                else:
                    listed[at] = found
            found_at = listed
        requests = workload.requests
        for position in range(len(requests)):
            outcome = found_at[position]
            if (
                by_position
                and outcome is not None
                and stream.position(outcome.request_id) != position
            ):
                raise simclock.InternalError(
                    f"the driver's outcome at position {position} is that of request "
                    f"{outcome.request_id!r}"
                )
            if stream.settled(position):
                # (the request is not built: a lazy workload builds it at each read)
                _check_settled(stream, position, outcome)
                continue
            request = requests[position]
            trace = traces.get(request.id)
            if outcome is None and trace is None:
                stream.skip(position)
                continue  # ran as a play instance, or snapshot history
            builder.add(position, request, trace, outcome)
        del found_at
        by_id = {r.id: r for r in workload.requests} if workload.plays else {}
        for found in others:
            if found.request_id in seen:
                continue
            seen.add(found.request_id)
            trace = traces.get(found.request_id)
            if trace is None:
                builder.put(stream.next_extra(), Settled(unreleased_record(found, by_id)))
            else:
                builder.add(stream.next_extra(), None, trace, found)
    for request_id, trace in traces.items():
        if request_id not in seen and stream.position(request_id) is None:
            builder.add(stream.next_extra(), None, trace)
    builder.flush()
    records = stream.close()
    columns = stream.columns
    summary = _summary(columns, slo=slo, meta=meta, driver=driver)
    evidence = LifecycleEvidence(
        event_counts=_event_counts(journal, meta, columns),
        status_counts=dict(summary.status_counts),
        accounted=sum(summary.status_counts.values()),
        requests=len(columns),
    )
    return ReplayResult(
        summary=summary,
        requests=records,
        evidence=evidence,
        meta=meta,
        workload_source=workload.source,
        workload_format=workload.format,
    )


_BATCH = 2048
"""Records built together (their token times converted in one numpy call)."""


@attrs.define(eq=False)
class _Builder:
    """Builds records in batches and gives them to the stream in the order they came.

    State: the positions and ``(request, trace, outcome)`` items not yet built.
    """

    stream: RecordStream
    slo: SLO | None
    _positions: list[int] = attrs.Factory(list)
    _items: list[ToBuild] = attrs.Factory(list)

    def add(
        self,
        position: int,
        request: Request | None,
        trace: RequestTrace | None,
        outcome: RequestOutcome | None = None,
    ) -> None:
        """Build the record of ``position`` (with the next batch)."""
        self._positions.append(position)
        self._items.append((request, trace, outcome))
        if len(self._items) >= _BATCH:
            self.flush()

    def put(self, position: int, settled: Settled) -> None:
        """Give the stream a record built elsewhere, after every record added before it."""
        self.flush()
        self.stream.put(position, settled)

    def flush(self) -> None:
        """Build every record added so far and give them to the stream."""
        if not self._items:
            return
        positions, items = self._positions, self._items
        self._positions, self._items = [], []
        for position, settled in zip(positions, build_records(items, slo=self.slo), strict=True):
            self.stream.put(position, settled)


def _check_settled(stream: RecordStream, position: int, found: RequestOutcome | None) -> None:
    """A record streamed during the run has the status the driver's accounting gives it."""
    status = stream.settled_status(position)
    if found is not None and found.status in DRIVER_STATUSES and found.status != status:
        raise simclock.InternalError(
            f"request {found.request_id!r} settled {status} during the run but the driver "
            f"reports it {found.status}"
        )


def _summary(
    columns: RequestColumns, *, slo: SLO | None, meta: RunMeta, driver: DriverReport | None
) -> Summary:
    """The summary of a run's records, from their columns."""
    status_counts = columns.status_counts()
    measured, completed = columns.masks()
    n_completed = int(completed.sum())
    n_measured = int(measured.sum())
    duration_ns = columns.span(measured=True)
    duration_s = None if duration_ns is None else duration_ns / _NS_PER_S

    output_tokens = columns.ints("output_tokens")
    total_input = int(columns.ints("input_length")[completed].sum())
    total_output = int(output_tokens[completed].sum())
    reused_first = int(columns.ints("reused_first")[completed].sum())
    reused_all = int(columns.ints("reused_all")[completed].sum())

    # The pooled gaps (several per request) are the largest arrays of the report: one at a
    # time, each let go once its statistics are taken, each spelled out from the runs of
    # equal gaps after its values are worked out (per value, the same floats as per gap).
    # A gap is > 0 exactly when its value in milliseconds is.
    values_ns, weights = columns.gap_runs()
    values_ms = values_ns / _NS_PER_MS
    itl = Distribution._of_runs(values_ms, weights)
    positive = values_ms > 0
    per_user = Distribution._of_runs(1000.0 / values_ms[positive], weights[positive])

    # every distribution of the table; those without a column are the pooled ones above
    pooled = {"itl_ms": itl, "output_tokens_per_s_per_user": per_user}
    distributions = {
        m.name: pooled[m.name] if m.column is None else Distribution.of(columns.sample(m.column))
        for m in DISTRIBUTIONS
    }

    goodput: Goodput | None = None
    judged = columns.ints("good")  # 0: no SLO, 1: met, 2: missed (replay._columns)
    # goodput with the run's SLO, or when requests carry their own
    if slo is not None or bool(judged.any()):
        good = judged == 1
        good_count = int(good.sum())
        good_output = int(output_tokens[good].sum())
        goodput = Goodput(
            count=good_count,
            request_goodput=_rate(good_count, duration_s),
            output_throughput=_rate(good_output, duration_s),
            attainment=_ratio(good_count, n_completed),
            attainment_of_all=_ratio(good_count, n_measured),
        )

    return Summary(
        requests=len(columns),
        status_counts=status_counts,
        completed=n_completed,
        duration_s=duration_s,
        total_input_tokens=total_input,
        total_output_tokens=total_output,
        request_throughput=_rate(n_completed, duration_s),
        input_throughput=_rate(total_input, duration_s),
        output_throughput=_rate(total_output, duration_s),
        total_token_throughput=_rate(total_input + total_output, duration_s),
        **distributions,
        slo=slo,
        goodput=goodput,
        reused_input_tokens=reused_first,
        reused_input_tokens_with_readmissions=reused_all,
        prefix_reuse_ratio=_ratio(reused_first, total_input),
        prefix_reuse_ratio_with_readmissions=_ratio(reused_all, total_input),
        preemptions=int(columns.ints("preemptions").sum()),
        engines=_engine_summaries(columns, meta.engines, columns.span(measured=False)),
        plays=None if driver is None or not driver.plays else PlaySummary.of(driver),
        pd_phases=columns.pd_phases(),
        cost=None
        if not meta.engines
        else cost_summary(
            meta.engines,
            end_ns=round(meta.virtual_duration_ms * _NS_PER_MS),
            completed=n_completed,
            output_tokens=total_output,
        ),
    )


_PER_PASS_KINDS = frozenset({"prefill_chunk"})


def _event_counts(journal: Journal, meta: RunMeta, columns: RequestColumns) -> dict[str, int]:
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
    tokens = columns.token_events()
    if tokens:
        counts["token"] = tokens
    else:
        counts.pop("token", None)
    return dict(sorted(counts.items()))


def _engine_summaries(
    columns: RequestColumns,
    usage: Sequence[EngineUsage],
    duration_ns: int | None,
) -> tuple[EngineSummary, ...]:
    by_index = {u.index: u for u in usage}
    counts = columns.engine_counts(sorted(by_index))
    summaries = []
    for index in sorted(counts):
        preemptions, completed = counts[index]
        u = by_index.get(index)
        busy_ms = None if u is None else u.busy_ns / _NS_PER_MS
        utilisation = None
        if u is not None and duration_ns is not None and duration_ns > 0:
            utilisation = u.busy_ns / duration_ns
        summary = EngineSummary(
            index=index,
            busy_ms=busy_ms,
            utilisation=utilisation,
            passes=None if u is None else u.passes,
            preemptions=preemptions,
            completed=completed,
            mean_batch_size=None if u is None or not u.passes else u.batch_entries / u.passes,
            peak_running=None if u is None else u.peak_running,
            peak_kv_usage=(
                None if u is None or not u.kv_blocks else u.peak_kv_blocks / u.kv_blocks
            ),
        )
        if u is not None and u.served is not None:
            joined, removed = u.served
            summary = ServedEngineSummary(
                **attrs.asdict(summary, recurse=False),
                joined_ms=joined / _NS_PER_MS,
                removed_ms=None if removed is None else removed / _NS_PER_MS,
            )
        summaries.append(summary)
    return tuple(summaries)
