"""Figures of one or more runs (and of sweeps), drawn with matplotlib (the ``plot`` extra).

:func:`plot` reads output directories (:mod:`replay._plot_data`) and writes, into one
directory, PNG and SVG files of:

- ``ttft_cdf``, ``tpot_cdf``, ``e2e_cdf``: the latency CDFs, one line per run;
- ``throughput``: output tokens/s and completed requests/s over virtual time, per run;
- ``requests``: requests in flight and requests waiting for their first admission over
  virtual time, per run;
- ``engines`` (``engines_<label>`` with several runs): per-engine queue depth, batch size,
  KV usage and utilisation over virtual time, from the run's ``engines.csv``; a run without
  one gets a note instead;
- for a sweep directory, ``sweep_<metric>``: a metric against the swept key, one line per
  policy (:func:`plot_sweep`);
- ``report.html``: one self-contained page with every figure (SVG inline), the notes and the
  comparison table (:mod:`replay._html_report`).

The output is deterministic: no dates in the metadata, a fixed SVG hash salt, matplotlib's
default style whatever the user's ``matplotlibrc``; the same inputs give the same bytes (with
the same matplotlib). Everything is drawn in memory and written as one set: a failure leaves
no half-written directory. matplotlib draws off-screen (its Agg canvas; pyplot is never
imported).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import attrs
import numpy as np

from simclock import SimulationError

from ._compare import compare
from ._files import make_directories, write_file_set
from ._html_report import Section, html_report
from ._plot_data import (
    RunData,
    RunDataError,
    SweepData,
    bin_edges,
    is_sweep,
    load_run,
    load_sweep,
    run_labels,
)

__all__ = (
    "DEFAULT_SWEEP_METRICS",
    "INSTALL_HINT",
    "PLOT_FORMATS",
    "PlotExtraMissing",
    "PlotResult",
    "plot",
    "plot_sweep",
    "require_matplotlib",
    "sweep_axes",
)

PLOT_FORMATS: tuple[str, ...] = ("png", "svg")
"""The image formats written, by default both."""

DEFAULT_SWEEP_METRICS: tuple[str, ...] = (
    "p99_ttft_ms",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "mean_e2el_ms",
    "request_throughput",
    "output_throughput",
)
"""The ``summary.json`` metrics a sweep is drawn against its swept key by default."""

INSTALL_HINT = "pip install 'simclock[plot]'"

# Deterministic, self-contained output whatever the user's matplotlibrc says.
_RC: dict[str, object] = {
    "svg.hashsalt": "simclock",
    "svg.fonttype": "none",  # text stays text: smaller files, searchable labels
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "figure.figsize": (7.0, 4.0),
    "axes.grid": True,
    "grid.alpha": 0.3,
}
_METADATA: dict[str, dict[str, str | None]] = {
    "svg": {"Date": None, "Creator": "simclock"},
    "png": {"Software": "simclock"},
}


class PlotExtraMissing(SimulationError, ImportError):
    """matplotlib is not installed: ``pip install 'simclock[plot]'``."""


@attrs.frozen
class PlotResult:
    """What :func:`plot` wrote.

    Attributes:
        files: every file written, in writing order (figures by name, then the report).
        notes: what could not be drawn, and why (also in the report).
    """

    files: tuple[Path, ...]
    notes: tuple[str, ...]


def _matplotlib() -> Any:
    """The ``matplotlib`` module, with its off-screen canvas loaded."""
    try:
        import matplotlib
        import matplotlib.backends.backend_agg
        import matplotlib.figure
        import matplotlib.style
    except ImportError:
        raise PlotExtraMissing(f"plots need matplotlib: {INSTALL_HINT}") from None
    return matplotlib


def require_matplotlib() -> None:
    """Raise :class:`PlotExtraMissing` unless matplotlib can be imported."""
    _matplotlib()


@attrs.frozen
class _Drawn:
    """One figure, rendered in every format asked."""

    name: str
    title: str
    images: Mapping[str, bytes]


def _render(name: str, title: str, draw: Callable[[Any], None], formats: Sequence[str]) -> _Drawn:
    mpl = _matplotlib()
    with mpl.style.context("default"), mpl.rc_context(_RC):
        figure = mpl.figure.Figure()
        mpl.backends.backend_agg.FigureCanvasAgg(figure)
        draw(figure)
        figure.suptitle(title)
        figure.tight_layout()
        images: dict[str, bytes] = {}
        for fmt in formats:
            buffer = io.BytesIO()
            figure.savefig(buffer, format=fmt, metadata=_METADATA[fmt])
            images[fmt] = buffer.getvalue()
    return _Drawn(name, title, images)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_") or "run"


# -- the figures of runs -------------------------------------------------------------------


def _cdf(
    runs: Sequence[RunData], labels: Sequence[str], column: str, what: str
) -> Callable[[Any], None]:
    def draw(figure: Any) -> None:
        ax = figure.add_subplot()
        positive = True
        for run, label in zip(runs, labels, strict=True):
            values = np.sort(getattr(run, column))
            if values.size == 0:
                continue
            positive = positive and bool(values[0] > 0)
            shares = np.arange(1, values.size + 1) / values.size
            ax.step(values, shares, where="post", label=label)
        everything = np.concatenate([getattr(r, column) for r in runs])
        if positive and everything.size and everything.max() > 100 * everything.min():
            ax.set_xscale("log")
        ax.set_xlabel(f"{what} (ms)")
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right")

    return draw


def _over_time(
    runs: Sequence[RunData], labels: Sequence[str]
) -> tuple[Callable[[Any], None], Callable[[Any], None]]:
    edges = bin_edges(max((r.duration_s for r in runs), default=0.0))
    width = float(edges[1] - edges[0])
    mids = (edges[:-1] + edges[1:]) / 2

    def throughput(figure: Any) -> None:
        tokens_ax, requests_ax = figure.subplots(2, 1, sharex=True)
        for run, label in zip(runs, labels, strict=True):
            tokens, _ = np.histogram(run.token_s, bins=edges)
            done, _ = np.histogram(run.completed_s, bins=edges)
            tokens_ax.plot(mids, tokens / width, label=label)
            requests_ax.plot(mids, done / width, label=label)
        tokens_ax.set_ylabel("output tokens/s")
        requests_ax.set_ylabel("completed req/s")
        requests_ax.set_xlabel("virtual time (s)")
        tokens_ax.legend(loc="upper right")

    def requests(figure: Any) -> None:
        flight_ax, queued_ax = figure.subplots(2, 1, sharex=True)
        for run, label in zip(runs, labels, strict=True):
            flight = _count_between(run.arrival_s, run.terminal_s, edges)
            queued = _count_between(run.arrival_s, run.admitted_s, edges)
            flight_ax.step(edges, flight, where="post", label=label)
            queued_ax.step(edges, queued, where="post", label=label)
        flight_ax.set_ylabel("in flight")
        queued_ax.set_ylabel("not yet admitted")
        queued_ax.set_xlabel("virtual time (s)")
        flight_ax.legend(loc="upper right")

    return throughput, requests


def _engine_count(run: RunData) -> list[Mapping[str, Any]] | None:
    """The run's engine count over time (``summary.json`` ``cost.engine_count``: present when
    its cluster changed), or None."""
    cost = run.summary.get("cost")
    steps = cost.get("engine_count") if isinstance(cost, Mapping) else None
    return steps if isinstance(steps, list) and steps else None


def _engine_count_figure(
    runs: Sequence[RunData],
    labels: Sequence[str],
    counts: Sequence[list[Mapping[str, Any]] | None],
) -> Callable[[Any], None]:
    def draw(figure: Any) -> None:
        paid_ax, active_ax = figure.subplots(2, 1, sharex=True)
        for run, label, steps in zip(runs, labels, counts, strict=True):
            if steps is None:
                continue
            end_s = max(run.duration_s, steps[-1]["at_ms"] / 1000)
            at = [step["at_ms"] / 1000 for step in steps] + [end_s]
            paid = [step["engines"] for step in steps]
            active = [step["active"] for step in steps]
            paid_ax.step(at, [*paid, paid[-1]], where="post", label=label)
            active_ax.step(at, [*active, active[-1]], where="post", label=label)
        paid_ax.set_ylabel("engines paid for")
        active_ax.set_ylabel("engines serving")
        active_ax.set_xlabel("virtual time (s)")
        paid_ax.legend(loc="upper right")

    return draw


def _count_between(start: np.ndarray, end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many ``[start, end)`` intervals hold each instant of ``at`` (NaN end: open)."""
    started = np.sort(start[~np.isnan(start)])
    ended = np.sort(end[~np.isnan(end) & ~np.isnan(start)])
    return np.searchsorted(started, at, side="right") - np.searchsorted(ended, at, side="right")


