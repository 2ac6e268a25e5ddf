"""Report outputs: ``summary.json``, ``requests.jsonl``, ``config.json`` and the console table.

The files hold only what the virtual run determines, so the same workload, configuration and
seed give the same bytes on every machine and under every ``PYTHONHASHSEED``: keys are written
in a fixed order, floats in Python's shortest round-trip form, and the wall-clock time is left
out (it appears in :class:`~replay.RunMeta` and in the console table only).

Files are written atomically as a set (``replay/_files.py``): every file is first written to a
temporary name in the output directory, then all are renamed over their final names. If
anything fails, the previous run's files are put back and the temporary files removed, so no
partial or mixed output remains.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, cast

from ._export import (
    EXPORT_FILES,
    EXPORTS,
    Export,
    request_lines,
    requests_csv,
    scalar,
    vllm_bench_json,
    vllm_metrics,
)
from ._export_facts import run_facts
from ._files import (
    FILE_MODE,
    OutputError,
    Writer,
    make_directories,
    remove_directories,
    temp_name,
    write_file_set,
)
from ._metric_table import DISTRIBUTIONS, SCALARS
from ._metrics import Distribution
from ._records import TOKEN_TIMES_MODES as TOKEN_TIMES_MODES
from ._records import TokenTimesMode as TokenTimesMode
from ._records import check_token_times, request_line
from ._records import dumps as _dumps
from ._records import jsonable as _jsonable
from ._records import request_json as request_json
from ._report import ReplayResult, Summary

_NS_PER_MS = 1_000_000

__all__ = (
    "OUTPUT_FILES",
    "OutputError",
    "RequestLog",
    "config_json",
    "format_table",
    "request_json",
    "summary_json",
    "write_outputs",
)

SUMMARY_FILE = "summary.json"
"""Name of the summary file in the output directory."""
REQUESTS_FILE = "requests.jsonl"
"""Name of the per-request file in the output directory."""
CONFIG_FILE = "config.json"
"""Name of the resolved-configuration file in the output directory."""
OUTPUT_FILES: tuple[str, ...] = (SUMMARY_FILE, REQUESTS_FILE, CONFIG_FILE)
"""Every file :func:`write_outputs` writes, in the order it writes them."""

SUMMARY_SCHEMA = "simclock.replay.summary"
REQUEST_SCHEMA = "simclock.replay.requests"


def summary_json(result: ReplayResult) -> dict[str, object]:
    """The content of ``summary.json`` as a dict, keys in their written order."""
    s = result.summary
    meta = result.meta
    return (
        {
            "schema": SUMMARY_SCHEMA,
            "schema_version": meta.schema_version,
            "simclock_version": meta.simclock_version,
            "seed": meta.seed,
            "workload": {
                "source": result.workload_source,
                "format": result.workload_format,
                "requests": s.requests,
            },
            "virtual_duration_ms": meta.virtual_duration_ms,
            "status_counts": dict(s.status_counts),
            "metrics": vllm_metrics(s),
            "distributions": {m.name: getattr(s, m.name).as_dict() for m in DISTRIBUTIONS},
            "slo": None if s.slo is None else s.slo.as_dict(),
            "goodput": None if s.goodput is None else _jsonable(s.goodput),
            "prefix_reuse": {
                "reused_input_tokens": s.reused_input_tokens,
                "reused_input_tokens_with_readmissions": s.reused_input_tokens_with_readmissions,
                "prefix_reuse_ratio": s.prefix_reuse_ratio,
                "prefix_reuse_ratio_with_readmissions": s.prefix_reuse_ratio_with_readmissions,
            },
            "preemptions": s.preemptions,
            "engines": [_jsonable(e) for e in s.engines],
            "lifecycle_events": dict(result.evidence.event_counts),
        }
        | _cost_section(s)
        | _sections(result)
    )


def _cost_section(summary: Summary) -> dict[str, object]:
    """``{"cost": ...}`` when the engines measured their usage."""
    return {} if summary.cost is None else {"cost": summary.cost.as_dict()}


def _sections(result: ReplayResult) -> dict[str, object]:
    """The sections only some runs have: prefill/decode phases, agentic plays."""
    return _pd_section(result) | _plays_section(result.summary)


def _pd_section(result: ReplayResult) -> dict[str, object]:
    """``{"pd_phases": ...}`` for a run with prefill/decode handoffs, else nothing."""
    phases = result.summary.pd_phases
    if phases is None:
        return {}
    return {"pd_phases": phases.as_dict()}


def _plays_section(summary: Summary) -> dict[str, object]:
    """``{"plays": ...}`` for a workload with agentic plays, else nothing (so the summary of
    every other workload keeps its bytes)."""
    plays = summary.plays
    if plays is None:
        return {}
    return {
        "plays": {
            "plays": plays.plays,
            "outcome_counts": dict(plays.outcome_counts),
            "trajectory_ms": plays.trajectory_ms.as_dict(),
            "profile_start_ms": plays.profile_start_ms,
            "cutoff_ms": plays.cutoff_ms,
            "idle_shifts": plays.idle_shifts,
            "outcomes": [
                {
                    "instance_id": o.instance_id,
                    "play_id": o.play_id,
                    "lane": o.lane,
                    "outcome": o.outcome,
                    "failed_request": o.failed_request,
                    "first_release_ms": None
                    if o.first_release_ns is None
                    else o.first_release_ns / 1_000_000,
                    "last_terminal_ms": None
                    if o.last_terminal_ns is None
                    else o.last_terminal_ns / 1_000_000,
                    "trajectory_ms": o.trajectory_ms,
                }
                for o in plays.outcomes
            ],
        }
    }


def config_json(result: ReplayResult) -> dict[str, object]:
    """The content of ``config.json``: schema, version, seed and the resolved configuration.

    A configuration written by the command line can be read back with ``--config``.
    """
    meta = result.meta
    body = {
        "schema_version": meta.schema_version,
        "simclock_version": meta.simclock_version,
    }
    config = _jsonable(meta.config)
    if not isinstance(config, dict):
        raise TypeError("RunMeta.config must be a mapping")
    body.update(config)
    body.setdefault("seed", meta.seed)
    return body


def _render(result: ReplayResult) -> dict[str, bytes]:
    """``summary.json`` and ``config.json``, serialized (before any file is written)."""
    summary = _dumps(summary_json(result), indent=2) + "\n"
    config = _dumps(config_json(result), indent=2) + "\n"
    return {SUMMARY_FILE: summary.encode(), CONFIG_FILE: config.encode()}


def write_outputs(
    result: ReplayResult,
    out_dir: str | os.PathLike[str],
    *,
    token_times: TokenTimesMode = "full",
    request_log: RequestLog | None = None,
    exports: Sequence[Export] = (),
) -> tuple[Path, ...]:
    """Write ``summary.json``, ``requests.jsonl`` and ``config.json`` into ``out_dir``, and
    the files of ``exports`` with them.

    The directory is created if needed. The files are written as a set (see
    ``replay/_files.py``): each goes to a temporary name in ``out_dir`` and all are renamed
    over their final names once every one is complete. On any failure, an interrupt included,
    the files a previous run left there are put back unchanged, the temporary files are
    removed, a directory this call created is removed, and the error propagates.

    ``requests.jsonl`` is written one record at a time from ``result.requests``; a run that
    streamed its records instead (``request_log``) already wrote it under a temporary name,
    and it joins the set as it is.

    Args:
        result: the replay result.
        out_dir: the output directory.
        token_times: how ``requests.jsonl`` holds token times (:data:`TOKEN_TIMES_MODES`).
        request_log: the :class:`RequestLog` the run streamed its records to (opened on
            ``out_dir``); its file becomes ``requests.jsonl``.
        exports: other layouts to write too (:data:`replay.EXPORTS`): ``"vllm"`` writes
            ``vllm_bench.json`` (vLLM's serving-benchmark result file), ``"csv"`` writes
            ``requests.csv`` (one row per request); see ``replay/_export.py``.

    Returns:
        The paths written, in :data:`OUTPUT_FILES` order, then the exports' files.

    Raises:
        OutputError: the directory cannot be created or a file cannot be written; the
            message names the directory or the final file, never a temporary name.
        TypeError: the configuration echo holds a value JSON cannot represent.
        ValueError: ``token_times`` is unknown, ``request_log`` was opened on another
            directory or with other token times, an export is unknown, or the vLLM export
            is asked of records written without token times.
    """
    check_token_times(token_times)
    unknown = [name for name in exports if name not in EXPORTS]
    if unknown:
        raise ValueError(f"exports: unknown export {unknown[0]!r}; known: {', '.join(EXPORTS)}")
    if "vllm" in exports and token_times == "none":
        raise ValueError("exports: vllm needs token times (token_times full or runs)")
    directory = Path(out_dir)
    if request_log is not None:
        request_log.check_target(directory, token_times)
    # serialize first: a bad value fails before any file exists
    contents = _render(result)
    created = make_directories(directory)
    requests: Writer | Path = (
        _records_writer(result, token_times) if request_log is None else request_log.finish()
    )
    writers: dict[str, Writer | Path] = {
        SUMMARY_FILE: _writer(contents[SUMMARY_FILE]),
        REQUESTS_FILE: requests,
        CONFIG_FILE: _writer(contents[CONFIG_FILE]),
    }
    names = list(OUTPUT_FILES)
    streamed = requests if isinstance(requests, Path) else None
    for export in EXPORTS:
        if export in exports:
            writers[EXPORT_FILES[export]] = _export_writer(result, export, streamed)
            names.append(EXPORT_FILES[export])
    try:
        write_file_set([(directory / name, writers[name]) for name in names], what="report")
    except BaseException:
        remove_directories(created)
        raise
    finally:
        if request_log is not None:
            request_log.written()
    return tuple(directory / name for name in names)


def _export_writer(result: ReplayResult, export: Export, streamed: Path | None) -> Writer:
    """The writer of one export's file; it reads the records from ``result`` or, when the run
    streamed them, from the finished ``requests.jsonl`` (``streamed``, still under its
    temporary name: the set is renamed only once every file is written)."""

    def write(handle: BinaryIO) -> None:
        lines = request_lines(result, streamed)
        if export == "csv":
            requests_csv(lines, handle)
        else:
            _write(handle, (_dumps(vllm_bench_json(result, lines), indent=None) + "\n").encode())

    return write


def _writer(data: bytes) -> Writer:
    return lambda handle: _write(handle, data)


def _records_writer(result: ReplayResult, token_times: TokenTimesMode) -> Writer:
    def write(handle: BinaryIO) -> None:
        for record in result.requests:
            _write(handle, request_line(record, token_times=token_times))

    return write


def _write(handle: BinaryIO, data: bytes) -> None:
    """Write ``data`` to an open binary file (a seam the tests use to inject a failure)."""
    handle.write(data)


class RequestLog:
    """``requests.jsonl`` written while a run goes on, one line as each request settles.

    A run given a request log (``replay.run(..., request_log=log)``) writes each record's
    line as soon as the request settles and every earlier record is written (records keep
    their order: the workload's requests in workload order, then the others), and keeps no
    records: ``result.requests`` is empty, the summary is the same. The lines go to a
    temporary file in the output directory; :func:`write_outputs` with the same log makes it
    ``requests.jsonl``, together with the other files, as a set. A log that is never written
    (the run failed with no report, or was interrupted) is removed when its ``with`` block
    ends, with any directory it created: nothing is left behind.

    Usage::

        with replay.RequestLog.open(out_dir, token_times="runs") as log:
            result = replay.run(workload, topology=..., policy=..., request_log=log)
            replay.write_outputs(result, out_dir, token_times="runs", request_log=log)

    State: open (lines are appended) → finished (the file is complete, handed to
    :func:`write_outputs`) → written or discarded.
    """

    def __init__(
        self,
        directory: Path,
        temp: Path,
        handle: BinaryIO,
        token_times: TokenTimesMode,
        created: list[Path],
    ) -> None:
        self.directory = directory
        self.token_times: TokenTimesMode = token_times
        self._temp = temp
        self._handle: BinaryIO | None = handle
        self._created = created
        self._state = "open"

    @classmethod
    def open(
        cls, out_dir: str | os.PathLike[str], *, token_times: TokenTimesMode = "full"
    ) -> RequestLog:
        """Create ``out_dir`` if needed and open the temporary file the lines go to.

        Raises:
            OutputError: the directory cannot be created or the file cannot be opened.
            ValueError: ``token_times`` is unknown.
        """
        check_token_times(token_times)
        directory = Path(out_dir)
        created = make_directories(directory)
        final = directory / REQUESTS_FILE
        temp = temp_name(final, "tmp")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except OSError as exc:
            remove_directories(created)
            raise OutputError(f"{final}: cannot write report: {exc.strerror or exc}") from exc
        handle = os.fdopen(fd, "wb", buffering=_BUFFER)
        return cls(directory, temp, handle, token_times, created)

    def write(self, line: bytes) -> None:
        """Append one line (the stream of the run calls this, in record order)."""
        handle = self._handle
        if handle is None:
            raise ValueError("the request log is closed")
        try:
            handle.write(line)
        except OSError as exc:
            final = self.directory / REQUESTS_FILE
            raise OutputError(f"{final}: cannot write report: {exc.strerror or exc}") from exc

    def check_target(self, directory: Path, token_times: TokenTimesMode) -> None:
        """Raise ``ValueError`` unless this log belongs in ``directory`` with ``token_times``."""
        if directory.resolve() != self.directory.resolve():
            raise ValueError(f"request_log: opened on {self.directory}, not on {directory}")
        if token_times != self.token_times:
            raise ValueError(
                f"request_log: opened with token_times={self.token_times!r}, not {token_times!r}"
            )
        if self._state != "open":
            raise ValueError(f"request_log: already {self._state}")

    def finish(self) -> Path:
        """Close the file (complete now); return its temporary path."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()
        self._state = "finished"
        return self._temp

    def written(self) -> None:
        """The file was renamed into place, or removed with a failed set."""
        self._state = "written"
        self._created = []

    def discard(self) -> None:
        """Remove the temporary file and any directory :meth:`open` created."""
        if self._state == "written":
            return
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()
        with contextlib.suppress(OSError):
            self._temp.unlink(missing_ok=True)
        remove_directories(self._created)
        self._created = []
        self._state = "discarded"

    def __enter__(self) -> RequestLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()


_BUFFER = 1 << 20


# --------------------------------------------------------------------------------------------
# Console table


def _num(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def format_table(result: ReplayResult) -> str:
    """The console summary, in the layout of vLLM's serving benchmark, as one string.

    Unlike the files, it shows the wall-clock time of the run.
    """
    s = result.summary
    meta = result.meta
    width = 50
    rows: list[str] = []

    def title(text: str, fill: str = "-") -> None:
        rows.append(f" {text} ".center(width, fill))

    def row(label: str, value: str) -> None:
        rows.append(f"{label + ':':<40} {value}")

    title("Replay Result", "=")
    row("Workload", f"{result.workload_source} ({result.workload_format})")
    setup = _setup_text(meta.config)
    if setup:
        row("Setup", setup)
    facts = run_facts(meta.config)
    if facts.gpu is not None and facts.model_id is not None:
        tp = "" if facts.tensor_parallel is None else f", TP {facts.tensor_parallel}"
        row("GPU, model, TP", f"{facts.gpu}, {facts.model_id}{tp}")
    if facts.scheduler is not None:
        row("Scheduler", facts.scheduler)
    row("Load", facts.load)
    row("Requests", str(s.requests))
    for status, count in s.status_counts.items():
        if count or status == "completed":
            row(f"  {status}", str(count))
    goodput, slo = s.goodput, s.slo
    for figure in SCALARS:
        if figure.name == "request_goodput":
            if goodput is not None:
                bounds = "own SLOs" if slo is None else slo.as_text()
                row(f"Request goodput (req/s) [{bounds}]", _num(goodput.request_goodput))
                row("SLO attainment (% of completed)", _num(_pct(goodput.attainment)))
        elif figure.label is not None:
            value = cast("float | int | None", scalar(s, figure.name))
            row(figure.label, str(value) if isinstance(value, int) else _num(value))
    row("Prefix reuse (% of input tokens)", _num(_pct(s.prefix_reuse_ratio)))
    row("Preemptions", str(s.preemptions))
    for metric in DISTRIBUTIONS:
        if metric.heading is None:
            continue
        d: Distribution = getattr(s, metric.name)
        title(metric.heading)
        row(f"Mean {metric.label} (ms)", _num(d.mean))
        row(f"Median {metric.label} (ms)", _num(d.p50))
        row(f"P99 {metric.label} (ms)", _num(d.p99))
    phases = s.pd_phases
    if phases is not None:
        title("Prefill/decode phases (mean / P99 ms)")
        for label, name in (
            ("Prefill queueing", "prefill_queueing_ms"),
            ("Prefill compute", "prefill_compute_ms"),
            ("Reservation wait", "reservation_wait_ms"),
            ("KV transfer", "transfer_ms"),
            ("Decode queueing", "decode_queueing_ms"),
            ("Decode first pass", "decode_first_pass_ms"),
        ):
            d = getattr(phases, name)
            row(f"{label} (ms)", f"{_num(d.mean)} / {_num(d.p99)}")
    if s.plays is not None:
        title("Plays")
        row("Plays", str(s.plays.plays))
        for outcome, count in s.plays.outcome_counts.items():
            if count or outcome == "completed":
                row(f"  {outcome}", str(count))
        trajectory = s.plays.trajectory_ms
        row(
            "Trajectory P50 / P90 / P99 (ms)",
            " / ".join(_num(v) for v in (trajectory.p50, trajectory.p90, trajectory.p99)),
        )
    if s.engines:
        title("Engines")
        for e in s.engines:
            role = facts.engine_role(e.index)
            name = f"Engine {e.index}" if role is None else f"Engine {e.index} ({role})"
            row(
                f"{name} utilisation (%)",
                f"{_num(_pct(e.utilisation))}  ({e.completed} completed, "
                f"{e.preemptions} preemptions)",
            )
            if e.mean_batch_size is not None:
                row(
                    f"{name} batch: mean, peak running",
                    f"{_num(e.mean_batch_size)}, {e.peak_running}",
                )
            if e.peak_kv_usage is not None:
                row(f"{name} peak KV usage (%)", _num(_pct(e.peak_kv_usage)))
    cost = s.cost
    if cost is not None:
        title("Cost")
        row("Engine-seconds", _num(cost.engine_seconds))
        row("GPU-seconds", _num(cost.gpu_seconds))
        row("Requests per engine-hour", _num(cost.requests_per_engine_hour))
        row("Output tokens per engine-hour", _num(cost.output_tokens_per_engine_hour))
        if cost.engine_count:
            counts = [c.engines for c in cost.engine_count]
            row("Engines: min / max / at the end", f"{min(counts)} / {max(counts)} / {counts[-1]}")
    title("Run")
    row("Seed", str(meta.seed))
    row("Virtual time (s)", _num(meta.virtual_duration_ms / 1000, 3))
    row("Events processed", str(meta.events_processed))
    row("Wall time (s)", _num(meta.wall_time_s, 3))
    rows.append("=" * width)
    return "\n".join(rows) + "\n"


def _setup_text(config: Mapping[str, object]) -> str:
    """``4 engines, RooflineTiming, round_robin`` from the runner's configuration echo."""
    parts: list[str] = []
    topology = config.get("topology")
    if isinstance(topology, Mapping):
        workers = topology.get("workers")
        if isinstance(workers, int):
            parts.append(f"{workers} engine{'s' if workers != 1 else ''}")
        prefill, decode = topology.get("prefill_workers"), topology.get("decode_workers")
        if isinstance(prefill, int) and isinstance(decode, int):
            parts.append(f"{prefill} prefill + {decode} decode engines")
        timing = topology.get("timing", topology.get("prefill_timing"))
        if isinstance(timing, Mapping) and isinstance(timing.get("type"), str):
            parts.append(str(timing["type"]))
    policy = config.get("policy")
    if isinstance(policy, str):
        parts.append(policy)
    return ", ".join(parts)


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value
