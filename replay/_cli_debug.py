"""Command-line pieces for debugging: ``simclock inspect``, ``--timeline``, logging, progress.

The ``simclock`` parser (``replay._cli``) registers them:

- :func:`add_inspect_parser` adds the ``inspect TRACE`` subcommand;
- :func:`add_debug_flags` adds ``--timeline PATH`` (with ``--timeline-start-s``,
  ``--timeline-end-s``, ``--timeline-request``), ``--progress``, ``--log-format`` and
  ``--log-level`` to the ``replay`` subcommand;
- :func:`configure_from_args` configures logging from the parsed flags;
- :func:`run_observed` replays with the timeline recorder and the progress line the flags
  ask for, and writes the timeline.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import attrs

from engines import Journal
from loadgen import TraceFormatError, Workload
from simclock import configure_logging, get_logger

from ._cli_datasets import resolve_trace
from ._exceptions import ReplayFailedError
from ._files import make_directories
from ._inspect import format_workload_stats, inspect_trace, workload_stats_json
from ._progress import Progress, ProgressMode, make_progress
from ._report import ReplayResult
from ._run import run
from ._session import ReplaySession
from ._timeline import Timeline, TimelineFilter

__all__ = (
    "DebugOptions",
    "add_debug_flags",
    "add_inspect_parser",
    "add_logging_flags",
    "configure_from_args",
    "debug_options_from_args",
    "run_inspect",
    "run_observed",
    "write_timeline",
)

_POLL_EVERY = 1024  # callbacks between two looks at the wall clock

log = get_logger(__name__)


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-format {auto,console,json}`` and ``--log-level LEVEL`` to ``parser``."""
    group = parser.add_argument_group("logging")
    group.add_argument(
        "--log-format",
        choices=("auto", "console", "json"),
        default="auto",
        help="log rendering on standard error: console on a terminal, JSON lines otherwise "
        "(default: auto)",
    )
    group.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error", "critical"),
        default="warning",
        help="the lowest level logged (default: warning)",
    )


def add_debug_flags(parser: argparse.ArgumentParser) -> None:
    """Add the timeline, progress and logging flags to the ``replay`` subcommand's parser."""
    group = parser.add_argument_group("timeline and progress")
    group.add_argument(
        "--timeline",
        metavar="PATH",
        type=Path,
        help="write a Chrome trace-event / Perfetto timeline of the run to PATH",
    )
    group.add_argument(
        "--timeline-start-s",
        metavar="SECONDS",
        type=_seconds,
        help="leave out of the timeline what ends before this virtual time",
    )
    group.add_argument(
        "--timeline-end-s",
        metavar="SECONDS",
        type=_seconds,
        help="leave out of the timeline what starts after this virtual time",
    )
    group.add_argument(
        "--timeline-request",
        metavar="ID",
        action="append",
        help="show only this request in the timeline (repeat for more)",
    )
    group.add_argument(
        "--progress",
        choices=("auto", "plain", "none"),
        default="auto",
        help="progress on standard error: auto shows it on a terminal only (default: auto)",
    )
    add_logging_flags(parser)


def configure_from_args(args: argparse.Namespace, *, stream: TextIO | None = None) -> None:
    """Configure logging from ``--log-format`` and ``--log-level`` (when present)."""
    log_format = getattr(args, "log_format", None)
    log_level = getattr(args, "log_level", None)
    if log_format is None and log_level is None:
        return
    configure_logging(format=log_format or "auto", level=log_level or "warning", stream=stream)


