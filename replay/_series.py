"""Per-engine time series of a run: queue depth, batch size, KV usage and utilisation over
virtual time, written as ``engines.csv`` beside the report files.

A :class:`SeriesRecorder` subscribes to the run's journal (given as the ``series`` run option,
or with ``simclock replay --series``/``--plots``) and, at every lifecycle event that touches
an engine, samples that engine's read-only view (:class:`replay.EngineCounters`, the same
counters the timeline samples). It watches neither ``TOKEN`` nor ``PREFILL_CHUNK`` events, so
the engines keep their fast path (per-token times folded straight into the traces, passes
jumped over in macro-stepping); a run without a recorder is not touched at all.

What is sampled is exact at every change of the waiting and running counts (each change is a
lifecycle event: queued, admitted, preempted, finished, rejected, cancelled, ...); KV usage,
which also grows while requests decode, is its value at the engine's latest event.

:meth:`SeriesRecorder.series` folds the samples into bins of equal width (``bin_ms``; by
default the smallest of 1, 2, 5 x 10^k ms that makes at most :data:`MAX_BINS` bins):

- ``queue_depth``: the time-weighted mean of waiting requests, ``queue_depth_max`` the most;
- ``running``: the time-weighted mean of running requests;
- ``batch_size``: the mean of running requests while the engine is busy (empty when idle);
- ``kv_usage``: the time-weighted mean share of KV blocks held by requests,
  ``kv_usage_max`` the most;
- ``utilisation``: the share of the bin during which the engine had running requests (an
  engine with running requests never idles).

The output holds only virtual-time figures, so the same run gives the same bytes.
"""

from __future__ import annotations

import csv
import io
import math
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

import attrs
import numpy as np

from engines import EventKind, Journal, LifecycleEvent

from ._exceptions import ReplayError
from ._files import write_file_set
from ._timeline import EngineCounters

__all__ = (
    "MAX_BINS",
    "SERIES_COLUMNS",
    "SERIES_FILE",
    "EngineSeries",
    "SeriesError",
    "SeriesRecorder",
    "SeriesViews",
    "read_series",
)

SERIES_FILE = "engines.csv"
"""The name of the series file in a run's output directory."""

MAX_BINS = 400
"""The most bins an automatic bin width makes."""

SERIES_COLUMNS: tuple[str, ...] = (
    "engine",
    "role",
    "start_s",
    "end_s",
    "queue_depth",
    "queue_depth_max",
    "running",
    "batch_size",
    "kv_usage",
    "kv_usage_max",
    "utilisation",
)
"""The columns of ``engines.csv``, in order (docs/reference/plots.md defines them)."""

# Every kind that can change an engine's waiting or running count, and none of the per-token
# or per-chunk kinds (watching those would take the engines off their fast path).
_WATCHED: tuple[EventKind, ...] = (
    EventKind.QUEUED,
    EventKind.ADMITTED,
    EventKind.FIRST_TOKEN,
    EventKind.PREEMPTED,
    EventKind.FINISHED,
    EventKind.REJECTED,
    EventKind.PREFILL_DONE,
    EventKind.RESERVED,
    EventKind.TRANSFER_DONE,
    EventKind.CANCELLED,
    EventKind.FAILED,
)


_FINISHED = EventKind.FINISHED
_PREFILL_DONE = EventKind.PREFILL_DONE
_FIRST_TOKEN = EventKind.FIRST_TOKEN


class SeriesError(ReplayError, ValueError):
    """A series file cannot be read (the message names the file, line and field)."""


class SeriesViews(EngineCounters, Protocol):
    """What the recorder reads of an engine (``engines.EngineView`` satisfies it)."""

    @property
    def kv_blocks_total(self) -> int:
        """Usable KV blocks."""
        ...

    @property
    def role(self) -> str:
        """The engine's role (``aggregated``, ``prefill`` or ``decode``)."""
        ...


@attrs.define(eq=False)
class _Steps:
    """One engine's sampled counts as a step function: ``(time_ns, waiting, running,
    kv_used)`` from each change on, the last sample of an instant winning."""

    times: array[int] = attrs.Factory(lambda: array("q"))
    waiting: array[int] = attrs.Factory(lambda: array("q"))
    running: array[int] = attrs.Factory(lambda: array("q"))
    kv_used: array[int] = attrs.Factory(lambda: array("q"))

    def add(self, t: int, waiting: int, running: int, kv_used: int) -> None:
        times = self.times
        if times and times[-1] == t:
            self.waiting[-1] = waiting
            self.running[-1] = running
            self.kv_used[-1] = kv_used
            return
        if times and (
            self.waiting[-1] == waiting
            and self.running[-1] == running
            and self.kv_used[-1] == kv_used
        ):
            return  # no change
        times.append(t)
        self.waiting.append(waiting)
        self.running.append(running)
        self.kv_used.append(kv_used)


