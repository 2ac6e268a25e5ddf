"""Run this package's async tests on the virtual clock, with the documented recipes.

pytest-asyncio: tests that say ``@pytest.mark.asyncio(loop_factories=["simclock"])`` get a
:class:`simclock.VirtualEventLoop`; other asyncio tests here keep a stock loop.
anyio: tests marked ``@pytest.mark.anyio`` run on the asyncio backend with the virtual loop.
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
