"""What the figures and the comparison read from a run's output directory: ``summary.json``,
``config.json``, ``requests.jsonl`` and, when the run recorded it, ``engines.csv``; and from
a sweep's directory, ``sweep.json`` (docs/reference/plots.md).

Everything here is plain data (numpy arrays, dicts): no plotting library is needed to load a
run, so :func:`replay.compare` works without the ``plot`` extra.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ._exceptions import ReplayError
from ._output import CONFIG_FILE, REQUESTS_FILE, SUMMARY_FILE
from ._series import SERIES_FILE, SeriesError, read_series

__all__ = (
    "SWEEP_FILE",
    "RunData",
    "RunDataError",
    "SweepData",
    "bin_edges",
    "is_sweep",
    "load_run",
    "load_sweep",
    "read_json",
    "run_labels",
)

SWEEP_FILE = "sweep.json"
"""The table of a sweep's runs in its output directory."""


class RunDataError(ReplayError, ValueError):
    """An output directory cannot be read (the message names the file, line and field)."""


@attrs.frozen
class RunData:
    """One run's outputs, as the figures and the comparison use them.

    Attributes:
        path: the output directory.
        policy: the policy's name (``config.json``), or ``?`` when it names none.
        summary: ``summary.json``.
        config: ``config.json`` (empty when absent).
        ttft_ms: TTFT of every request that has one, in file order.
        tpot_ms: TPOT of every request that has one.
        e2e_ms: end-to-end latency of every request that has one.
        arrival_s: per request, when it arrived (NaN: never issued).
        admitted_s: per request, its first admission (NaN: never admitted).
        terminal_s: per request, when it settled (NaN: never).
        completed_s: when each completed request finished.
        token_s: every output token's time (spread evenly between a request's first and last
            token when ``requests.jsonl`` holds no token times).
        series: ``engines.csv`` read with :func:`replay._series.read_series`; None without
            one.
    """

    path: Path
    policy: str
    summary: Mapping[str, Any]
    config: Mapping[str, Any]
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    arrival_s: np.ndarray
    admitted_s: np.ndarray
    terminal_s: np.ndarray
    completed_s: np.ndarray
    token_s: np.ndarray
    series: Mapping[int, Mapping[str, Any]] | None

    @property
    def duration_s(self) -> float:
        """The run's virtual duration in seconds."""
        value = self.summary.get("virtual_duration_ms")
        return float(value) / 1000 if isinstance(value, int | float) else 0.0


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``.

    Raises:
        RunDataError: the file is missing, not JSON, or not an object (names file and line).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunDataError(f"{path}: no such file") from None
    except OSError as exc:
        raise RunDataError(f"{path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDataError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise RunDataError(f"{path}:1: must be a JSON object")
    return value


def _number(record: Mapping[str, Any], name: str, where: str) -> float:
    value = record.get(name)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunDataError(f"{where}: {name}: must be a number or null, got {value!r}")
    return float(value)


def _token_times_ms(record: Mapping[str, Any], where: str) -> list[float]:
    """The output token times of one record: listed, as runs, or spread evenly."""
    times = record.get("token_times_ms")
    if isinstance(times, list):
        return [float(t) for t in times]
    runs = record.get("token_time_runs_ms")
    if isinstance(runs, list):
        out: list[float] = []
        for run in runs:
            if not (isinstance(run, list) and len(run) == 3):
                raise RunDataError(f"{where}: token_time_runs_ms: runs are [start, step, count]")
            start, step, count = run
            out.extend(float(start) + float(step) * k for k in range(int(count)))
        return out
    count = record.get("output_tokens")
    first = _number(record, "first_token_ms", where)
    last = _number(record, "last_token_ms", where)
    if not isinstance(count, int) or count <= 0 or math.isnan(first):
        return []
    if count == 1 or math.isnan(last):
        return [first]
    return list(np.linspace(first, last, count))


def load_run(directory: str | Path) -> RunData:
    """Read a run's output directory.

    Raises:
        RunDataError: a file is missing or malformed (the message names it, and the line).
    """
    path = Path(directory)
    if not path.is_dir():
        raise RunDataError(f"{path}: not a directory")
    summary = read_json(path / SUMMARY_FILE)
    if summary.get("schema") != "simclock.replay.summary":
        raise RunDataError(f"{path / SUMMARY_FILE}:1: schema: not a simclock replay summary")
    config_path = path / CONFIG_FILE
    config = read_json(config_path) if config_path.exists() else {}
    policy = config.get("policy")
    columns: dict[str, list[float]] = {
        k: [] for k in ("ttft", "tpot", "e2e", "arrival", "admitted", "terminal", "completed")
    }
    tokens: list[float] = []
    requests = path / REQUESTS_FILE
    try:
        stream = requests.open(encoding="utf-8")
    except OSError as exc:
        raise RunDataError(f"{requests}: {exc.strerror or exc}") from None
    with stream:
        for line_no, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            where = f"{requests}:{line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RunDataError(f"{where}: not valid JSON: {exc.msg}") from None
            if not isinstance(record, dict):
                raise RunDataError(f"{where}: must be a JSON object")
            for key, name in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2e", "e2e_ms")):
                value = _number(record, name, where)
                if not math.isnan(value):
                    columns[key].append(value)
            columns["arrival"].append(_number(record, "arrival_ms", where) / 1000)
            columns["admitted"].append(_number(record, "first_admit_ms", where) / 1000)
            terminal = _number(record, "terminal_ms", where) / 1000
            columns["terminal"].append(terminal)
            if record.get("status") == "completed":
                columns["completed"].append(terminal)
            tokens.extend(t / 1000 for t in _token_times_ms(record, where))
    series = None
    series_path = path / SERIES_FILE
    if series_path.exists():
        try:
            series = read_series(series_path)
        except SeriesError as exc:
            raise RunDataError(str(exc)) from None
    return RunData(
        path=path,
        policy=policy if isinstance(policy, str) else "?",
        summary=summary,
        config=config,
        ttft_ms=np.asarray(columns["ttft"]),
        tpot_ms=np.asarray(columns["tpot"]),
        e2e_ms=np.asarray(columns["e2e"]),
        arrival_s=np.asarray(columns["arrival"]),
        admitted_s=np.asarray(columns["admitted"]),
        terminal_s=np.asarray(columns["terminal"]),
        completed_s=np.asarray(columns["completed"]),
        token_s=np.asarray(tokens),
        series=series,
    )


def run_labels(paths: Sequence[Path], policies: Sequence[str]) -> list[str]:
    """The legend label of each run: its policy when the runs' policies differ, else its
    directory's name when those differ, else the path as given."""
    if len(set(policies)) == len(policies) and "?" not in policies:
        return list(policies)
    names = [p.name or str(p) for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]


def bin_edges(duration_s: float, *, max_bins: int = 200) -> np.ndarray:
    """Edges of equal bins over ``[0, duration_s]``: the smallest width of 1, 2 or 5 x 10^k
    seconds (k >= -3) that makes at most ``max_bins`` bins."""
    target = max(duration_s, 1e-3) / max_bins
    width = 1e-3
    while True:
        chosen = next((width * s for s in (1, 2, 5) if width * s >= target), None)
        if chosen is not None:
            break
        width *= 10
    bins = max(1, math.ceil(round(duration_s / chosen, 9)))
    return np.arange(bins + 1, dtype=np.float64) * chosen


@attrs.frozen
class SweepData:
    """A sweep's table (``sweep.json``, layout in docs/reference/plots.md).

    Attributes:
        path: the sweep's output directory.
        swept: the swept keys, in grid order.
        runs: the runs, in grid order (``run_id``, ``params``, ``seed``, ``status``,
            ``metrics``, ...).
    """

    path: Path
    swept: tuple[str, ...]
    runs: tuple[Mapping[str, Any], ...]


def load_sweep(directory: str | Path) -> SweepData:
    """Read a sweep's ``sweep.json``.

    Raises:
        RunDataError: the file is missing or malformed (the message names it and the field).
    """
    path = Path(directory)
    file = path / SWEEP_FILE
    table = read_json(file)
    if table.get("schema") != "simclock.sweep":
        raise RunDataError(f"{file}: schema: not a simclock sweep table")
    swept = table.get("swept")
    runs = table.get("runs")
    if not isinstance(swept, list) or not all(isinstance(k, str) for k in swept):
        raise RunDataError(f"{file}: swept: must be a list of key names")
    if not isinstance(runs, list):
        raise RunDataError(f"{file}: runs: must be a list")
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise RunDataError(f"{file}: runs[{i}]: must be an object")
        for name, kind in (("params", dict), ("status", str)):
            if not isinstance(run.get(name), kind):
                raise RunDataError(f"{file}: runs[{i}]: {name}: missing or of the wrong type")
        if run["status"] == "ok" and not isinstance(run.get("metrics"), dict):
            raise RunDataError(f"{file}: runs[{i}]: metrics: must be an object")
    return SweepData(path=path, swept=tuple(swept), runs=tuple(runs))


def is_sweep(directory: str | Path) -> bool:
    """Whether ``directory`` holds a sweep's table."""
    return (Path(directory) / SWEEP_FILE).is_file()
