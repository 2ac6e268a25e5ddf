"""Several runs side by side: the figures of their ``summary.json`` in the console table's
rows, with each run's difference from the first (absolute and in %).

The rows follow the summary's metric table (:mod:`replay._metric_table`): every figure the
console table shows, the mean, median and P99 of every distribution it shows, then prefix
reuse, preemptions and the engines' mean utilisation. :func:`compare` reads the directories;
:meth:`Comparison.format` prints it as text (the console table's layout), CSV or JSON.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from ._metric_table import DISTRIBUTIONS, SCALARS
from ._plot_data import RunDataError, read_json, run_labels

__all__ = ("COMPARE_FORMATS", "CompareRow", "Comparison", "compare")

CompareFormat = Literal["text", "csv", "json"]
COMPARE_FORMATS: tuple[CompareFormat, ...] = ("text", "csv", "json")
"""The formats :meth:`Comparison.format` writes."""


@attrs.frozen
class CompareRow:
    """One figure of every run.

    Attributes:
        key: where it is in ``summary.json`` (``metrics.request_throughput``,
            ``distributions.ttft_ms.p99``, ...).
        label: the console table's label.
        values: the figure of each run, None where a run has none.
    """

    key: str
    label: str
    values: tuple[float | int | None, ...]

    def diffs(self) -> tuple[float | int | None, ...]:
        """Each run's difference from the first (None for the first, or without both)."""
        base = self.values[0]
        rest = [None if base is None or v is None else v - base for v in self.values[1:]]
        return (None, *rest)

    def diff_pcts(self) -> tuple[float | None, ...]:
        """Each run's difference from the first in % of the first (None where it is 0)."""
        base = self.values[0]
        rest = [
            None if base is None or v is None or base == 0 else 100.0 * (v - base) / abs(base)
            for v in self.values[1:]
        ]
        return (None, *rest)


@attrs.frozen
class Comparison:
    """The figures of several runs, the first being the baseline.

    Attributes:
        paths: the runs' output directories, as given.
        labels: the runs' labels (their policies, else their directory names).
        policies: the runs' policy names.
        rows: the figures, in the console table's order.
    """

    paths: tuple[Path, ...]
    labels: tuple[str, ...]
    policies: tuple[str, ...]
    rows: tuple[CompareRow, ...]

    def format(self, kind: CompareFormat = "text") -> str:
        """The comparison as ``text``, ``csv`` or ``json``; the same runs give the same text."""
        if kind == "csv":
            return self._csv()
        if kind == "json":
            return self._json()
        return self._text()

    def _text(self) -> str:
        columns = [self.labels[0]]
        for label in self.labels[1:]:
            columns += [label, "diff", "diff %"]
        widths = [max(12, len(c)) for c in columns]
        label_width = max(40, *(len(r.label) + 2 for r in self.rows))
        total = label_width + sum(w + 2 for w in widths)
        lines = [" Comparison ".center(total, "=")]
        for i, path in enumerate(self.paths):
            lines.append(f"{'Run ' + str(i + 1) + ':':<{label_width}} {self.labels[i]} ({path})")
        lines.append("-" * total)
        lines.append(
            " " * label_width + "".join(f"  {c:>{w}}" for c, w in zip(columns, widths, strict=True))
        )
        for row in self.rows:
            cells = [_num(row.values[0])]
            for v, d, p in zip(row.values[1:], row.diffs()[1:], row.diff_pcts()[1:], strict=True):
                cells += [_num(v), _signed(d), _pct(p)]
            lines.append(
                f"{row.label + ':':<{label_width}}"
                + "".join(f"  {c:>{w}}" for c, w in zip(cells, widths, strict=True))
            )
        lines.append("=" * total)
        return "\n".join(lines) + "\n"

    def _csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        header = ["metric", "key", self.labels[0]]
        for label in self.labels[1:]:
            header += [label, f"{label} diff", f"{label} diff %"]
        writer.writerow(header)
        for row in self.rows:
            cells: list[object] = [row.label, row.key, _raw(row.values[0])]
            for v, d, p in zip(row.values[1:], row.diffs()[1:], row.diff_pcts()[1:], strict=True):
                cells += [_raw(v), _raw(d), _raw(p)]
            writer.writerow(cells)
        return out.getvalue()

    def _json(self) -> str:
        table = {
            "schema": "simclock.compare",
            "schema_version": 1,
            "runs": [
                {"label": label, "path": str(path), "policy": policy}
                for label, path, policy in zip(self.labels, self.paths, self.policies, strict=True)
            ],
            "rows": [
                {
                    "key": row.key,
                    "label": row.label,
                    "values": list(row.values),
                    "diffs": list(row.diffs()),
                    "diff_pcts": list(row.diff_pcts()),
                }
                for row in self.rows
            ],
        }
        return json.dumps(table, indent=2) + "\n"


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.2f}"


