"""Shared fixtures for the whole suite, and the virtual-clock recipes for async tests.

pytest-asyncio: a test marked ``@pytest.mark.asyncio(loop_factories=["simclock"])`` runs on a
:class:`simclock.VirtualEventLoop`; every other asyncio test keeps a stock loop.
anyio: tests marked ``@pytest.mark.anyio`` run on the asyncio backend with the virtual loop.
These are the recipes documented in ``docs/how-to/use-the-clock-in-tests.md``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

import simclock.testing


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], Any]]:
    return simclock.testing.loop_factories_for(item)


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return simclock.testing.anyio_backend()


# A shell starts background jobs with SIGINT ignored, and processes inherit that: Ctrl-C
# would then never reach the runs that the interruption tests stop (in this process, or in a
# child, which starts with the signal ignored too). The suite runs as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Runs of pytest inside the tests (pytester, subprocesses) load only the plugins they ask for
# beside the installed ones: pytest-benchmark, where installed, warns under xdist, and those
# runs turn warnings into errors (the suite's own addopts say the same for the outer run).
os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} -p no:benchmark".strip()


@pytest.fixture(autouse=True)
def _pytester_without_benchmark(request: pytest.FixtureRequest) -> None:
    """``pytester`` clears ``PYTEST_ADDOPTS`` when it is made; set it again for its runs."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:benchmark")
