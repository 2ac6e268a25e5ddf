"""``simclock inspect``: a workload's statistics without simulating it.

The numbers are :func:`loadgen.workload_stats` (REFERENCE-workloads §7), computed on the
nominal schedule (every request completes the instant it is released); this module only
reads the trace and lays the numbers out as text or JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadgen import Workload, WorkloadStats, read_trace, workload_stats

__all__ = ("format_workload_stats", "inspect_trace", "workload_stats_json")


def inspect_trace(
    path: str | Path, *, format: str = "auto", source: str | None = None
) -> tuple[Workload, WorkloadStats]:
    """Read a trace and compute its statistics.

    Args:
        path: the trace file (or directory / archive, for formats that take one).
        format: the reader's format name, or ``"auto"``.
        source: the source label for request ids (the reader's default when ``None``).

    Returns:
        The workload and its :class:`loadgen.WorkloadStats`.

    Raises:
        loadgen.TraceFormatError: a record is malformed (``file:line: field: problem``).
    """
    workload = read_trace(path, format=format, source=source)
    return workload, workload_stats(workload)


def _int(value: float) -> str:
    return f"{round(value):,}"


def _num(value: float) -> str:
    """Thousands separators; one decimal, dropped when it is zero."""
    text = f"{value:,.1f}"
    return text[:-2] if text.endswith(".0") else text


def _duration(ms: float) -> str:
    seconds = ms / 1000.0
    if seconds < 120:
        return f"{seconds:.3f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def format_workload_stats(stats: WorkloadStats, *, title: str) -> str:
    """Lay out ``stats`` as aligned text, one statistic per line.

    Args:
        stats: the statistics.
        title: the first line, e.g. the file name and its format.

    Returns:
        The text, ending with a newline.
    """
    rows: list[tuple[str, str]] = [
        ("requests", _int(stats.requests)),
        ("sessions", _int(stats.sessions)),
        ("conversations", _int(stats.conversations)),
    ]
    if stats.plays:
        rows.append(("plays", _int(stats.plays)))
    if stats.subagents:
        rows.append(
            (
                "subagent groups",
                f"{_int(stats.subagents)} ({stats.subagents_relative} relative, "
                f"{stats.subagents_absolute} absolute, {stats.async_launched} async launched)",
            )
        )
    rows += [
        ("span", f"{stats.span_ms:,.1f} ms ({_duration(stats.span_ms)})"),
        ("rate", f"{stats.rate_per_s:.2f} req/s"),
        ("inter-arrival CV", f"{stats.inter_arrival_cv:.2f}"),
    ]
    for name, lengths in (("input tokens", stats.input), ("output tokens", stats.output)):
        rows.append(
            (
                name,
                f"p50 {_num(lengths.p50)}  p90 {_num(lengths.p90)}  p99 {_num(lengths.p99)}  "
                f"mean {lengths.mean:,.1f}  max {lengths.max:,}",
            )
        )
    rows.append(
        (
            "prefix hit ratio",
            f"{stats.prefix_hit_ratio * 100:.2f} % of prompt tokens (unbounded cache)",
        )
    )
    rows.append(
        ("requests with a hit", f"{stats.requests_with_hit * 100:.2f} % (at least one block)")
    )
    tolerated = stats.tolerated
    counts = [
        ("surplus ids", tolerated.surplus_ids),
        ("private tail ids", tolerated.private_tail_ids),
        ("ignored timestamps", tolerated.ignored_timestamps),
        ("dropped failures", tolerated.dropped_failures),
        ("filtered rows", tolerated.filtered_rows),
    ]
    shown = [f"{n:,} {label}" for label, n in counts if n]
    rows.append(("tolerated", ", ".join(shown) if shown else "nothing"))
    width = max(len(name) for name, _ in rows)
    lines = [title] + [f"  {name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines) + "\n"


def workload_stats_json(stats: WorkloadStats, *, extra: dict[str, Any] | None = None) -> str:
    """Return ``stats`` as one JSON object (keys sorted, two-space indent, final newline).

    Args:
        stats: the statistics.
        extra: more top-level keys (e.g. ``path`` and ``format``).

    Returns:
        The JSON text.
    """
    data: dict[str, Any] = dict(stats.to_dict())
    if extra:
        data.update(extra)
    return json.dumps(data, sort_keys=True, indent=2) + "\n"