_ENGINE_PANELS: tuple[tuple[str, str, float], ...] = (
    ("queue_depth", "queue depth", 1.0),
    ("batch_size", "batch size", 1.0),
    ("kv_usage", "KV usage (%)", 100.0),
    ("utilisation", "utilisation (%)", 100.0),
)
_MAX_ENGINE_LINES = 8


def _engines(series: Mapping[int, Mapping[str, Any]]) -> Callable[[Any], None]:
    def draw(figure: Any) -> None:
        figure.set_size_inches(9.0, 6.0)
        axes = figure.subplots(2, 2, sharex=True).flatten()
        engines = sorted(series)
        for ax, (column, label, scale) in zip(axes, _ENGINE_PANELS, strict=True):
            if len(engines) <= _MAX_ENGINE_LINES:
                for engine in engines:
                    cols = series[engine]
                    role = cols["role"]
                    name = f"engine {engine}" + ("" if role == "aggregated" else f" ({role})")
                    ax.plot(_mids(cols), cols[column] * scale, label=name)
            else:
                stack = np.vstack([series[e][column] * scale for e in engines])
                x = _mids(series[engines[0]])
                ax.fill_between(
                    x,
                    np.nanmin(stack, axis=0),
                    np.nanmax(stack, axis=0),
                    alpha=0.3,
                    label="min-max over engines",
                )
                ax.plot(x, np.nanmean(stack, axis=0), label=f"mean of {len(engines)} engines")
            ax.set_ylabel(label)
        for ax in axes[2:]:
            ax.set_xlabel("virtual time (s)")
        axes[0].legend(loc="upper right", fontsize="small")

    return draw


