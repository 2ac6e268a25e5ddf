"""Shared fixtures for the whole suite, and the virtual-clock recipes for async tests.

pytest-asyncio: a test marked ``@pytest.mark.asyncio(loop_factories=["simclock"])`` runs on a
:class:`simclock.VirtualEventLoop`; every other asyncio test keeps a stock loop.
anyio: tests marked ``@pytest.mark.anyio`` run on the asyncio backend with the virtual loop.
These are the recipes documented in ``docs/how-to/use-the-clock-in-tests.md``.
"""

from __future__ import annotations

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
