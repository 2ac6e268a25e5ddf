"""Compact per-request columns: what the summary needs of each record, and nothing more.

A run's summary statistics are computed from these columns, not from retained record
objects: one row per record, appended in record order (the order of ``requests.jsonl``), its
integer fields to one growable int64 array and its float fields to one float64 array
(``array.array``, one ``extend`` per row, read back as numpy column views without a copy). A
row costs about a hundred bytes; the token times of the metric population are kept as runs of equal
spacing, from which the pooled inter-token gaps are rebuilt once, at the end, without
rebuilding the instants.

The statistics are computed exactly as from the records: the same values, in the same order,
through the same numpy calls, so the summary is the same, bit for bit.
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence
from itertools import chain

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


_INT_COLUMNS = (
    "status",
    "measured",
    "owner",
    "preemptions",
    "input_length",
    "output_tokens",
    "reused_first",
    "reused_all",
    "good",
)
_FLOAT_COLUMNS = (
    "ttft_ms",
    "ttst_ms",
    "tpot_ms",
    "e2e_ms",
    "queueing_ms",
    "tokenization_ms",
    "routing_ms",
)
#: The ``good`` column: 0 when no SLO judged the record, 1 when it met its SLO, 2 when not.
_JUDGED = {None: 0, True: 1, False: 2}
_INT_INDEX = {name: i for i, name in enumerate(_INT_COLUMNS)}
_FLOAT_INDEX = {name: i for i, name in enumerate(_FLOAT_COLUMNS)}
_STATUS = _INT_INDEX["status"]
_MEASURED = _INT_INDEX["measured"]


@attrs.define(eq=False)
class RequestColumns:
    """Per-request columns of a run's records, in record order.

    State: rows appended by :meth:`add`, one per record, held row after row in one int64
    array (:data:`_INT_COLUMNS`) and one float64 array (:data:`_FLOAT_COLUMNS`, NaN for
    "undefined"), read back column by column as strided numpy views; the token-time runs
    of the population; spans kept as running extremes.
    """

    _ints: array.array[int] = attrs.field(factory=lambda: array.array("q"))
    _floats: array.array[float] = attrs.field(factory=lambda: array.array("d"))
    # token-time runs (start, step, count) of population records with two or more tokens,
    # one after the other, and how many runs each such record has
    _runs: array.array[int] = attrs.field(factory=lambda: array.array("q"))
    _runs_per_record: array.array[int] = attrs.field(factory=lambda: array.array("q"))
    pd_records: list[_PDRecord] = attrs.field(factory=list)
    any_handoff: bool = False
    # The measured span (phase ``measure`` only, REFERENCE-workloads §5.6, §5.7) and the
    # whole run's span, preparation included (the engines' utilisation is over it).
    first_arrival_ns: int | None = None
    last_completion_ns: int | None = None
    run_first_arrival_ns: int | None = None
    run_last_completion_ns: int | None = None

    def __len__(self) -> int:
        return len(self._ints) // len(_INT_COLUMNS)

    def add(self, settled: Settled) -> None:
        """Append the row of one record (records must come in record order)."""
        self.append(row_of(settled))

    def append(self, row: Row) -> None:
        """Append a row made by :func:`row_of` (rows must come in record order)."""
        ints, floats, arrival_ns, done_ns, runs, handoff = row
        measured = ints[_MEASURED]
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
        self._ints.extend(ints)
        self._floats.extend(floats)
        if runs is not None:
            self._runs.extend(chain.from_iterable(runs))
            self._runs_per_record.append(len(runs))
        if handoff is not None:
            self.any_handoff = True
            if handoff is not _NO_PD:
                self.pd_records.append(handoff)

    # -- reading -----------------------------------------------------------------------------

    def ints(self, name: str) -> IntArray:
        """The integer column ``name`` (:data:`_INT_COLUMNS`) as an int64 array."""
        rows = np.frombuffer(self._ints, dtype=np.int64).reshape(-1, len(_INT_COLUMNS))
        column: IntArray = rows[:, _INT_INDEX[name]]
        return column

    def sample(self, name: str) -> FloatArray:
        """The defined values of float column ``name`` (:data:`_FLOAT_COLUMNS`), in record
        order."""
        rows = np.frombuffer(self._floats, dtype=np.float64).reshape(-1, len(_FLOAT_COLUMNS))
        values = rows[:, _FLOAT_INDEX[name]]
        out: FloatArray = values[~np.isnan(values)]
        return out

    def masks(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """``(measured, completed)``: records of phase ``measure``, and those completed."""
        measured = self.ints("measured") != 0
        completed = measured & (self.ints("status") == _COMPLETED)
        return measured, completed

    def status_counts(self) -> dict[str, int]:
        """Records per terminal status, every status listed."""
        counts = np.bincount(self.ints("status"), minlength=len(TERMINAL_STATUSES))
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
        record order (a request's gaps in token order): :meth:`gap_runs` spelled out."""
        values, weights = self.gap_runs()
        out: IntArray = np.repeat(values, weights)
        return out

    def gap_runs(self) -> tuple[IntArray, IntArray]:
        """:meth:`gaps_ns` as ``(values, weights)``: ``weights[i]`` gaps of ``values[i]``
        each, in order (``np.repeat(values, weights)`` is every gap), no weight 0.

        Built from the runs without their instants: a run of ``count`` instants ``step``
        apart has ``count - 1`` gaps of ``step``, and a run after a record's first is one
        gap after the end of the run before it.
        """
        runs = np.frombuffer(self._runs, dtype=np.int64).reshape(-1, 3)
        if not runs.shape[0]:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts, steps, counts = runs[:, 0], runs[:, 1], runs[:, 2]
        ends = starts + steps * (counts - 1)
        values = np.empty(2 * starts.size, dtype=np.int64)
        weights = np.ones(2 * starts.size, dtype=np.int64)
        values[0] = 0
        values[2::2] = starts[1:] - ends[:-1]  # the gap into each run from the one before
        values[1::2] = steps
        weights[1::2] = counts - 1
        # a record's first run has no gap into it
        per_record = np.frombuffer(self._runs_per_record, dtype=np.int64)
        weights[2 * (np.cumsum(per_record) - per_record)] = 0
        kept = weights != 0
        return values[kept], weights[kept]

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
        completed = self.ints("status")[held] == _COMPLETED
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
    tuple[int, int, int, int, int, int, int, int, int],
    tuple[float, float, float, float, float, float, float],
    "int | None",
    "int | None",
    "tuple[tuple[int, int, int], ...] | None",
    "_PDRecord | None",
]
"""One record's row: what :meth:`RequestColumns.append` stores of it (about a tenth of the
record's size, so rows waiting for their turn in record order cost little): its
:data:`_INT_COLUMNS`, its :data:`_FLOAT_COLUMNS`, its arrival and completion (ns), its
token-time runs when it is in the population, its P/D fields when it had a handoff."""

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
    admissions = record.admissions
    reused_all = (
        admissions[0].reused_tokens
        if len(admissions) == 1
        else sum(a.reused_tokens for a in admissions)
    )
    return (
        (
            _STATUS_CODE[record.status],
            measured,
            -1 if owner is None else owner,
            record.num_preemptions,
            record.input_length,
            record.output_tokens,
            record.reused_input_tokens,
            reused_all,
            _JUDGED[record.meets_slo],
        ),
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