def _mids(cols: Mapping[str, Any]) -> np.ndarray:
    return np.asarray((cols["start_s"] + cols["end_s"]) / 2)


def _run_figures(
    runs: Sequence[RunData], labels: Sequence[str], formats: Sequence[str], notes: list[str]
) -> Iterator[_Drawn]:
    for column, name, what in (
        ("ttft_ms", "ttft_cdf", "TTFT"),
        ("tpot_ms", "tpot_cdf", "TPOT"),
        ("e2e_ms", "e2e_cdf", "E2E latency"),
    ):
        if all(getattr(r, column).size == 0 for r in runs):
            notes.append(f"{name}: no request has a {what}")
            continue
        yield _render(name, f"{what} CDF", _cdf(runs, labels, column, what), formats)
    throughput, requests = _over_time(runs, labels)
    yield _render("throughput", "Throughput over virtual time", throughput, formats)
    yield _render("requests", "Requests over virtual time", requests, formats)
    counts = [_engine_count(run) for run in runs]
    if any(c is not None for c in counts):
        yield _render(
            "engine_count",
            "Engines over virtual time (autoscaling and cluster changes)",
            _engine_count_figure(runs, labels, counts),
            formats,
        )
    for run, label in zip(runs, labels, strict=True):
        name = "engines" if len(runs) == 1 else f"engines_{_safe(label)}"
        if run.series is None:
            notes.append(
                f"{name}: {run.path} has no engines.csv (replay with --series or --plots "
                "to record queue depth, batch size, KV usage and utilisation per engine)"
            )
            continue
        title = "Engines over virtual time" + ("" if len(runs) == 1 else f": {label}")
        yield _render(name, title, _engines(run.series), formats)


