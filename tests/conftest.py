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


# The modules that take longest, with their seconds on a quiet two-core machine (rough, used
# only to order them). With --dist loadfile, pytest-xdist hands whole modules to the workers in
# collection order: a long module handed out last runs alone while the other worker idles, so
# these go first, longest first (measured with --durations=0, summed per module).
LONG_MODULES: dict[str, float] = {
    "tests/replay/test_e2e_weka.py": 29,
    "tests/docs/test_examples_compare.py": 11,
    "tests/replay/test_sweep_ray.py": 9,
    "tests/replay/test_macro_differential_more.py": 9,
    "tests/replay/test_e2e_traces.py": 8,
    "tests/loadgen/test_fast_reading_sessions.py": 7,
    "tests/replay/test_runner_mooncake_others.py": 7,
    "tests/engines/test_sglang_rules.py": 6.5,
    "tests/replay/test_plot.py": 6,
    "tests/engines/test_queueing.py": 5.5,
    "tests/replay/test_sweep.py": 5.4,
    "tests/replay/test_export.py": 5.2,
    "tests/simclock/test_pytest_plugin.py": 5,
    "tests/replay/test_pd_mooncake_full.py": 4.4,
    "tests/replay/test_no_progress.py": 3.6,
    "tests/test_self_contained.py": 3.4,
    "tests/replay/test_autoscale.py": 3.2,
    "tests/replay/test_keys_forgetting.py": 2.9,
    "tests/engines/test_keys.py": 2.8,
    "tests/engines/test_sglang_examples.py": 2.8,
    "tests/engines/test_timing_runs.py": 2.8,
    "tests/replay/test_chain_lookups.py": 2.8,
    "tests/replay/test_runner_mooncake.py": 2.7,
    "tests/docs/test_examples_clock.py": 2.7,
    "tests/replay/test_pd_faults.py": 2.6,
    "tests/replay/test_cli.py": 2.5,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the modules: :data:`LONG_MODULES` first, longest first, then the rest by size.

    The suite turns pytest-xdist's own reordering off (``--no-loadscope-reorder``); the rest
    go largest first, as it would order them. Tests keep their order inside a module.
    """
    gone = sorted(path for path in LONG_MODULES if not (config.rootpath / path).is_file())
    if gone:
        raise pytest.UsageError(f"tests/conftest.py: LONG_MODULES names no module: {gone}")

    def rank(tests: list[pytest.Item]) -> tuple[int, float]:
        seconds = LONG_MODULES.get(tests[0].nodeid.split("::", 1)[0])
        return (1, -len(tests)) if seconds is None else (0, -seconds)

    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    items[:] = [item for tests in sorted(modules.values(), key=rank) for item in tests]


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