def _seconds(text: str) -> float:
    """argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _ns(value: float | None) -> int | None:
    return None if value is None else round(value * 1_000_000_000)


@attrs.frozen
class DebugOptions:
    """What the debugging flags ask of a replay.

    Attributes:
        timeline_path: where to write the timeline, or ``None`` for none.
        timeline_filter: the timeline's window and requests.
        progress: the progress mode (``auto``, ``plain`` or ``none``).
    """

    timeline_path: Path | None = None
    timeline_filter: TimelineFilter = attrs.field(factory=TimelineFilter)
    progress: ProgressMode = "none"


def debug_options_from_args(
    args: argparse.Namespace, *, parser: argparse.ArgumentParser | None = None
) -> DebugOptions:
    """Collect the debugging flags of a parsed ``replay`` command line.

    Args:
        args: the parsed command line.
        parser: reports an empty timeline window as a usage error (``parser.error``).

    Raises:
        ValueError: the timeline window ends before it starts (without ``parser``).
    """
    start = _ns(getattr(args, "timeline_start_s", None))
    end = _ns(getattr(args, "timeline_end_s", None))
    requests = getattr(args, "timeline_request", None)
    try:
        window = TimelineFilter(start_ns=start, end_ns=end, request_ids=requests or None)
    except ValueError as error:
        if parser is None:
            raise
        parser.error(str(error))
    return DebugOptions(
        timeline_path=getattr(args, "timeline", None),
        timeline_filter=window,
        progress=getattr(args, "progress", "none"),
    )


def _counts(journal: Journal) -> tuple[int, int]:
    # traces a streaming run already dropped were all of settled requests
    done = sum(journal.forgotten.values())
    completed = journal.forgotten.get("completed", 0)
    for trace in journal.traces.values():
        status = trace.terminal_status
        if status is not None:
            done += 1
            if status == "completed":
                completed += 1
    return done, completed


def run_observed(
    workload: Workload,
    *,
    options: DebugOptions,
    progress_stream: TextIO | None = None,
    timeline_sink: Callable[[Timeline], None] | None = None,
    **run_options: Any,
) -> ReplayResult:
    """Replay like :func:`replay.run`, with the timeline and progress ``options`` ask for.

    Without a timeline or progress this is :func:`replay.run`. Progress looks at the wall
    clock every thousand loop callbacks and, when a line is due, counts the ended requests in
    the journal's traces; it does not watch the journal, so the engines keep their fast path.
    A timeline needs every lifecycle event, so the engines also record their per-token
    events. Neither changes the run: the report is the same, byte for byte (its event counts
    do not depend on observation). The timeline is written (atomically) after the run, even
    when the run fails with its report (:class:`replay.ReplayFailedError`); an interrupted run
    writes none.

    Args:
        workload: the requests to replay.
        options: the timeline and progress wanted.
        progress_stream: where progress goes (standard error by default).
        timeline_sink: receives the timeline instead of it being written to
            ``options.timeline_path`` (the command line writes it after the report).
        **run_options: the keyword arguments of :func:`replay.run` (``topology``,
            ``policy``, ``seed``, ``slo``, ...).

    Returns:
        The :class:`replay.ReplayResult`.
    """
    progress = make_progress(
        options.progress,
        stream=progress_stream,
        total_requests=len(workload.requests),
    )
    if progress is None and options.timeline_path is None:
        return run(workload, **run_options)
    # the session records the timeline (every engine's views, engines added later too, and
    # the engine count of a changing cluster)
    recording = options.timeline_path is not None
    session = ReplaySession.build(
        workload,
        history=False,
        timeline=options.timeline_filter if recording else False,
        **run_options,
    )
    stopped: BaseException | None = None
    try:
        if progress is not None:
            _run_with_progress(session, progress)
        return session.run()
    except BaseException as exc:
        stopped = exc
        raise
    finally:
        if progress is not None:
            if session.finished:
                done, completed = _counts(session.journal)
                progress.update(virtual_time_ns=session.now_ns, done=done, completed=completed)
            progress.close()
        session.close()
        # A run that ended, or failed with its report, has a timeline; an interrupted one
        # leaves nothing on disk.
        ended = stopped is None or isinstance(stopped, ReplayFailedError)
        if recording and options.timeline_path is not None and ended:
            timeline = session.timeline()
            if timeline_sink is not None:
                timeline_sink(timeline)
            else:
                write_timeline(timeline, options.timeline_path)


def write_timeline(timeline: Timeline, path: Path) -> None:
    """Write ``timeline`` to ``path``, creating its directory if needed.

    Raises:
        OutputError: the directory cannot be created or the file cannot be written.
    """
    make_directories(path.parent)
    timeline.write(path)
    log.info("timeline written", path=str(path), events=len(timeline.events))


def _run_with_progress(session: ReplaySession, progress: Progress) -> None:
    calls = 0
    clock = progress.wall_clock
    progress.update(virtual_time_ns=0, done=0, completed=0)

    def poll(s: ReplaySession) -> bool:
        nonlocal calls
        calls += 1
        if calls % _POLL_EVERY == 0 and progress.due(clock()):
            done, completed = _counts(s.journal)
            progress.update(virtual_time_ns=s.now_ns, done=done, completed=completed)
        return False

    session.run_until(poll)


def add_inspect_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``inspect TRACE [--format NAME] [--source LABEL] [--json]`` to ``subparsers``.

    The parser's ``handler`` default is :func:`run_inspect`.

    Returns:
        The subcommand's parser.
    """
    parser = subparsers.add_parser(
        "inspect",
        help="print a trace's workload statistics without simulating it",
        description=(
            "Read a trace and print its statistics on the nominal schedule: counts, span, "
            "rate, inter-arrival CV, input/output percentiles, the unbounded-cache prefix "
            "hit ratio and sessions. Nothing is simulated."
        ),
    )
    parser.add_argument(
        "trace",
        help="the trace file, directory or archive, or a bundled dataset's name",
    )
    parser.add_argument("--format", default="auto", help="the trace format (default: auto-detect)")
    parser.add_argument("--source", help="the source label for request ids")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_logging_flags(parser)
    parser.set_defaults(handler=run_inspect)
    return parser


def run_inspect(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``simclock inspect``: print the statistics; 2 on a bad trace, else 0.

    Args:
        args: the parsed ``inspect`` command line.
        stdout: where to print (standard output by default); errors go to standard error.

    Returns:
        The exit status.
    """
    out = sys.stdout if stdout is None else stdout
    path = resolve_trace(args.trace)
    try:
        workload, stats = inspect_trace(path, format=args.format, source=args.source)
    except (TraceFormatError, OSError, ValueError) as error:
        print(f"simclock inspect: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        out.write(workload_stats_json(stats, extra={"path": args.trace, "format": workload.format}))
    else:
        out.write(format_workload_stats(stats, title=f"{args.trace} ({workload.format})"))
    return 0
