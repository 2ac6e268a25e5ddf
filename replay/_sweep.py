"""Sweeps: many replays from one base configuration, and one table of their metrics.

:func:`sweep` runs every run of a :class:`~replay.SweepSpec` through an executor and writes::

    OUT/runs/<run_id>/    summary.json, requests.jsonl, config.json (each run's report)
    OUT/sweep.json        {"schema": "simclock.sweep", "schema_version": 1, ..., "runs": [...]}
    OUT/sweep.csv         run_id,status,seed,<swept keys...>,<metric keys...>

Rules:

1. Every run's configuration is resolved before any run starts; a bad one stops the sweep
   with nothing written.
2. A run is finished when its ``summary.json`` exists, its ``config.json`` equals what the run
   would write, and the previous table does not mark it failed; a finished run is not run
   again. Anything else (a new run, a failed one, one whose configuration changed) runs.
3. The table lists the finished runs in sweep order, whatever order they finish in, and holds
   only what their files hold: a resumed sweep writes the same bytes as one run at a stretch.
4. The table is written as a set (both files, atomically) after each run and at the end, so an
   interrupted sweep leaves a table of the runs finished so far.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import attrs

import simclock

from ._cli_datasets import resolve_trace
from ._config import ConfigError, ReplayConfig, resolve_config
from ._executors import Executor, LocalExecutor
from ._files import check_destinations, make_directories, write_file_set
from ._output import CONFIG_FILE, OUTPUT_FILES, SUMMARY_FILE
from ._records import dumps, jsonable
from ._report import SCHEMA_VERSION
from ._sweep_run import RunOutcome, RunStatus, RunTask, run_task
from ._sweep_spec import SweepRun, SweepSpec

__all__ = (
    "SWEEP_SCHEMA",
    "SWEEP_SCHEMA_VERSION",
    "SweepResult",
    "SweepRow",
    "sweep",
)

SWEEP_SCHEMA = "simclock.sweep"
"""The ``schema`` of ``sweep.json``."""
SWEEP_SCHEMA_VERSION = 1
"""The ``schema_version`` of ``sweep.json``."""
SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"
RUNS_DIR = "runs"
KEY_METRIC = "median_ttft_ms"
"""The metric each progress line shows."""


@attrs.frozen(kw_only=True)
class SweepRow:
    """One finished run in the sweep's table.

    Attributes:
        run_id: the run's id.
        params: the swept keys' values (not the seed).
        seed: the run seed.
        status: ``ok`` or ``failed``.
        error: the failure in one line (None when ``ok``).
        output_dir: the run's directory, relative to the sweep's (``runs/<run_id>``).
        metrics: the flat ``metrics`` of the run's ``summary.json`` (empty when a failed
            run wrote no report).
    """

    run_id: str
    params: Mapping[str, Any]
    seed: int
    status: RunStatus
    error: str | None
    output_dir: str
    metrics: Mapping[str, Any]

    def as_json(self) -> dict[str, Any]:
        """The row as ``sweep.json`` holds it."""
        return {
            "run_id": self.run_id,
            "params": dict(self.params),
            "seed": self.seed,
            "status": self.status,
            "error": self.error,
            "output_dir": self.output_dir,
            "metrics": dict(self.metrics),
        }


@attrs.frozen(kw_only=True)
class SweepResult:
    """What a sweep wrote.

    Attributes:
        output_dir: the sweep's directory.
        swept: the swept keys, in grid order (``seed`` last when swept).
        rows: every run's row, in sweep order.
        ran: how many runs executed (the others were finished before).
    """

    output_dir: Path
    swept: tuple[str, ...]
    rows: tuple[SweepRow, ...]
    ran: int

    @property
    def failed(self) -> tuple[SweepRow, ...]:
        """The rows of the runs that failed."""
        return tuple(r for r in self.rows if r.status == "failed")


def sweep(
    specs: SweepSpec | Sequence[SweepRun],
    *,
    output_dir: str | os.PathLike[str],
    executor: Executor | None = None,
    progress: TextIO | None = None,
) -> SweepResult:
    """Run a sweep; write each run's report, and the table of all of them.

    Args:
        specs: the sweep, or the runs it expands to (:meth:`SweepSpec.runs`).
        output_dir: the sweep's directory (``runs/``, ``sweep.json``, ``sweep.csv``).
        executor: where runs execute; :class:`LocalExecutor` (in this process) by default.
        progress: where to write one line per finished run (None for none).

    Returns:
        The :class:`SweepResult`.

    Raises:
        ConfigError: a run's configuration is bad, or a trace it names does not exist;
            nothing is run or written.
        OutputError: the output directory cannot be used.
        KeyboardInterrupt: interrupted; the table holds the runs finished so far.
    """
    executor = LocalExecutor() if executor is None else executor
    if isinstance(specs, SweepSpec):
        source = specs.source
        swept = specs.swept
        resolved = specs.resolve()
    else:
        source = "sweep"
        runs = tuple(specs)
        resolved = tuple((r, resolve_config(r.config, None, source=r.run_id)) for r in runs)
        swept = _swept_of(runs)
    if executor.shares_filesystem:
        _check_traces(resolved, source=source)
    out = Path(output_dir)
    check_destinations(output_dir=out, output_files=(SWEEP_JSON, SWEEP_CSV), timeline=None)
    table = _Table(out, swept)
    failed_before = _failed_before(out / SWEEP_JSON)
    rows: dict[int, SweepRow] = {}
    tasks: list[RunTask] = []
    runs_by_id: dict[str, SweepRun] = {}
    total = len(resolved)
    reporter = _Reporter(progress, total)
    for run, config in resolved:
        runs_by_id[run.run_id] = run
        directory = out / RUNS_DIR / run.run_id
        if run.run_id not in failed_before and _finished(directory, config):
            rows[run.index] = _row(run, "ok", None, directory)
            reporter.line(rows[run.index], "done before")
            continue
        tasks.append(
            RunTask(
                run_id=run.run_id,
                config=run.config,
                source=source,
                output_dir=str(directory) if executor.shares_filesystem else None,
            )
        )
    # runs/ before any worker starts: workers each make their own run's directory in it
    make_directories(out / RUNS_DIR)
    if rows:
        table.write(rows)
    outcomes: Iterator[RunOutcome] = executor.map_unordered(run_task, tasks)
    interrupted = False
    try:
        for outcome in outcomes:
            run = runs_by_id[outcome.run_id]
            directory = out / RUNS_DIR / run.run_id
            if outcome.files:
                make_directories(directory)
                write_file_set(
                    [(directory / n, _bytes_writer(outcome.files[n])) for n in OUTPUT_FILES],
                    what="report",
                )
            row = _row(run, outcome.status, outcome.error, directory, reported=outcome.reported)
            rows[run.index] = row
            table.write(rows)
            reporter.line(row, row.status)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()  # the workers have stopped when it returns
        if interrupted:
            recorded = {row.run_id for row in rows.values()}
            _drop_unrecorded(
                [Path(t.output_dir) for t in tasks if t.output_dir and t.run_id not in recorded]
            )
    table.write(rows)
    ordered = tuple(rows[i] for i in sorted(rows))
    return SweepResult(output_dir=out, swept=swept, rows=ordered, ran=len(tasks))


def _drop_unrecorded(directories: Sequence[Path]) -> None:
    """Remove what the runs of ``directories`` left: an interrupt can reach the sweep after a
    worker wrote a whole run and before the table recorded it, and an interrupted sweep
    leaves only the runs its table holds."""
    for directory in directories:
        if directory.is_dir():
            shutil.rmtree(directory, ignore_errors=True)


def _swept_of(runs: Sequence[SweepRun]) -> tuple[str, ...]:
    keys: dict[str, None] = {}
    for run in runs:
        keys.update(dict.fromkeys(run.params))
    seeds = {run.seed for run in runs}
    return (*keys, *(("seed",) if len(seeds) > 1 else ()))


def _check_traces(resolved: Sequence[tuple[SweepRun, ReplayConfig]], *, source: str) -> None:
    """Refuse a trace that does not exist, before anything runs."""
    seen: set[str] = set()
    for run, config in resolved:
        trace = config.trace
        if trace is None or trace in seen:
            continue
        seen.add(trace)
        if not resolve_trace(trace).exists():
            key = "grid.trace" if "trace" in run.params else "base.trace"
            raise ConfigError(f"{source}: {key}: {trace}: no such file or bundled dataset")


def _expected_config(config: ReplayConfig) -> dict[str, object]:
    """What the ``config.json`` of a run of ``config`` says of its versions and settings."""
    return {
        "schema_version": SCHEMA_VERSION,
        "simclock_version": simclock.__version__,
        "config": json.loads(dumps(jsonable(config.as_json()), indent=None)),
    }


def _finished(directory: Path, config: ReplayConfig) -> bool:
    """Rule 2 of the module docstring (less the previous table's word)."""
    if not (directory / SUMMARY_FILE).is_file():
        return False
    try:
        written = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(written, dict):
        return False
    expected = _expected_config(config)
    return all(written.get(key) == value for key, value in expected.items())


def _failed_before(path: Path) -> set[str]:
    """The run ids a previous ``sweep.json`` marks failed (none if it cannot be read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {r["run_id"] for r in data["runs"] if r["status"] != "ok"}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _row(
    run: SweepRun,
    status: RunStatus,
    error: str | None,
    directory: Path,
    *,
    reported: bool = True,
) -> SweepRow:
    metrics: Mapping[str, Any] = {}
    if reported:
        summary = json.loads((directory / SUMMARY_FILE).read_text(encoding="utf-8"))
        metrics = summary["metrics"]
    return SweepRow(
        run_id=run.run_id,
        params=run.params,
        seed=run.seed,
        status=status,
        error=error,
        output_dir=f"{RUNS_DIR}/{run.run_id}",
        metrics=metrics,
    )


def _bytes_writer(data: bytes) -> Any:
    def write(handle: BinaryIO) -> None:
        handle.write(data)

    return write


@attrs.define(eq=False)
class _Reporter:
    """One progress line per finished run: ``run 3/12  r002-...  ok  median TTFT 812.34 ms``."""

    stream: TextIO | None
    total: int
    done: int = 0

    def line(self, row: SweepRow, status: str) -> None:
        self.done += 1
        if self.stream is None:
            return
        text = f"run {self.done}/{self.total}  {row.run_id}  {status}"
        if row.error is not None:
            text += f": {row.error}"
        value = row.metrics.get(KEY_METRIC)
        if isinstance(value, int | float):
            text += f"  median TTFT {value:.2f} ms"
        self.stream.write(text + "\n")
        self.stream.flush()


@attrs.define(eq=False)
class _Table:
    """``sweep.json`` and ``sweep.csv``, written together."""

    directory: Path
    swept: tuple[str, ...]

    def write(self, rows: Mapping[int, SweepRow]) -> None:
        ordered = [rows[i] for i in sorted(rows)]
        body = {
            "schema": SWEEP_SCHEMA,
            "schema_version": SWEEP_SCHEMA_VERSION,
            "simclock_version": simclock.__version__,
            "swept": list(self.swept),
            "runs": [jsonable(r.as_json()) for r in ordered],
        }
        data = (dumps(body, indent=2) + "\n").encode()
        table = _csv(ordered, self.swept).encode()
        write_file_set(
            [
                (self.directory / SWEEP_JSON, _bytes_writer(data)),
                (self.directory / SWEEP_CSV, _bytes_writer(table)),
            ],
            what="sweep table",
        )


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return dumps(jsonable(value), indent=None)


def _csv(rows: Sequence[SweepRow], swept: tuple[str, ...]) -> str:
    params = [k for k in swept if k != "seed"]
    metrics: dict[str, None] = {}
    for row in rows:
        metrics.update(dict.fromkeys(row.metrics))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["run_id", "status", "seed", *params, *metrics])
    for row in rows:
        writer.writerow(
            [
                row.run_id,
                row.status,
                row.seed,
                *(_cell(row.params.get(k)) for k in params),
                *(_cell(row.metrics.get(k)) for k in metrics),
            ]
        )
    return buffer.getvalue()
