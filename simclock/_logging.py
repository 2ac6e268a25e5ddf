"""Structured logging with structlog, the library way.

Library modules only *get* and *bind* loggers::

    from simclock import get_logger

    log = get_logger(__name__)
    log.debug("pass planned", engine=0, batch_size=12)

They never configure anything. A logger from :func:`get_logger` is a structlog bound logger
over the standard library logger of the same name, so an unconfigured program shows only
warnings and errors (the standard library's last-resort handler) and a program that
configures :mod:`logging` its own way keeps full control. Every event passes through
:data:`LIBRARY_PROCESSORS`, which:

- drops events below the standard library logger's effective level, cheaply, first;
- merges the context bound with :func:`log_context` (for example ``run_id`` and
  ``request_id``), which lives in :mod:`contextvars`, so every asyncio task sees the context
  that was current when it was created;
- stamps ``virtual_time_ns`` (an integer) when a :class:`~simclock.VirtualEventLoop` is
  running in this thread.

Applications (the ``simclock`` command line, a notebook) call :func:`configure_logging`
once to choose a level and a rendering: coloured console lines on a terminal, one JSON
object per line otherwise. There are no async log methods: logging is synchronous and
brings no threads in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, Literal, TextIO, cast

import structlog

from ._loop import VirtualEventLoop

__all__ = (
    "LIBRARY_PROCESSORS",
    "LogFormat",
    "add_virtual_time",
    "configure_logging",
    "get_logger",
    "log_context",
)

LogFormat = Literal["auto", "console", "json"]
"""How :func:`configure_logging` renders events: ``auto`` picks ``console`` on a terminal."""

_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# The packages whose loggers configure_logging sets the level of.
_PACKAGES = ("simclock", "loadgen", "engines", "policies", "replay")


def add_virtual_time(
    logger: object, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Structlog processor: stamp ``virtual_time_ns`` while a virtual loop runs.

    The value is the integer virtual time of the :class:`~simclock.VirtualEventLoop`
    running in this thread (:meth:`VirtualEventLoop.time_ns`). Outside a running virtual
    loop the event is left as it is. A value already bound by the caller is kept.

    Args:
        logger: the wrapped logger (unused).
        method_name: the log method's name (unused).
        event_dict: the event being processed.

    Returns:
        The same event dictionary.
    """
    if "virtual_time_ns" in event_dict:
        return event_dict
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return event_dict
    if isinstance(loop, VirtualEventLoop):
        event_dict["virtual_time_ns"] = loop.time_ns()
    return event_dict


LIBRARY_PROCESSORS: tuple[structlog.typing.Processor, ...] = (
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.add_log_level,
    add_virtual_time,
    structlog.stdlib.PositionalArgumentsFormatter(),
    structlog.processors.StackInfoRenderer(),
    structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
)
"""The processors every library logger runs, in order (see the module docstring).

The last one hands the event dictionary to the standard library record, where the
formatter installed by :func:`configure_logging` (or a user's own
:class:`structlog.stdlib.ProcessorFormatter`) renders it.
"""


def get_logger(name: str, **initial_values: Any) -> structlog.stdlib.BoundLogger:
    """Return the structured logger of module ``name``, optionally with bound values.

    Args:
        name: the standard library logger name, usually ``__name__``.
        **initial_values: key-value pairs bound to every event of this logger.

    Returns:
        A structlog bound logger; ``.bind(**values)`` returns a new one with more context.
    """
    return cast(
        structlog.stdlib.BoundLogger,
        structlog.wrap_logger(
            logging.getLogger(name),
            processors=list(LIBRARY_PROCESSORS),
            wrapper_class=structlog.stdlib.BoundLogger,
            context_class=dict,
            cache_logger_on_first_use=True,
            **initial_values,
        ),
    )


@contextlib.contextmanager
def log_context(**values: Any) -> Iterator[None]:
    """Bind ``values`` to every event logged in this context (and tasks created in it).

    The context lives in :mod:`contextvars`: an asyncio task copies the context current
    when it is created, so a per-request task started inside ``log_context(request_id=...)``
    logs its request id, and nothing leaks to other tasks. Nested contexts add to (and may
    override) the outer one; leaving restores it.

    Args:
        **values: key-value pairs, for example ``run_id="run-1"``.

    Yields:
        Nothing.
    """
    with structlog.contextvars.bound_contextvars(**values):
        yield


def _render_virtual_time(
    logger: object, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Show the virtual time as the console line's leading timestamp, in seconds."""
    time_ns = event_dict.pop("virtual_time_ns", None)
    if isinstance(time_ns, int):
        seconds, rest = divmod(time_ns, 1_000_000_000)
        event_dict["timestamp"] = f"{seconds}.{rest:09d}s"
    return event_dict


class _SimclockHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` installs (and replaces on a second call)."""


def configure_logging(
    *,
    format: LogFormat = "auto",
    level: str = "warning",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Configure rendering and level for simclock's loggers (applications only).

    Installs one handler on the root logger that renders structlog events (and plain
    standard library records) as console lines or JSON lines, sets the level of the
    ``simclock``, ``loadgen``, ``engines``, ``policies`` and ``replay`` loggers, and
    configures :func:`structlog.get_logger` to go the same way. Calling it again replaces
    the handler it installed before.

    Args:
        format: ``"console"`` (aligned, coloured on a terminal), ``"json"`` (one object per
            line, keys sorted), or ``"auto"``: console when ``stream`` is a terminal.
        level: ``"debug"``, ``"info"``, ``"warning"``, ``"error"`` or ``"critical"``.
        stream: where to write; standard error by default.

    Returns:
        The installed handler (remove it from the root logger to undo).

    Raises:
        ValueError: ``format`` or ``level`` is not one of the names above.
    """
    if format not in ("auto", "console", "json"):
        raise ValueError(f"log format must be auto, console or json, not {format!r}")
    numeric_level = _LEVELS.get(level.lower())
    if numeric_level is None:
        raise ValueError(
            f"log level must be debug, info, warning, error or critical, not {level!r}"
        )
    out = sys.stderr if stream is None else stream
    is_tty = bool(getattr(out, "isatty", lambda: False)())
    resolved = ("console" if is_tty else "json") if format == "auto" else format
    renderer: structlog.typing.Processor
    chain: list[structlog.typing.Processor] = [
        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
        structlog.processors.format_exc_info,
    ]
    if resolved == "console":
        chain.insert(0, _render_virtual_time)
        renderer = structlog.dev.ConsoleRenderer(colors=is_tty)
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=True, default=repr)
    formatter = structlog.stdlib.ProcessorFormatter(
        processors=[*chain, renderer],
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            add_virtual_time,
        ],
    )
    handler = _SimclockHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _SimclockHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    for package in _PACKAGES:
        logging.getLogger(package).setLevel(numeric_level)
    structlog.configure(
        processors=list(LIBRARY_PROCESSORS),
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        context_class=dict,
        cache_logger_on_first_use=False,
    )
    return handler
