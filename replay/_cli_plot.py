"""Command-line pieces for pictures and comparisons: ``simclock plot``, ``simclock compare``,
and ``--series``/``--plots`` of ``simclock replay``.

The ``simclock`` parser (``replay._cli``) registers them:

- :func:`add_plot_parser` adds ``plot OUT_DIR [OUT_DIR ...]``;
- :func:`add_compare_parser` adds ``compare OUT_DIR [OUT_DIR ...]``;
- :func:`add_series_flags` adds ``--series`` and ``--plots`` to ``replay``;
  :func:`series_from_args` makes the recorder they ask for (checking, before the run, that
  matplotlib is there for ``--plots``) and :func:`write_series_and_plots` writes
  ``engines.csv`` and the figures after the report files.

Exit status of ``plot`` and ``compare``: 0 written (printed); 2 bad input (a directory that is
not a run's or a sweep's output, a malformed file, matplotlib missing), one line on standard
error, no file written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from ._compare import COMPARE_FORMATS, compare
from ._files import OutputError
from ._plot import DEFAULT_SWEEP_METRICS, PLOT_FORMATS, PlotExtraMissing, plot, require_matplotlib
from ._plot_data import RunDataError
from ._series import SERIES_FILE, SeriesRecorder

__all__ = (
    "PLOTS_DIR",
    "add_compare_parser",
    "add_plot_parser",
    "add_series_flags",
    "run_compare",
    "run_plot",
    "series_from_args",
    "write_series_and_plots",
)

PLOTS_DIR = "plots"
"""Where ``--plots`` (and ``simclock plot`` of one directory) put the figures."""

_EXIT_USAGE = 2


def add_plot_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``plot OUT_DIR [OUT_DIR ...] [--output DIR] [--format FMT] [--metric NAME]``."""
    parser = subparsers.add_parser(
        "plot",
        help="draw figures (CDFs, over-time, per-engine, sweeps) and an HTML report of runs",
        description=(
            "Draw PNG and SVG figures of replay output directories: TTFT, TPOT and E2E CDFs "
            "(one line per run), throughput and requests over virtual time, per-engine queue "
            "depth, batch size, KV usage and utilisation (runs replayed with --series or "
            "--plots), and for a sweep directory (sweep.json) each metric against the swept "
            "key, one line per policy; plus report.html, one page with every figure and the "
            "comparison table. Needs matplotlib: pip install 'simclock[plot]'."
        ),
    )
    parser.add_argument("dirs", nargs="+", metavar="OUT_DIR", help="a run's or sweep's outputs")
    parser.add_argument(
        "--output",
        metavar="DIR",
        type=Path,
        help=f"where to write the figures (default: OUT_DIR/{PLOTS_DIR} for one OUT_DIR; "
        "required for several)",
    )
    parser.add_argument(
        "--format",
        action="append",
        choices=PLOT_FORMATS,
        dest="formats",
        help="an image format (repeat for both; default: png and svg)",
    )
    parser.add_argument(
        "--metric",
        action="append",
        dest="metrics",
        metavar="NAME",
        help="a summary.json metric to draw for sweeps (repeat; default: "
        + ", ".join(DEFAULT_SWEEP_METRICS)
        + ")",
    )
    parser.add_argument("--no-report", action="store_true", help="do not write report.html")
    parser.set_defaults(handler=run_plot, parser=parser)
    return parser


def add_compare_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``compare OUT_DIR [OUT_DIR ...] [--format text|csv|json]``."""
    parser = subparsers.add_parser(
        "compare",
        help="print runs' summaries side by side, with differences from the first",
        description=(
            "Print the summary figures of several replay output directories side by side, "
            "each with its difference from the first run (absolute and in %%)."
        ),
    )
    parser.add_argument("dirs", nargs="+", metavar="OUT_DIR", help="a run's output directory")
    parser.add_argument(
        "--format",
        choices=COMPARE_FORMATS,
        default="text",
        help="text (the console table's layout; default), csv or json",
    )
    parser.set_defaults(handler=run_compare, parser=parser)
    return parser


def run_plot(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``simclock plot``: draw, list the files written and the notes; 2 on bad input."""
    out = sys.stdout if stdout is None else stdout
    output: Path | None = args.output
    if output is None:
        if len(args.dirs) > 1:
            args.parser.error("give --output DIR to plot several directories")
        output = Path(args.dirs[0]) / PLOTS_DIR
    try:
        result = plot(
            args.dirs,
            output,
            formats=args.formats or PLOT_FORMATS,
            metrics=args.metrics or DEFAULT_SWEEP_METRICS,
            report=not args.no_report,
        )
    except (PlotExtraMissing, RunDataError, OutputError) as exc:
        print(f"simclock plot: error: {_one_line(exc)}", file=sys.stderr)
        return _EXIT_USAGE
    out.write(f"wrote {len(result.files)} files to {output}\n")
    for note in result.notes:
        out.write(f"note: {note}\n")
    return 0


def run_compare(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``simclock compare``: print the table; 2 on bad input."""
    out = sys.stdout if stdout is None else stdout
    try:
        table = compare(args.dirs)
    except RunDataError as exc:
        print(f"simclock compare: error: {_one_line(exc)}", file=sys.stderr)
        return _EXIT_USAGE
    out.write(table.format(args.format))
    return 0


def add_series_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--series`` and ``--plots`` to the ``replay`` subcommand's parser."""
    group = parser.add_argument_group("time series and figures (need --output-dir)")
    group.add_argument(
        "--series",
        action="store_true",
        help=f"record per-engine queue depth, batch size, KV usage and utilisation over "
        f"virtual time into {SERIES_FILE}",
    )
    group.add_argument(
        "--plots",
        action="store_true",
        help=f"also draw the run's figures and report.html into OUTPUT_DIR/{PLOTS_DIR} "
        "(implies --series; needs matplotlib: pip install 'simclock[plot]')",
    )


def series_from_args(args: argparse.Namespace, *, output_dir: str | None) -> SeriesRecorder | None:
    """The recorder ``--series``/``--plots`` ask for (None without them); checked before the
    run: the flags need an output directory, and ``--plots`` needs matplotlib.

    Raises:
        PlotExtraMissing: ``--plots`` without matplotlib.
    """
    plots = getattr(args, "plots", False)
    if not (plots or getattr(args, "series", False)):
        return None
    if output_dir is None:
        args.parser.error(f"{'--plots' if plots else '--series'} needs --output-dir")
    if plots:
        require_matplotlib()
    return SeriesRecorder()


def write_series_and_plots(
    recorder: SeriesRecorder, output_dir: str, *, end_ns: int, plots: bool
) -> None:
    """Write ``engines.csv`` into ``output_dir`` and, with ``plots``, the figures into
    ``output_dir/plots``."""
    recorder.write(output_dir, end_ns=end_ns)
    if plots:
        plot([output_dir], Path(output_dir) / PLOTS_DIR)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n"))
