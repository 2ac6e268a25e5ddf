"""Capture simclock's structured log events in tests."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from ._logging import _LEVELS, _PACKAGES

__all__ = ("capture_logs",)


class _CaptureHandler(logging.Handler):
    """Keep every record's event dictionary, in emission order."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__(logging.NOTSET)
        self._events = events

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, dict):
            event = {str(k): v for k, v in record.msg.items()}
        else:
            event = {
                "event": record.getMessage(),
                "level": record.levelname.lower(),
                "logger": record.name,
            }
        self._events.append(event)


@contextlib.contextmanager
def capture_logs(
    *, level: str = "debug", loggers: Sequence[str] = _PACKAGES
) -> Iterator[list[dict[str, Any]]]:
    """Collect the log events of ``loggers`` at ``level`` and above, as dictionaries.

    Each captured event is the dictionary the library processors produced: ``event``,
    ``level``, ``logger``, ``virtual_time_ns`` (inside a running virtual loop), the values
    bound with :func:`~simclock.log_context` and the logger's own bound values. Records from
    plain standard library loggers are captured as ``event``, ``level`` and ``logger``.
    Nothing is rendered and nothing reaches other handlers' formatting unchanged: the logger
    levels are restored on exit.

    Example::

        with capture_logs() as events:
            simclock.run(main())
        assert [e["event"] for e in events] == ["started", "finished"]

    Args:
        level: the lowest level captured (``"debug"`` ... ``"critical"``).
        loggers: the standard library logger names whose events are captured (their
            children included); simclock's packages by default.

    Yields:
        The list the events are appended to, live.

    Raises:
        ValueError: ``level`` is not a level name.
    """
    numeric_level = _LEVELS.get(level.lower())
    if numeric_level is None:
        raise ValueError(
            f"log level must be debug, info, warning, error or critical, not {level!r}"
        )
    events: list[dict[str, Any]] = []
    handler = _CaptureHandler(events)
    handler.setLevel(numeric_level)
    saved: list[tuple[logging.Logger, int]] = []
    for name in loggers:
        target = logging.getLogger(name)
        saved.append((target, target.level))
        target.setLevel(numeric_level)
        target.addHandler(handler)
    try:
        yield events
    finally:
        for target, old_level in saved:
            target.removeHandler(handler)
            target.setLevel(old_level)
