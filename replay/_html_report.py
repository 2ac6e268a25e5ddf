"""One self-contained HTML page: the figures of :func:`replay.plot` (SVG inline, or PNG as a
``data:`` URI when no SVG was drawn), what could not be drawn, the runs' comparison table and
each sweep's table. No script, no external file, no date: the same figures give the same
page."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence

import attrs

from ._compare import Comparison
from ._plot_data import SweepData

__all__ = ("Section", "html_report")

_STYLE = """\
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:90%}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
figure{margin:1.5em 0}figure svg,figure img{max-width:100%;height:auto}
.note{color:#9a6700}
"""


@attrs.frozen
class Section:
    """A table of the report: a comparison of runs or a sweep's runs.

    Attributes:
        title: the section heading.
        table: the runs' comparison.
        sweep: the sweep.
    """

    title: str
    table: Comparison | None = None
    sweep: SweepData | None = None


def _inline_svg(svg: bytes) -> str:
    text = svg.decode("utf-8")
    # drop the XML declaration and DOCTYPE: the <svg> element goes straight into the page
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def _comparison_html(table: Comparison) -> str:
    head = "<tr><th>metric</th>" + "".join(
        f"<th>{html.escape(label)}</th>" for label in table.labels
    )
    head += "".join(
        f"<th>{html.escape(label)} vs {html.escape(table.labels[0])}</th>"
        for label in table.labels[1:]
    )
    rows = [head + "</tr>"]
    for row in table.rows:
        cells = [f"<td>{html.escape(row.label)}</td>"]
        cells += [f"<td>{_num(v)}</td>" for v in row.values]
        for d, p in zip(row.diffs()[1:], row.diff_pcts()[1:], strict=True):
            text = "-" if d is None else f"{d:+.2f}" + ("" if p is None else f" ({p:+.1f}%)")
            cells.append(f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    runs = "".join(
        f"<li>{html.escape(label)}: <code>{html.escape(str(path))}</code></li>"
        for label, path in zip(table.labels, table.paths, strict=True)
    )
    return f"<ul>{runs}</ul><table>{''.join(rows)}</table>"


def _sweep_html(sweep: SweepData) -> str:
    metrics = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "request_throughput")
    head = (
        "<tr><th>run</th><th>status</th>"
        + "".join(f"<th>{html.escape(k)}</th>" for k in sweep.swept)
        + "".join(f"<th>{m}</th>" for m in metrics)
        + "</tr>"
    )
    rows = [head]
    for run in sweep.runs:
        params = run["params"]
        found = run.get("metrics") or {}
        cells = [str(run.get("run_id", "")), str(run["status"])]
        cells += [str(params.get(k, "")) for k in sweep.swept]
        cells += [_num(found.get(m)) for m in metrics]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table>{''.join(rows)}</table>"


def _num(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.2f}"


def html_report(
    *,
    figures: Sequence[tuple[str, str, bytes | None, bytes | None]],
    notes: Sequence[str],
    sections: Sequence[Section],
    title: str = "simclock report",
) -> str:
    """The page's text.

    Args:
        figures: ``(name, title, svg bytes, png bytes)`` per figure, in page order.
        notes: what could not be drawn.
        sections: the tables.
        title: the page title.
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.table is not None:
            parts.append(_comparison_html(section.table))
        if section.sweep is not None:
            parts.append(_sweep_html(section.sweep))
    if notes:
        parts.append("<h2>Not drawn</h2><ul>")
        parts += [f'<li class="note">{html.escape(n)}</li>' for n in notes]
        parts.append("</ul>")
    parts.append("<h2>Figures</h2>")
    for name, caption, svg, png in figures:
        anchor = re.sub(r"[^A-Za-z0-9_-]", "_", name)
        parts.append(f'<figure id="{anchor}">')
        if svg is not None:
            parts.append(_inline_svg(svg))
        elif png is not None:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">')
        parts.append(f"<figcaption>{html.escape(caption)} ({html.escape(name)})</figcaption>")
        parts.append("</figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