@attrs.define(eq=False)
class SeriesRecorder:
    """Records per-engine counts over a run, as a journal subscriber.

    Usage: ``recorder = SeriesRecorder()``; ``replay.run(..., series=recorder)``; then
    ``recorder.series()`` (or :meth:`write` into the output directory). :meth:`attach` is
    what the run calls once its engines exist; a recorder records one run.

    State: unattached → attached (recording) → read any number of times. Recording only reads
    the engines' views: it never changes a run's results.

    Attributes:
        bin_ms: the bin width of :meth:`series` in ms; None to choose one (module docstring).
    """

    bin_ms: float | None = attrs.field(default=None, kw_only=True)
    _views: Sequence[SeriesViews] = attrs.field(default=(), init=False)
    _steps: list[_Steps] = attrs.field(factory=list, init=False)
    _last_ns: int = attrs.field(default=0, init=False)
    # per engine: (instant, requests its commit at that instant ended so far)
    _leaving: dict[int, tuple[int, int]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        if self.bin_ms is not None and not (math.isfinite(self.bin_ms) and self.bin_ms > 0):
            raise ValueError(f"bin_ms: must be a finite number > 0, got {self.bin_ms!r}")

    @property
    def attached(self) -> bool:
        """Whether the recorder watches a run."""
        return bool(self._steps)

    def attach(self, journal: Journal, views: Sequence[SeriesViews]) -> None:
        """Watch ``journal`` and sample ``views`` (by engine index) from now on.

        Raises:
            RuntimeError: the recorder already watches a run.
        """
        if self._steps:
            raise RuntimeError("this SeriesRecorder already records a run; make one per run")
        self._views = tuple(views)
        self._steps = [_Steps() for _ in self._views]
        for engine in range(len(self._views)):
            self._sample(engine, 0)
        journal.subscribe(self.on_event, kinds=_WATCHED)

    def on_event(self, event: LifecycleEvent) -> None:
        """Journal subscriber: sample the engine the event touches."""
        engine = event.engine
        t = event.time_ns
        if t > self._last_ns:
            self._last_ns = t
        if engine is None or engine >= len(self._views):
            return
        # A pass's commit records FINISHED (PREFILL_DONE) for each request it ends and drops
        # them from the running list after the last one: until then, count them out here.
        kind = event.kind
        leaving = self._leaving.get(engine)
        ended = kind is _FINISHED or kind is _PREFILL_DONE
        if leaving is None or leaving[0] != t:
            count = 1 if ended else 0
        elif ended:
            count = leaving[1] + 1
        elif kind is _FIRST_TOKEN:
            count = leaving[1]  # the same commit
        else:
            count = 0  # planning the next pass: the commit is over
        self._leaving[engine] = (t, count)
        self._sample(engine, t, count)

    def _sample(self, engine: int, t: int, leaving: int = 0) -> None:
        view = self._views[engine]
        self._steps[engine].add(
            t, view.waiting_count, view.running_count - leaving, view.kv_blocks_used
        )

    def series(self, *, end_ns: int | None = None) -> EngineSeries:
        """The binned series of everything recorded so far.

        Args:
            end_ns: where the series ends (the run's virtual duration); default: the last
                event recorded.

        Returns:
            The :class:`EngineSeries`.
        """
        end = max(self._last_ns if end_ns is None else end_ns, 0)
        width_ns = _bin_width_ns(end, self.bin_ms)
        bins = max(1, -(-end // width_ns))
        edges = np.arange(bins + 1, dtype=np.float64) * width_ns
        if end > 0:
            edges[-1] = end  # the last bin ends with the run
        rows: list[tuple[object, ...]] = []
        for engine, (view, steps) in enumerate(zip(self._views, self._steps, strict=True)):
            total = view.kv_blocks_total
            rows.extend(_bin_engine(engine, str(view.role), steps, edges, total))
        return EngineSeries(bin_ms=width_ns / 1e6, rows=tuple(rows))

    def write(self, directory: str | Path, *, end_ns: int | None = None) -> Path:
        """Write :meth:`series` to ``directory/engines.csv`` atomically; return the path."""
        return self.series(end_ns=end_ns).write(directory)


def _bin_width_ns(end_ns: int, bin_ms: float | None) -> int:
    if bin_ms is not None:
        return max(1, round(bin_ms * 1_000_000))
    target = end_ns / MAX_BINS
    scale = 1_000_000  # 1 ms
    while True:
        for step in (1, 2, 5):
            if step * scale >= target:
                return step * scale
        scale *= 10


def _bin_engine(
    engine: int, role: str, steps: _Steps, edges: np.ndarray, kv_total: int
) -> list[tuple[object, ...]]:
    """The rows of one engine: its step function averaged over each bin of ``edges``."""
    if len(steps.times) == 0:
        times = waiting = running = kv = np.zeros(1)
    else:
        times = np.frombuffer(steps.times, dtype=np.int64).astype(np.float64)
        waiting = np.frombuffer(steps.waiting, dtype=np.int64).astype(np.float64)
        running = np.frombuffer(steps.running, dtype=np.int64).astype(np.float64)
        kv = np.frombuffer(steps.kv_used, dtype=np.int64).astype(np.float64)
        kv = kv / kv_total if kv_total > 0 else np.zeros_like(kv)
    busy = (running > 0).astype(np.float64)
    # the step function's knots: each change, then the end (a value holds until the next)
    knots = np.append(times, max(float(edges[-1]), float(times[-1])))
    widths = np.diff(knots)

    def integral(values: np.ndarray) -> np.ndarray:
        """The integral of ``values`` (a step function on ``knots``) over each bin."""
        cumulative = np.concatenate(([0.0], np.cumsum(values[: widths.size] * widths)))
        return np.diff(np.interp(edges, knots, cumulative))

    span = np.diff(edges)
    queue = integral(waiting) / span
    running_time = integral(running)
    busy_time = integral(busy)
    kv_mean = integral(kv) / span
    rows: list[tuple[object, ...]] = []
    for b in range(span.size):
        lo, hi = edges[b], edges[b + 1]
        # the samples in force at some instant of [lo, hi)
        first = max(int(np.searchsorted(times, lo, side="right")) - 1, 0)
        last = max(int(np.searchsorted(times, hi, side="left")) - 1, first)
        rows.append(
            (
                engine,
                role,
                _seconds(lo),
                _seconds(hi),
                _fmt(queue[b]),
                int(waiting[first : last + 1].max()),
                _fmt(running_time[b] / span[b]),
                "" if busy_time[b] <= 0 else _fmt(running_time[b] / busy_time[b]),
                _fmt(kv_mean[b]),
                _fmt(float(kv[first : last + 1].max())),
                _fmt(busy_time[b] / span[b]),
            )
        )
    return rows


def _seconds(time_ns: float) -> str:
    """Seconds from nanoseconds, to the microsecond, trailing zeros dropped."""
    text = f"{time_ns / 1e9:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _fmt(value: float) -> str:
    """A float with 6 significant digits, in a fixed textual form."""
    if value == 0:
        return "0"
    return f"{value:.6g}"


@attrs.frozen
class EngineSeries:
    """Binned per-engine series, one row per engine and bin (:data:`SERIES_COLUMNS`).

    Attributes:
        bin_ms: the bin width in ms.
        rows: the rows, by engine then time; numbers as their written text.
    """

    bin_ms: float
    rows: tuple[tuple[object, ...], ...]

    def to_bytes(self) -> bytes:
        """The CSV file's bytes (a header line, then the rows; ``\\n`` line ends)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(SERIES_COLUMNS)
        writer.writerows(self.rows)
        return out.getvalue().encode("utf-8")

    def write(self, directory: str | Path) -> Path:
        """Write ``directory/engines.csv`` atomically; return its path.

        Raises:
            OutputError: the file cannot be written (the message names it).
        """
        path = Path(directory) / SERIES_FILE
        data = self.to_bytes()

        def dump(stream: BinaryIO) -> None:
            stream.write(data)

        write_file_set([(path, dump)], what="series")
        return path


def read_series(path: str | Path) -> dict[int, dict[str, np.ndarray | str]]:
    """Read an ``engines.csv``: per engine index, its ``role`` and one float array per
    numeric column (``batch_size`` is NaN in idle bins).

    Raises:
        SeriesError: a missing column, or a value that is not a number (names file and line).
    """
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as stream:
        reader = csv.DictReader(stream)
        header = reader.fieldnames or []
        missing = [c for c in SERIES_COLUMNS if c not in header]
        if missing:
            raise SeriesError(f"{path}:1: missing column {missing[0]!r}")
        columns: dict[int, dict[str, list[float]]] = {}
        roles: dict[int, str] = {}
        for line, row in enumerate(reader, start=2):
            try:
                engine = int(row["engine"])
            except (TypeError, ValueError):
                raise SeriesError(
                    f"{path}:{line}: engine: not an integer: {row['engine']!r}"
                ) from None
            roles.setdefault(engine, row["role"])
            acc = columns.setdefault(engine, {c: [] for c in SERIES_COLUMNS[2:]})
            for name in SERIES_COLUMNS[2:]:
                text = row[name]
                if text == "" and name == "batch_size":
                    acc[name].append(math.nan)
                    continue
                try:
                    acc[name].append(float(text))
                except (TypeError, ValueError):
                    raise SeriesError(f"{path}:{line}: {name}: not a number: {text!r}") from None
    out: dict[int, dict[str, np.ndarray | str]] = {}
    for engine in sorted(columns):
        entry: dict[str, np.ndarray | str] = {"role": roles[engine]}
        entry.update({k: np.asarray(v, dtype=np.float64) for k, v in columns[engine].items()})
        out[engine] = entry
    return out
