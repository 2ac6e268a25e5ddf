"""Opt-in virtual wall-clock functions, and refusal of blocking real I/O, inside a virtual run.

Without these, only the event loop's clock is virtual: ``loop.time()``, ``asyncio.sleep``,
timeouts and :mod:`simclock`'s own functions. ``time.time``, ``time.monotonic``,
``time.perf_counter``, ``datetime.datetime.now`` and ``time.sleep`` stay real.

:func:`virtual_wall_clock` replaces those module attributes for the duration of a block.
The replacements look at the thread's running loop on every call: when it is a
:class:`VirtualEventLoop` they read (or refuse) the virtual clock; otherwise they call the
real function, so other threads and code outside the run (pytest's own timing, logging
before the loop starts) see real time. Code that bound a function before the block (``from
time import monotonic`` at import time) keeps the real one: patch the attribute it reads, or
pass the clock in (``clock=time.monotonic`` read at call time).
"""

from __future__ import annotations

import contextlib
import datetime as _datetime
import os
import socket
import subprocess
import sys
import time as _time
from asyncio import _get_running_loop
from collections.abc import Callable, Iterator
from typing import Any

from ._exceptions import BlockingCallError
from ._loop import VirtualEventLoop

__all__ = ("refuse_blocking_io", "virtual_wall_clock")

_REAL_TIME = _time.time
_REAL_TIME_NS = _time.time_ns
_REAL_MONOTONIC = _time.monotonic
_REAL_MONOTONIC_NS = _time.monotonic_ns
_REAL_PERF_COUNTER = _time.perf_counter
_REAL_PERF_COUNTER_NS = _time.perf_counter_ns
_REAL_SLEEP = _time.sleep
_REAL_DATETIME = _datetime.datetime
_REAL_CREATE_CONNECTION = socket.create_connection
_REAL_CONNECT = socket.socket.connect
_REAL_CONNECT_EX = socket.socket.connect_ex
_REAL_POPEN_INIT = subprocess.Popen.__init__
_REAL_SYSTEM = os.system


def _virtual_loop() -> VirtualEventLoop | None:
    loop = _get_running_loop()
    return loop if isinstance(loop, VirtualEventLoop) else None


def _seconds(real: Callable[[], float]) -> Callable[[], float]:
    def read() -> float:
        loop = _virtual_loop()
        return real() if loop is None else loop._now_s

    read.__name__ = real.__name__
    read.__doc__ = f"Virtual seconds inside a virtual run; else the real {real.__name__}."
    return read


def _nanoseconds(real: Callable[[], int]) -> Callable[[], int]:
    def read() -> int:
        loop = _virtual_loop()
        return real() if loop is None else loop._now_ns

    read.__name__ = real.__name__
    read.__doc__ = f"The virtual time in ns inside a virtual run; else the real {real.__name__}."
    return read


def _caller() -> str:
    """``file:line in function`` of the code that made the refused call."""
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _sleep(seconds: float) -> None:
    """Refused inside a virtual run (it would block in real time); else the real sleep."""
    if _virtual_loop() is None:
        _REAL_SLEEP(seconds)
        return
    caller = _caller()
    raise BlockingCallError(
        f"time.sleep({seconds!r}) called inside a virtual run, from {caller}: it would block "
        "in real time while the virtual clock stands still; await asyncio.sleep() instead",
        call=f"time.sleep({seconds!r})",
        caller=caller,
    )


class _DatetimeMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _REAL_DATETIME)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _REAL_DATETIME)


class _VirtualDatetime(_REAL_DATETIME, metaclass=_DatetimeMeta):
    """``datetime.datetime`` whose ``now``/``utcnow`` read the virtual clock in a virtual run.

    They return plain :class:`datetime.datetime` values; ``isinstance`` checks against the
    patched name accept them.
    """

    @classmethod
    def now(cls, tz: _datetime.tzinfo | None = None) -> Any:
        loop = _virtual_loop()
        if loop is None:
            return _REAL_DATETIME.now(tz)
        return _REAL_DATETIME.fromtimestamp(loop._now_ns / 1e9, tz)

    @classmethod
    def utcnow(cls) -> Any:
        loop = _virtual_loop()
        if loop is None:
            return _REAL_DATETIME.now(_datetime.UTC).replace(tzinfo=None)
        stamp = _REAL_DATETIME.fromtimestamp(loop._now_ns / 1e9, _datetime.UTC)
        return stamp.replace(tzinfo=None)


