"""The handoff figure of a disaggregated run: one SVG row per request, its phases coloured."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ._report import ReplayResult, RequestRecord

__all__ = ("handoff_timeline_svg",)

# --------------------------------------------------------------------------------------------
# the figure

_PHASE_COLOURS: tuple[tuple[str, str], ...] = (
    ("prefill queueing", "#d9d9d9"),
    ("prefill compute", "#4e79a7"),
    ("reservation wait", "#f28e2b"),
    ("KV transfer", "#e15759"),
    ("decode queueing", "#bab0ac"),
    ("decode", "#59a14f"),
)


def _fmt(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def handoff_timeline_svg(
    records: ReplayResult | Iterable[RequestRecord],
    *,
    width_px: int = 720,
    row_px: int = 22,
    title: str = "P/D handoff timeline",
) -> str:
    """Draw each request's P/D phases as one row of a timeline; return SVG text.

    One row per request with a handoff (in record order), labelled ``id P<prefill> →
    D<decode>``; coloured segments for prefill queueing, prefill compute, reservation wait,
    KV transfer, decode queueing and decode (decode admission to last token), on a shared
    time axis in virtual milliseconds. Standard library only; the output depends on the
    records alone, so it is byte-for-byte reproducible.
    """
    items = records.requests if isinstance(records, ReplayResult) else records
    rows: list[tuple[str, list[tuple[int, float, float]]]] = []
    for record in items:
        h = record.handoff
        if h is None or record.engine_arrival_ms is None:
            continue
        marks = [
            record.engine_arrival_ms,
            h.prefill_admit_ms,
            h.prefill_done_ms,
            None
            if h.destination_reserved_ms is None or h.prefill_done_ms is None
            else max(h.prefill_done_ms, h.destination_reserved_ms),
            h.transfer_done_ms,
            h.decode_admit_ms,
            record.last_token_ms,
        ]
        segments: list[tuple[int, float, float]] = []
        for phase in range(len(_PHASE_COLOURS)):
            start, end = marks[phase], marks[phase + 1]
            if start is None or end is None:
                break
            segments.append((phase, start, end))
        label = f"{record.request_id} P{h.prefill_worker} \u2192 D{h.decode_worker}"
        rows.append((label, segments))
    left, right, top = 150, 20, 40
    plot_w = width_px - left - right
    end_ms = max((s[2] for _, segs in rows for s in segs), default=1.0) or 1.0
    scale = plot_w / end_ms
    axis_y = top + row_px * len(rows) + 6
    height = axis_y + 86
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width_px}" height="{height}" viewBox="0 0 {width_px} {height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width_px}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="22" font-size="14" font-weight="bold">{_escape(title)}</text>',
    ]
    for i, (label, segments) in enumerate(rows):
        y = top + row_px * i
        out.append(
            f'<text x="{left - 8}" y="{y + row_px * 0.65:.1f}" text-anchor="end">'
            f"{_escape(label)}</text>"
        )
        for phase, start, end in segments:
            name, colour = _PHASE_COLOURS[phase]
            x = left + start * scale
            w = max((end - start) * scale, 0.0)
            out.append(
                f'<rect x="{_fmt(x)}" y="{y + 3}" width="{_fmt(w)}" height="{row_px - 6}" '
                f'fill="{colour}"><title>{_escape(name)}: {_fmt(start)}\u2013{_fmt(end)} ms'
                "</title></rect>"
            )
    out.append(
        f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="#000000"/>'
    )
    step = _tick_step(end_ms)
    tick = 0.0
    while tick <= end_ms + 1e-9:
        x = left + tick * scale
        out.append(
            f'<line x1="{_fmt(x)}" y1="{axis_y}" x2="{_fmt(x)}" y2="{axis_y + 4}" '
            'stroke="#000000"/>'
        )
        out.append(
            f'<text x="{_fmt(x)}" y="{axis_y + 16}" text-anchor="middle">{_fmt(tick)}</text>'
        )
        tick += step
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{axis_y + 32}" text-anchor="middle">'
        "virtual time (ms)</text>"
    )
    for i, (name, colour) in enumerate(_PHASE_COLOURS):
        x = left + 160 * (i % 3)
        legend_y = axis_y + 44 + 18 * (i // 3)
        out.append(f'<rect x="{x}" y="{legend_y}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14}" y="{legend_y + 9}">{_escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _tick_step(end_ms: float) -> float:
    raw = end_ms / 8
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return float(factor * magnitude)
    return float(10 * magnitude)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
