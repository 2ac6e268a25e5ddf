"""Helpers to put the virtual clock under a test suite.

The simplest way in is the pytest plugin that ships with simclock: mark a test
``@pytest.mark.simclock`` (see ``docs/reference/pytest-plugin.md``). It changes nothing for a
test that does not ask for it. The recipes below are what it does for you, and keep working
on their own:

**pytest-asyncio (>= 1.4)**: implement the ``pytest_asyncio_loop_factories`` hook in a
``conftest.py`` and mark the tests that want the virtual clock::

    # conftest.py
    import simclock.testing

    def pytest_asyncio_loop_factories(config, item):
        return simclock.testing.loop_factories_for(item)

    # test_something.py
    @pytest.mark.asyncio(loop_factories=["simclock"])
    async def test_an_hour_passes():
        await asyncio.sleep(3600)
        assert simclock.now_ns() == 3600 * 10**9

Tests under that ``conftest.py`` that do not ask for ``"simclock"`` keep running on a stock
asyncio loop (:func:`loop_factories_for` offers them only ``"asyncio"``).

**anyio's pytest plugin**: return :func:`anyio_backend` from the ``anyio_backend`` fixture::

    @pytest.fixture
    def anyio_backend():
        return simclock.testing.anyio_backend()

**Plain synchronous tests**: call :func:`simclock.run` on the coroutine, or drive a loop step
by step inside :func:`virtual_loop`.

:func:`capture_logs` (re-exported from the logging module) collects simclock's structured log
events during a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from ._clock import _virtual_loop
from ._exceptions import ClockConfigError
from ._logcapture import capture_logs
from ._loop import DEFAULT_LIVELOCK_BUDGET, DEFAULT_STALL_BUDGET, VirtualEventLoop, _check_options
from ._wallclock import refuse_blocking_io, virtual_wall_clock

__all__ = (
    "LOOP_FACTORY_NAME",
    "VirtualClock",
    "anyio_backend",
    "capture_logs",
    "loop_factories_for",
    "loop_factory",
    "refuse_blocking_io",
    "virtual_loop",
    "virtual_wall_clock",
)

LOOP_FACTORY_NAME = "simclock"
"""The name tests pass in ``@pytest.mark.asyncio(loop_factories=[...])`` to get the clock."""


_NS_PER_S = 1_000_000_000


class VirtualClock:
    """The clock of the running virtual loop, as the ``virtual_clock`` fixture gives it.

    Every method reads the :class:`VirtualEventLoop` running in this thread at the call, so
    one object serves the whole test.

    Attributes:
        start_ns: the instant the test's clock started at.
        seed: the schedule seed of the test's loop (``None``: first in first out).
    """

    def __init__(self, *, start_ns: int = 0, seed: int | None = None) -> None:
        self.start_ns = start_ns
        self.seed = seed

    @property
    def loop(self) -> VirtualEventLoop:
        """The running loop. Raises :class:`NotVirtualLoopError` when none runs."""
        return _virtual_loop("VirtualClock")

    def now_ns(self) -> int:
        """The virtual time in integer nanoseconds."""
        return self.loop._now_ns

    def now_s(self) -> float:
        """The virtual time in seconds (as ``loop.time()``)."""
        return self.loop._now_s

    def elapsed_ns(self) -> int:
        """Virtual nanoseconds since the clock started."""
        return self.loop._now_ns - self.start_ns

    def elapsed_s(self) -> float:
        """Virtual seconds since the clock started (exact to the nanosecond, as a float)."""
        return self.elapsed_ns() / _NS_PER_S

    def assert_elapsed(self, *, s: float | None = None, ns: int | None = None) -> None:
        """Assert that exactly ``s`` seconds (or ``ns`` nanoseconds) have passed.

        Seconds are rounded to the nearest nanosecond before the exact comparison.

        Raises:
            AssertionError: the elapsed virtual time differs, with both values in the message.
            TypeError: neither or both of ``s`` and ``ns`` are given.
        """
        expected = self._expected_ns(s, ns)
        elapsed = self.elapsed_ns()
        if elapsed != expected:
            raise AssertionError(
                f"virtual time elapsed: {elapsed} ns ({elapsed / _NS_PER_S:g} s), "
                f"expected {expected} ns ({expected / _NS_PER_S:g} s)"
            )

    def assert_now(self, *, s: float | None = None, ns: int | None = None) -> None:
        """Assert that the clock reads exactly ``s`` seconds (or ``ns`` nanoseconds).

        Raises:
            AssertionError: the clock reads another instant, with both values in the message.
            TypeError: neither or both of ``s`` and ``ns`` are given.
        """
        expected = self._expected_ns(s, ns)
        now = self.now_ns()
        if now != expected:
            raise AssertionError(
                f"virtual time is {now} ns ({now / _NS_PER_S:g} s), "
                f"expected {expected} ns ({expected / _NS_PER_S:g} s)"
            )

    @staticmethod
    def _expected_ns(s: float | None, ns: int | None) -> int:
        if (s is None) == (ns is None):
            raise TypeError("give exactly one of s= (seconds) or ns= (nanoseconds)")
        return ns if ns is not None else round(s * _NS_PER_S)  # type: ignore[operator]


class _Marker(Protocol):
    kwargs: Mapping[str, Any]


class _Item(Protocol):
    def get_closest_marker(self, name: str) -> _Marker | None: ...


def loop_factory(
    *,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
) -> Callable[[], VirtualEventLoop]:
    """A zero-argument callable that makes a new :class:`VirtualEventLoop` with these options.

    Pass it wherever asyncio takes a ``loop_factory`` (``asyncio.Runner``, pytest-asyncio,
    anyio).

    Args:
        start_ns: the virtual time the clock starts at, in nanoseconds.
        stall_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        livelock_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.

    Raises:
        ClockConfigError: an option is out of range.
    """
    problem = _check_options(start_ns, stall_budget, livelock_budget)
    if problem is not None:  # say so at the call, not at the first test
        raise ClockConfigError(problem)
    return functools.partial(
        VirtualEventLoop,
        start_ns=start_ns,
        stall_budget=stall_budget,
        livelock_budget=livelock_budget,
    )


def loop_factories_for(
    item: _Item,
    *,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The answer of a ``pytest_asyncio_loop_factories`` hook for one test item.

    A test that names :data:`LOOP_FACTORY_NAME` (``"simclock"``) in
    ``@pytest.mark.asyncio(loop_factories=[...])`` is offered the virtual loop (and stock
    ``"asyncio"``, so it may ask for both); every other test is offered only ``"asyncio"``
    (:func:`asyncio.new_event_loop`), so it runs exactly as it would without the hook.

    Args:
        item: the pytest item the hook was called for.
        start_ns: the virtual time the clock starts at, in nanoseconds.
        stall_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        livelock_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.

    Returns:
        Factory names mapped to zero-argument loop factories.
    """
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop
    }
    marker = item.get_closest_marker("asyncio")
    wanted = marker.kwargs.get("loop_factories") if marker is not None else None
    if wanted is not None and LOOP_FACTORY_NAME in wanted:
        factories[LOOP_FACTORY_NAME] = loop_factory(
            start_ns=start_ns, stall_budget=stall_budget, livelock_budget=livelock_budget
        )
    return factories


