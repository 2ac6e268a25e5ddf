"""Compact per-request columns: what the summary needs of each record, and nothing more.

A run's summary statistics are computed from these columns, not from retained record
objects: one row per record, appended in record order (the order of ``requests.jsonl``), each
field a growable typed array (``array.array``, read as numpy without a copy). A row costs
about a hundred bytes; the token times of the metric population are kept as runs of equal
spacing, from which the pooled inter-token gaps are rebuilt once, at the end.

The statistics are computed exactly as from the records: the same values, in the same order,
through the same numpy calls, so the summary is the same, bit for bit.
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt

from ._pd_metrics import PDPhases, pd_phases
from ._records import TERMINAL_STATUSES, Handoff, Settled, owner_of

__all__ = ("RequestColumns", "Row", "row_of")

_NAN = math.nan
_STATUS_CODE = {status: code for code, status in enumerate(TERMINAL_STATUSES)}
_COMPLETED = _STATUS_CODE["completed"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@attrs.frozen
class _PDRecord:
    """The fields of a record that :func:`replay.pd_phases` reads (completed, measured, with a
    handoff): the whole record need not be kept."""

    status: str
    phase: str
    engine_arrival_ms: float | None
    first_token_ms: float | None
    handoff: Handoff | None


def _floats() -> array.array[float]:
    return array.array("d")


def _ints() -> array.array[int]:
    return array.array("q")


@attrs.define(eq=False)
class RequestColumns:
    """Per-request columns of a run's records, in record order.

    State: rows appended by :meth:`add`, one per record; spans kept as running extremes.
    """

    status: array.array[int] = attrs.field(factory=lambda: array.array("b"))
    measured: array.array[int] = attrs.field(factory=lambda: array.array("b"))
    owner: array.array[int] = attrs.field(factory=_ints)
    preemptions: array.array[int] = attrs.field(factory=_ints)
    input_length: array.array[int] = attrs.field(factory=_ints)
    output_tokens: array.array[int] = attrs.field(factory=_ints)
    reused_first: array.array[int] = attrs.field(factory=_ints)
    reused_all: array.array[int] = attrs.field(factory=_ints)
    good: array.array[int] = attrs.field(factory=lambda: array.array("b"))
    ttft_ms: array.array[float] = attrs.field(factory=_floats)
    ttst_ms: array.array[float] = attrs.field(factory=_floats)
    tpot_ms: array.array[float] = attrs.field(factory=_floats)
    e2e_ms: array.array[float] = attrs.field(factory=_floats)
    queueing_ms: array.array[float] = attrs.field(factory=_floats)
    tokenization_ms: array.array[float] = attrs.field(factory=_floats)
    routing_ms: array.array[float] = attrs.field(factory=_floats)
    # token-time runs of population records with two or more tokens, and how many each has
    run_starts: array.array[int] = attrs.field(factory=_ints)
    run_steps: array.array[int] = attrs.field(factory=_ints)
    run_counts: array.array[int] = attrs.field(factory=_ints)
    runs_per_record: array.array[int] = attrs.field(factory=_ints)
    pd_records: list[_PDRecord] = attrs.field(factory=list)
    any_handoff: bool = False
    # The measured span (phase ``measure`` only, REFERENCE-workloads §5.6, §5.7) and the
    # whole run's span, preparation included (the engines' utilisation is over it).
    first_arrival_ns: int | None = None
    last_completion_ns: int | None = None
    run_first_arrival_ns: int | None = None
    run_last_completion_ns: int | None = None

    def __len__(self) -> int:
        return len(self.status)

    def add(self, settled: Settled) -> None:
        """Append the row of one record (records must come in record order)."""
        self.append(row_of(settled))

    def append(self, row: Row) -> None:
        """Append a row made by :func:`row_of` (rows must come in record order)."""
        (
            status,
            measured,
            owner,
            preemptions,
            input_length,
            output_tokens,
            reused_first,
            reused_all,
            good,
            floats,
            arrival_ns,
            done_ns,
            runs,
            handoff,
        ) = row
        if arrival_ns is not None:
            if self.run_first_arrival_ns is None or arrival_ns < self.run_first_arrival_ns:
                self.run_first_arrival_ns = arrival_ns
            if measured and (self.first_arrival_ns is None or arrival_ns < self.first_arrival_ns):
                self.first_arrival_ns = arrival_ns
        if done_ns is not None:
            if self.run_last_completion_ns is None or done_ns > self.run_last_completion_ns:
                self.run_last_completion_ns = done_ns
            if measured and (self.last_completion_ns is None or done_ns > self.last_completion_ns):
                self.last_completion_ns = done_ns
        self.status.append(status)
        self.measured.append(measured)
        self.owner.append(owner)
        self.preemptions.append(preemptions)
        self.input_length.append(input_length)
        self.output_tokens.append(output_tokens)
        self.reused_first.append(reused_first)
        self.reused_all.append(reused_all)
        self.good.append(good)
        ttft, ttst, tpot, e2e, queueing, tokenization, routing = floats
        self.ttft_ms.append(ttft)
        self.ttst_ms.append(ttst)
        self.tpot_ms.append(tpot)
        self.e2e_ms.append(e2e)
        self.queueing_ms.append(queueing)
        self.tokenization_ms.append(tokenization)
        self.routing_ms.append(routing)
        if runs is not None:
            for start, step, count in runs:
                self.run_starts.append(start)
                self.run_steps.append(step)
                self.run_counts.append(count)
            self.runs_per_record.append(len(runs))
        if handoff is not None:
            self.any_handoff = True
            if handoff is not _NO_PD:
                self.pd_records.append(handoff)

    # -- reading -----------------------------------------------------------------------------

    def ints(self, name: str) -> IntArray:
        """The integer column ``name`` as an int64 array."""
        column = getattr(self, name)
        return np.asarray(column, dtype=np.int64)

    def sample(self, name: str) -> FloatArray:
        """The defined values of float column ``name``, in record order."""
        values = np.frombuffer(getattr(self, name), dtype=np.float64)
        return values[~np.isnan(values)]

    def masks(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """``(measured, completed)``: records of phase ``measure``, and those completed."""
        measured = np.frombuffer(self.measured, dtype=np.int8).astype(bool)
        completed = measured & (np.frombuffer(self.status, dtype=np.int8) == _COMPLETED)
        return measured, completed

    def status_counts(self) -> dict[str, int]:
        """Records per terminal status, every status listed."""
        counts = np.bincount(
            np.frombuffer(self.status, dtype=np.int8), minlength=len(TERMINAL_STATUSES)
        )
        return {status: int(counts[i]) for i, status in enumerate(TERMINAL_STATUSES)}

    def span(self, *, measured: bool) -> int | None:
        """Latest completion minus earliest arrival, in ns (None without both)."""
        if measured:
            last, first = self.last_completion_ns, self.first_arrival_ns
        else:
            last, first = self.run_last_completion_ns, self.run_first_arrival_ns
        return None if last is None or first is None else last - first

    def gaps_ns(self) -> IntArray:
        """Every inter-token gap of the population's requests with two or more tokens, in
        record order (a request's gaps in token order)."""
        counts = np.asarray(self.run_counts, dtype=np.int64)
        if not counts.size:
            return np.zeros(0, dtype=np.int64)
        starts = np.repeat(np.asarray(self.run_starts, dtype=np.int64), counts)
        steps = np.repeat(np.asarray(self.run_steps, dtype=np.int64), counts)
        total = int(counts.sum())
        offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        times = starts + steps * offsets
        # tokens per record: the counts of its runs, summed
        per_record = np.asarray(self.runs_per_record, dtype=np.int64)
        first_run = np.cumsum(per_record) - per_record
        tokens = np.add.reduceat(counts, first_run)
        gaps = np.diff(times)
        # drop the differences between one record's last token and the next one's first
        boundaries = np.cumsum(tokens)[:-1] - 1
        out: IntArray = np.delete(gaps, boundaries)
        return out

    def token_events(self) -> int:
        """Tokens after each record's first, summed over every record."""
        tokens = self.ints("output_tokens")
        return int(np.maximum(tokens - 1, 0).sum())

    def pd_phases(self) -> PDPhases | None:
        """The prefill/decode phases, None when no record has a handoff."""
        if not self.any_handoff:
            return None
        return pd_phases(self.pd_records)

    def engine_counts(self, indices: Sequence[int]) -> dict[int, tuple[int, int]]:
        """``{engine: (preemptions, completed)}`` over every record, for ``indices`` and every
        engine that owns a record."""
        owner = self.ints("owner")
        held = owner >= 0
        owners = owner[held]
        preemptions = self.ints("preemptions")[held]
        completed = np.frombuffer(self.status, dtype=np.int8)[held] == _COMPLETED
        out: dict[int, tuple[int, int]] = dict.fromkeys(indices, (0, 0))
        if owners.size:
            size = int(owners.max()) + 1
            p = np.zeros(size, dtype=np.int64)
            np.add.at(p, owners, preemptions)
            c = np.bincount(owners[completed], minlength=size)
            for index in np.unique(owners).tolist():
                out[index] = (int(p[index]), int(c[index]))
        return out


Row = tuple[
    int,
    bool,
    int,
    int,
    int,
    int,
    int,
    int,
    bool,
    tuple[float, float, float, float, float, float, float],
    "int | None",
    "int | None",
    "tuple[tuple[int, int, int], ...] | None",
    "_PDRecord | None",
]
"""One record's row: what :meth:`RequestColumns.append` stores of it (about a tenth of the
record's size, so rows waiting for their turn in record order cost little)."""

# a handoff seen on a record outside the P/D population: the run has handoffs
_NO_PD = _PDRecord("", "", None, None, None)


def _nan(value: float | None) -> float:
    return _NAN if value is None else value


def row_of(settled: Settled) -> Row:
    """The row of one settled record."""
    record = settled.record
    measured = record.phase == "measure"
    completed = record.status == "completed"
    owner = owner_of(record)
    runs = None
    if completed and measured and record.output_tokens >= 2:
        runs = record.token_time_runs_ns
    pd: _PDRecord | None = None
    if record.handoff is not None:
        pd = _NO_PD
        if completed and measured:
            pd = _PDRecord(
                record.status,
                record.phase,
                record.engine_arrival_ms,
                record.first_token_ms,
                record.handoff,
            )
    return (
        _STATUS_CODE[record.status],
        measured,
        -1 if owner is None else owner,
        record.num_preemptions,
        record.input_length,
        record.output_tokens,
        record.reused_input_tokens,
        sum(a.reused_tokens for a in record.admissions),
        record.meets_slo is True,
        (
            _nan(record.ttft_ms),
            _nan(record.ttst_ms),
            _nan(record.tpot_ms),
            _nan(record.e2e_ms),
            _nan(record.queueing_delay_ms),
            _nan(settled.tokenization_ms),
            _nan(settled.routing_ms),
        ),
        settled.arrival_ns,
        settled.completion_ns,
        runs,
        pd,
    )
