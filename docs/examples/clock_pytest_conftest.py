"""conftest.py: opt chosen tests into the virtual clock (pytest-asyncio and anyio)."""

from __future__ import annotations

import pytest

import simclock.testing


def pytest_asyncio_loop_factories(config, item):  # type: ignore[no-untyped-def]
    # Tests marked @pytest.mark.asyncio(loop_factories=["simclock"]) get the virtual loop;
    # every other asyncio test keeps a stock asyncio loop.
    return simclock.testing.loop_factories_for(item)


@pytest.fixture
def anyio_backend():  # type: ignore[no-untyped-def]
    return simclock.testing.anyio_backend()