def anyio_backend(
    *,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
) -> tuple[str, dict[str, Any]]:
    """The value of an ``anyio_backend`` fixture that runs anyio tests on the virtual clock.

    Returns:
        ``("asyncio", {"loop_factory": ...})``, as anyio's pytest plugin expects.
    """
    return (
        "asyncio",
        {
            "loop_factory": loop_factory(
                start_ns=start_ns, stall_budget=stall_budget, livelock_budget=livelock_budget
            )
        },
    )


@contextlib.contextmanager
def virtual_loop(
    *,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
) -> Iterator[VirtualEventLoop]:
    """A fresh :class:`VirtualEventLoop` for a synchronous test, cleaned up afterwards.

    Inside the block, create tasks with ``loop.create_task`` and drive them with
    ``loop.step()``, ``loop.run_until_ns()``, ``loop.run_until()`` or
    ``loop.run_until_complete()``. On exit, unfinished tasks are cancelled and run to their
    end, async generators are finalised and the loop is closed.

    Yields:
        The loop.
    """
    loop = VirtualEventLoop(
        start_ns=start_ns, stall_budget=stall_budget, livelock_budget=livelock_budget
    )
    try:
        yield loop
    finally:
        try:
            tasks = asyncio.all_tasks(loop)
            if tasks and not loop.is_closed():
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            if not loop.is_closed():
                loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