def _signed(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:+d}"
    return f"{value:+.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _raw(value: float | int | None) -> object:
    return "" if value is None else value


def _figure(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str, float | int | None]]:
    """``(key, label, value)`` of every compared figure of one ``summary.json``."""
    metrics = summary.get("metrics") or {}
    distributions = summary.get("distributions") or {}
    rows: list[tuple[str, str, float | int | None]] = [
        (
            "status_counts.completed",
            "Completed",
            _figure((summary.get("status_counts") or {}).get("completed")),
        )
    ]
    for figure in SCALARS:
        if figure.label is not None:
            rows.append((f"metrics.{figure.name}", figure.label, _figure(metrics.get(figure.name))))
        elif figure.name == "request_goodput":
            rows.append(
                (
                    "metrics.request_goodput",
                    "Request goodput (req/s)",
                    _figure(metrics.get(figure.name)),
                )
            )
    reuse = (summary.get("prefix_reuse") or {}).get("prefix_reuse_ratio")
    ratio = _figure(reuse)
    rows.append(
        (
            "prefix_reuse.prefix_reuse_ratio",
            "Prefix reuse (% of input tokens)",
            None if ratio is None else 100.0 * ratio,
        )
    )
    rows.append(("preemptions", "Preemptions", _figure(summary.get("preemptions"))))
    for metric in DISTRIBUTIONS:
        if metric.heading is None:
            continue
        d = distributions.get(metric.name) or {}
        for stat, name in (("mean", "Mean"), ("p50", "Median"), ("p99", "P99")):
            rows.append(
                (
                    f"distributions.{metric.name}.{stat}",
                    f"{name} {metric.label} (ms)",
                    _figure(d.get(stat)),
                )
            )
    engines = summary.get("engines") or []
    shares = [_figure(e.get("utilisation")) for e in engines if isinstance(e, dict)]
    known = [s for s in shares if s is not None]
    rows.append(
        (
            "engines.utilisation.mean",
            "Mean engine utilisation (%)",
            100.0 * sum(known) / len(known) if known else None,
        )
    )
    return rows


def compare(directories: Sequence[str | Path]) -> Comparison:
    """Read the ``summary.json`` (and ``config.json``) of each run and line them up.

    Args:
        directories: the runs' output directories; the first is the baseline.

    Returns:
        The :class:`Comparison`.

    Raises:
        RunDataError: no directory, or a summary missing or malformed (names the file).
    """
    if not directories:
        raise RunDataError("compare: give at least one output directory")
    paths = tuple(Path(d) for d in directories)
    tables: list[list[tuple[str, str, float | int | None]]] = []
    policies: list[str] = []
    for path in paths:
        summary = read_json(path / "summary.json")
        if summary.get("schema") != "simclock.replay.summary":
            raise RunDataError(f"{path / 'summary.json'}:1: schema: not a simclock replay summary")
        config_file = path / "config.json"
        config = read_json(config_file) if config_file.exists() else {}
        policy = config.get("policy")
        policies.append(policy if isinstance(policy, str) else "?")
        tables.append(summary_rows(summary))
    rows = tuple(
        CompareRow(key, label, tuple(table[i][2] for table in tables))
        for i, (key, label, _) in enumerate(tables[0])
    )
    return Comparison(
        paths=paths,
        labels=tuple(run_labels(paths, policies)),
        policies=tuple(policies),
        rows=rows,
    )
