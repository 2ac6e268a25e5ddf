"""``simclock sweep SWEEP.toml``: run a sweep file and write its table.

Exit status: 0 every run ok; 1 a run failed (the sweep went on; the table marks it); 2 bad
input (the sweep file, an option, Ray missing), one line on stderr, nothing written; 130
interrupted, the table holding the runs finished so far.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from simclock import SimulationError

from ._config import ConfigError
from ._executors import Executor, LocalExecutor, RayExecutor
from ._files import OutputError
from ._plot import PlotExtraMissing, plot_sweep, require_matplotlib
from ._sweep import SWEEP_CSV, SWEEP_JSON, sweep
from ._sweep_spec import load_sweep, locate_error

__all__ = ("add_sweep_parser", "after_sweep", "run_sweep")

_EXIT_OK = 0
_EXIT_FAILED = 1
_EXIT_USAGE = 2
_EXIT_INTERRUPTED = 130

PLOTS_DIR = "plots"
"""Where ``--plots`` draws a sweep's figures, inside its output directory."""

_DESCRIPTION = """\
Run a sweep: every combination of the values of a grid of configuration keys, times the seeds,
each a replay of the base configuration with those values set. Each run's report goes to
OUT/runs/<run_id>/, and one table of every run's metrics to OUT/sweep.json and OUT/sweep.csv.
Runs finished by an earlier sweep into the same directory are not run again.
"""

_EPILOG = """\
sweep file (TOML):
  output_dir = "sweeps/policies"   # optional; --output-dir wins
  seeds = [0, 1, 2]                # optional; the last axis
  [base]                           # a run configuration, as simclock replay --config reads
  workers = 4
  [grid]                           # each list is an axis, in the order written
  policy = ["round_robin", "kv_aware"]
  workload.speedup = [1, 2]        # a key inside a table

exit status: 0 every run ok; 1 a run failed (the table marks it); 2 bad input; 130
  interrupted (the table holds the runs finished so far). Reference: docs/reference/sweep.md.
"""


def add_sweep_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``sweep SWEEP.toml`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid of replays (local processes or Ray) and write a table of their metrics",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep_file", metavar="SWEEP.toml", help="the sweep file")
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        help="where runs/, sweep.json and sweep.csv go (default: the file's output_dir)",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where runs execute: local processes (default), or Ray (pip install 'simclock[ray]')",
    )
    parser.add_argument(
        "--jobs",
        type=_positive_int,
        default=1,
        metavar="N",
        help="local executor: runs at once in worker processes (default: 1, in this process)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="ray executor: the cluster to connect to (auto, ray://HOST:10001, HOST:6379); "
        "default: start a local Ray instance",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print a line per finished run")
    parser.add_argument(
        "--plots",
        action="store_true",
        help=f"also draw the sweep's figures and report.html into DIR/{PLOTS_DIR} "
        "(needs matplotlib: pip install 'simclock[plot]')",
    )
    parser.set_defaults(handler=run_sweep, parser=parser)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _executor(args: argparse.Namespace) -> Executor:
    if args.executor == "ray":
        if args.jobs != 1:
            raise ConfigError("--jobs: only used with --executor local")
        return RayExecutor(address=args.ray_address)
    if args.ray_address is not None:
        raise ConfigError("--ray-address: only used with --executor ray")
    return LocalExecutor(jobs=args.jobs)


def after_sweep(output_dir: Path, args: argparse.Namespace, err: TextIO) -> None:
    """Once the table of a sweep is written: with ``--plots``, draw its figures (a metric
    against the swept key, one line per policy) and ``report.html`` into ``DIR/plots``."""
    if getattr(args, "plots", False):
        drawn = plot_sweep(output_dir, output_dir / PLOTS_DIR)
        if not args.quiet:
            print(f"wrote {len(drawn.files)} files to {output_dir / PLOTS_DIR}", file=err)
            for note in drawn.notes:
                print(f"note: {note}", file=err)


def run_sweep(args: argparse.Namespace, *, stderr: TextIO | None = None) -> int:
    """The ``sweep`` subcommand; return its exit status."""
    err = sys.stderr if stderr is None else stderr
    try:
        if getattr(args, "plots", False):
            require_matplotlib()  # before any run: a missing extra must not cost a sweep
        executor = _executor(args)
        spec, file_output_dir = load_sweep(args.sweep_file)
        output_dir = args.output_dir if args.output_dir is not None else file_output_dir
        if output_dir is None:
            raise ConfigError(f"{args.sweep_file}: output_dir: not set (or give --output-dir)")
        try:
            result = sweep(
                spec,
                output_dir=output_dir,
                executor=executor,
                progress=None if args.quiet else err,
            )
        except ConfigError as exc:
            raise locate_error(exc, args.sweep_file) from None
    except KeyboardInterrupt:
        print("simclock sweep: interrupted; the table holds the runs finished so far", file=err)
        return _EXIT_INTERRUPTED
    except (SimulationError, OutputError) as exc:
        if not isinstance(exc, ValueError | OutputError | PlotExtraMissing):
            raise
        # bad input (a ValueError leaf), an unusable output directory (OutputError)
        print(f"simclock sweep: error: {' '.join(str(exc).split())}", file=err)
        return _EXIT_USAGE
    after_sweep(result.output_dir, args, err)
    if not args.quiet:
        failed = len(result.failed)
        where = f"{result.output_dir / SWEEP_JSON}, {result.output_dir / SWEEP_CSV}"
        summary = f"{len(result.rows)} runs ({result.ran} run now), {failed} failed: {where}"
        print(f"simclock sweep: {summary}", file=err)
    return _EXIT_FAILED if result.failed else _EXIT_OK