# -- sweeps ---------------------------------------------------------------------------------


def _display(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _numeric(values: Sequence[object]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def sweep_axes(sweep: SweepData) -> tuple[str | None, list[str]]:
    """The key a sweep's metrics are drawn against (None: the runs' order), and the keys
    whose values tell its lines apart (policy first)."""
    keys = [k for k in sweep.swept if k not in ("policy", "seed")]
    x = keys[0] if keys else ("policy" if "policy" in sweep.swept else None)
    lines = [k for k in sweep.swept if k not in (x, "seed")]
    return x, lines


def _sweep_figure(sweep: SweepData, metric: str) -> Callable[[Any], None]:
    x_key, line_keys = sweep_axes(sweep)
    ok = [r for r in sweep.runs if r["status"] == "ok"]
    xs = [r["params"].get(x_key) if x_key else r.get("run_id") for r in ok]
    numeric = _numeric(xs)
    order: list[str] = []
    for x in xs:
        if _display(x) not in order:
            order.append(_display(x))
    # line label -> x text -> metric values (one per seed)
    lines: dict[str, dict[str, list[float]]] = {}
    x_values: dict[str, object] = {}
    for run, x in zip(ok, xs, strict=True):
        label = (
            ", ".join(
                _display(run["params"].get(k))
                if k == "policy"
                else f"{k}={_display(run['params'].get(k))}"
                for k in line_keys
            )
            or "all runs"
        )
        value = run["metrics"].get(metric)
        if isinstance(value, int | float) and not isinstance(value, bool):
            lines.setdefault(label, {}).setdefault(_display(x), []).append(float(value))
            x_values[_display(x)] = x

    def draw(figure: Any) -> None:
        ax = figure.add_subplot()
        for label, points in lines.items():
            keys = [k for k in order if k in points]
            if numeric:
                keys.sort(key=lambda k: float(x_values[k]))  # type: ignore[arg-type]
                xpos: list[float] = [float(x_values[k]) for k in keys]  # type: ignore[arg-type]
            else:
                xpos = [float(order.index(k)) for k in keys]
            means = [float(np.mean(points[k])) for k in keys]
            ax.plot(xpos, means, marker="o", label=label)
        if not numeric:
            ax.set_xticks(range(len(order)), order)
        ax.set_xlabel(x_key or "run")
        ax.set_ylabel(metric)
        if lines:
            ax.legend(loc="best")

    return draw


def _sweep_figures(
    sweep: SweepData, metrics: Sequence[str], formats: Sequence[str], prefix: str, notes: list[str]
) -> Iterator[_Drawn]:
    ok = [r for r in sweep.runs if r["status"] == "ok"]
    failed = len(sweep.runs) - len(ok)
    if failed:
        notes.append(f"{sweep.path}: {failed} of {len(sweep.runs)} runs failed and are not drawn")
    if not ok:
        notes.append(f"{sweep.path}: no run finished: nothing to draw")
        return
    known = sorted({k for r in ok for k in r["metrics"]})
    seeds = {r.get("seed") for r in ok}
    x_key, _ = sweep_axes(sweep)
    for metric in metrics:
        if metric not in known:
            notes.append(f"{prefix}sweep_{metric}: no run has the metric {metric!r}")
            continue
        title = f"{metric} by {x_key or 'run'}" + (
            f" (mean over {len(seeds)} seeds)" if "seed" in sweep.swept and len(seeds) > 1 else ""
        )
        yield _render(
            f"{prefix}sweep_{_safe(metric)}", title, _sweep_figure(sweep, metric), formats
        )


# -- entry points ----------------------------------------------------------------------------


def _check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    for fmt in formats:
        if fmt not in PLOT_FORMATS:
            raise ValueError(f"format: must be one of {', '.join(PLOT_FORMATS)}, got {fmt!r}")
    if not formats:
        raise ValueError("format: give at least one of png, svg")
    return tuple(dict.fromkeys(formats))


def plot(
    directories: Sequence[str | Path],
    output: str | Path,
    *,
    formats: Sequence[str] = PLOT_FORMATS,
    metrics: Sequence[str] = DEFAULT_SWEEP_METRICS,
    report: bool = True,
) -> PlotResult:
    """Draw the figures of runs and sweeps into ``output`` (module docstring).

    Args:
        directories: run output directories (``summary.json``, ``requests.jsonl``, ...) and
            sweep directories (``sweep.json``), in legend order; the first run is the
            comparison's baseline.
        output: the directory to write into (created if needed).
        formats: image formats, ``png`` and/or ``svg``.
        metrics: the ``summary.json`` metrics a sweep is drawn for.
        report: also write ``report.html``.

    Returns:
        The :class:`PlotResult`.

    Raises:
        PlotExtraMissing: matplotlib is not installed.
        RunDataError: a directory cannot be read (the message names the file).
        OutputError: ``output`` cannot be written.
    """
    _matplotlib()
    formats = _check_formats(formats)
    if not directories:
        raise RunDataError("plot: give at least one output directory")
    sweep_dirs = [Path(d) for d in directories if is_sweep(d)]
    run_dirs = [Path(d) for d in directories if not is_sweep(d)]
    runs = [load_run(d) for d in run_dirs]
    sweeps = [load_sweep(d) for d in sweep_dirs]
    notes: list[str] = []
    drawn: list[_Drawn] = []
    sections: list[Section] = []
    if runs:
        labels = run_labels([r.path for r in runs], [r.policy for r in runs])
        drawn += _run_figures(runs, labels, formats, notes)
        table = compare(run_dirs)
        sections.append(Section("Runs", table=table))
    for sweep in sweeps:
        prefix = "" if len(sweeps) == 1 else f"{_safe(sweep.path.name)}_"
        drawn += _sweep_figures(sweep, metrics, formats, prefix, notes)
        sections.append(Section(f"Sweep {sweep.path}", sweep=sweep))
    return _write(Path(output), drawn, notes, sections, report=report)


def plot_sweep(
    sweep_dir: str | Path,
    output: str | Path,
    *,
    formats: Sequence[str] = PLOT_FORMATS,
    metrics: Sequence[str] = DEFAULT_SWEEP_METRICS,
    report: bool = True,
) -> PlotResult:
    """Draw a sweep's metrics against its swept key, one line per policy, into ``output``.

    Args:
        sweep_dir: the sweep's output directory (``sweep.json``).
        output: the directory to write into.
        formats: image formats.
        metrics: the ``summary.json`` metrics to draw (those no run has are noted).
        report: also write ``report.html``.

    Raises:
        PlotExtraMissing: matplotlib is not installed.
        RunDataError: ``sweep.json`` is missing or malformed.
    """
    if not is_sweep(sweep_dir):
        raise RunDataError(f"{Path(sweep_dir) / 'sweep.json'}: no such file")
    return plot([sweep_dir], output, formats=formats, metrics=metrics, report=report)


def _write(
    output: Path,
    drawn: Sequence[_Drawn],
    notes: Sequence[str],
    sections: Sequence[Section],
    *,
    report: bool,
) -> PlotResult:
    files: list[tuple[Path, Callable[[BinaryIO], None]]] = []

    def writer(data: bytes) -> Callable[[BinaryIO], None]:
        def dump(stream: BinaryIO) -> None:
            stream.write(data)

        return dump

    for figure in drawn:
        for fmt, data in figure.images.items():
            files.append((output / f"{figure.name}.{fmt}", writer(data)))
    if report:
        figures = [(f.name, f.title, f.images.get("svg"), f.images.get("png")) for f in drawn]
        page = html_report(figures=figures, notes=notes, sections=sections)
        files.append((output / "report.html", writer(page.encode("utf-8"))))
    make_directories(output)
    write_file_set(files, what="plots")
    return PlotResult(files=tuple(path for path, _ in files), notes=tuple(notes))
