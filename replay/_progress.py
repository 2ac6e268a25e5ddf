"""Progress of a long replay: virtual time reached, requests done, and wall-clock rate.

A :class:`Progress` watches the run's lifecycle events (it is a journal subscriber) and
writes a short status line at most a few times per wall-clock second. It only reads: it
never touches the loop, the engines or the report, so a run with progress gives exactly the
same results as a run without. The wall clock it reads is for display only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Literal, TextIO

import attrs

from engines import EventKind, LifecycleEvent

__all__ = ("Progress", "ProgressMode", "format_virtual_time", "make_progress")

ProgressMode = Literal["auto", "plain", "none"]
"""``--progress``: ``auto`` shows progress on a terminal only, ``plain`` always, ``none`` never."""

_TERMINAL_KINDS = frozenset(
    {EventKind.FINISHED, EventKind.REJECTED, EventKind.FAILED, EventKind.CANCELLED}
)


def format_virtual_time(time_ns: int) -> str:
    """Return ``time_ns`` as ``H:MM:SS.mmm`` (hours unbounded), truncated to milliseconds.

    Args:
        time_ns: a non-negative virtual time in nanoseconds.

    Returns:
        For example ``"1:02:03.456"`` for 3 723 456 000 000 ns.
    """
    total_ms = time_ns // 1_000_000
    seconds, ms = divmod(total_ms, 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}.{ms:03d}"


@attrs.define(eq=False)
class Progress:
    """A throttled progress line for one run.

    State: ``done`` requests (terminal: finished, rejected or failed), of which ``completed``
    finished; ``virtual_time_ns`` is the latest time seen. :meth:`on_event` (a journal
    subscriber) or :meth:`update` (a poller) updates them and, if at least
    ``min_interval_s`` of wall time passed since the last line, writes a new one (the first
    call only starts the wall clock); :meth:`close` writes the final line (always) and ends
    it.

    On a terminal (``rewrite=True``) each line overwrites the previous one with a carriage
    return; otherwise each line ends with a newline.

    Attributes:
        stream: where lines go (standard error in the command line).
        total_requests: the number of requests in the workload, if known.
        rewrite: overwrite one line in place (a terminal) rather than print one per update.
        min_interval_s: the least wall time between two lines.
        wall_clock: a monotonic clock in seconds (injectable for tests).
    """

    stream: TextIO
    total_requests: int | None = attrs.field(default=None, kw_only=True)
    rewrite: bool = attrs.field(default=False, kw_only=True)
    min_interval_s: float = attrs.field(default=0.25, kw_only=True)
    wall_clock: Callable[[], float] = attrs.field(default=time.monotonic, kw_only=True)
    done: int = attrs.field(default=0, init=False)
    completed: int = attrs.field(default=0, init=False)
    virtual_time_ns: int = attrs.field(default=0, init=False)
    lines_written: int = attrs.field(default=0, init=False)
    _started_s: float | None = attrs.field(default=None, init=False)
    _last_line_s: float | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def on_event(self, event: LifecycleEvent) -> None:
        """Journal subscriber: count terminal events, then maybe write a line.

        Args:
            event: the lifecycle event just recorded.
        """
        if event.time_ns > self.virtual_time_ns:
            self.virtual_time_ns = event.time_ns
        if event.kind in _TERMINAL_KINDS:
            self.done += 1
            if event.kind is EventKind.FINISHED:
                self.completed += 1
        self._tick(self.wall_clock())

    def due(self, now_s: float) -> bool:
        """Whether a line written at wall time ``now_s`` would respect the interval."""
        return self._last_line_s is None or now_s - self._last_line_s >= self.min_interval_s

    def update(self, *, virtual_time_ns: int, done: int, completed: int) -> None:
        """Set the counts from outside (a poller), then maybe write a line.

        Args:
            virtual_time_ns: the virtual time reached.
            done: requests that ended (completed, rejected, failed or cancelled).
            completed: requests that completed.
        """
        self.virtual_time_ns = max(self.virtual_time_ns, virtual_time_ns)
        self.done = done
        self.completed = completed
        self._tick(self.wall_clock())

    def _tick(self, now_s: float) -> None:
        if self._started_s is None:
            self._started_s = now_s
            self._last_line_s = now_s
        elif self.due(now_s):
            self._write(now_s)

    def close(self) -> None:
        """Write the final line and end it with a newline (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._write(self.wall_clock())
        if self.rewrite:
            self.stream.write("\n")
        self.stream.flush()

    def line(self, now_s: float) -> str:
        """Return the status line as of wall time ``now_s`` (from :attr:`wall_clock`).

        Args:
            now_s: the current wall-clock reading.

        Returns:
            For example ``"virtual 0:01:40.000  done 120/500 (completed 118)  wall 0.5 s
            240 req/s  200x"``.
        """
        wall_s = 0.0 if self._started_s is None else max(0.0, now_s - self._started_s)
        total = "" if self.total_requests is None else f"/{self.total_requests}"
        text = (
            f"virtual {format_virtual_time(self.virtual_time_ns)}  "
            f"done {self.done}{total} (completed {self.completed})  wall {wall_s:.1f} s"
        )
        if wall_s > 0:
            text += (
                f"  {self.done / wall_s:,.0f} req/s  {self.virtual_time_ns / 1e9 / wall_s:,.0f}x"
            )
        return text

    def _write(self, now_s: float) -> None:
        self._last_line_s = now_s
        self.lines_written += 1
        text = self.line(now_s)
        if self.rewrite:
            self.stream.write("\r\x1b[2K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def make_progress(
    mode: ProgressMode,
    *,
    stream: TextIO | None = None,
    total_requests: int | None = None,
    min_interval_s: float = 0.25,
) -> Progress | None:
    """Return the progress line ``--progress MODE`` asks for, or ``None`` for none.

    Args:
        mode: ``"auto"`` (a rewriting line when ``stream`` is a terminal, else nothing),
            ``"plain"`` (always; rewriting on a terminal, one line per update otherwise) or
            ``"none"``.
        stream: where to write; standard error by default.
        total_requests: the workload's request count, shown as the denominator.
        min_interval_s: the least wall time between two lines.

    Returns:
        A :class:`Progress` to subscribe to the run's journal, or ``None``.

    Raises:
        ValueError: ``mode`` is not auto, plain or none.
    """
    if mode not in ("auto", "plain", "none"):
        raise ValueError(f"progress must be auto, plain or none, not {mode!r}")
    out = sys.stderr if stream is None else stream
    is_tty = bool(getattr(out, "isatty", lambda: False)())
    if mode == "none" or (mode == "auto" and not is_tty):
        return None
    return Progress(
        out, total_requests=total_requests, rewrite=is_tty, min_interval_s=min_interval_s
    )