_TIME_PATCHES: tuple[tuple[Any, str, Any], ...] = (
    (_time, "time", _seconds(_REAL_TIME)),
    (_time, "time_ns", _nanoseconds(_REAL_TIME_NS)),
    (_time, "monotonic", _seconds(_REAL_MONOTONIC)),
    (_time, "monotonic_ns", _nanoseconds(_REAL_MONOTONIC_NS)),
    (_time, "perf_counter", _seconds(_REAL_PERF_COUNTER)),
    (_time, "perf_counter_ns", _nanoseconds(_REAL_PERF_COUNTER_NS)),
    (_time, "sleep", _sleep),
    (_datetime, "datetime", _VirtualDatetime),
)


def _refuse_in_run(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _virtual_loop() is None:
            return real(*args, **kwargs)
        caller = _caller()
        raise BlockingCallError(
            f"{name}() called inside a virtual run, from {caller}: blocking real I/O has no "
            "virtual time (strict mode); replace it with an in-memory fake",
            call=f"{name}()",
            caller=caller,
        )

    guarded.__name__ = getattr(real, "__name__", name)
    guarded.__doc__ = f"Refused inside a virtual run (strict mode); else the real {name}."
    return guarded


_IO_PATCHES: tuple[tuple[Any, str, Any], ...] = (
    # create_connection first, so no socket is made (and leaked) before the refusal
    (
        socket,
        "create_connection",
        _refuse_in_run("socket.create_connection", _REAL_CREATE_CONNECTION),
    ),
    (socket.socket, "connect", _refuse_in_run("socket.socket.connect", _REAL_CONNECT)),
    (socket.socket, "connect_ex", _refuse_in_run("socket.socket.connect_ex", _REAL_CONNECT_EX)),
    (subprocess.Popen, "__init__", _refuse_in_run("subprocess.Popen", _REAL_POPEN_INIT)),
    (os, "system", _refuse_in_run("os.system", _REAL_SYSTEM)),
)


@contextlib.contextmanager
def _patched(patches: tuple[tuple[Any, str, Any], ...]) -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def virtual_wall_clock() -> contextlib.AbstractContextManager[None]:
    """Make the wall-clock functions read the virtual clock inside virtual runs, in a block.

    Inside the block, while a :class:`VirtualEventLoop` runs in the calling thread:
    ``time.time()``, ``time.monotonic()`` and ``time.perf_counter()`` return the loop's
    time in seconds (``loop.time()``), their ``_ns`` forms return ``loop.time_ns()``,
    ``datetime.datetime.now(tz)`` and ``utcnow()`` return that instant as a date (so a clock
    started at ``start_ns=1_700_000_000 * 10**9`` reads 2023-11-14), and ``time.sleep()``
    raises :class:`BlockingCallError` naming the caller. Elsewhere they are the real
    functions. Everything is restored when the block ends.

    Returns:
        A context manager.
    """
    return _patched(_TIME_PATCHES)


def refuse_blocking_io() -> contextlib.AbstractContextManager[None]:
    """Refuse blocking real I/O made from inside virtual runs, in a block (strict mode).

    Inside the block, while a :class:`VirtualEventLoop` runs in the calling thread,
    ``socket.create_connection`` (and the clients built on it: ``http.client``, ``urllib``),
    ``socket.socket.connect``/``connect_ex``, ``subprocess.Popen`` (so ``subprocess.run``)
    and ``os.system`` raise :class:`BlockingCallError` naming the caller. Elsewhere they
    work as usual.

    Returns:
        A context manager.
    """
    return _patched(_IO_PATCHES)
