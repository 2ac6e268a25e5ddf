"""The pytest plugin: ``@pytest.mark.simclock`` puts an async test on the virtual clock.

Registered through the ``pytest11`` entry point (name ``simclock``; ``-p no:simclock`` turns
it off). It changes nothing for a test that does not ask for it.

A test *asks* when it (or its class or module) carries ``@pytest.mark.simclock``, or when
the session runs with ``--simclock``; ``--no-simclock`` makes no test ask. An asking test
runs, with its function-scoped async fixtures, on a :class:`VirtualEventLoop` built from
the marker's options:

- pytest-asyncio tests (>= 1.4): through its ``pytest_asyncio_loop_factories`` hook, which
  this plugin wraps, so a ``conftest.py`` implementing the hook keeps working;
- anyio tests: the anyio plugin's runner gets the virtual loop as its ``loop_factory``;
- other ``async def`` tests: run here, like :func:`simclock.run`.

States of one asking test: *setup* (options resolved, wall clock patched if asked, the loop
created by whichever plugin runs the test), *call*, *teardown* (everything restored). On a
failure under a seed, the report gets a ``simclock`` section with the replay command.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import attrs
import pytest
from anyio import pytest_plugin as anyio_plugin

from ._exceptions import ClockConfigError
from ._loop import (
    DEFAULT_LIVELOCK_BUDGET,
    DEFAULT_STALL_BUDGET,
    MAX_TIME_NS,
    VirtualEventLoop,
    _check_options,
    _end_s_to_ns,
    delay_to_ns,
)
from ._run import interrupts_raise_in_the_loop
from ._wallclock import refuse_blocking_io, virtual_wall_clock
from .testing import LOOP_FACTORY_NAME, VirtualClock

__all__ = ()

MARKER_OPTIONS = (
    "start_s",
    "start_ns",
    "end_s",
    "stall_budget",
    "livelock_budget",
    "seed",
    "explore",
    "patch_time",
    "strict_io",
)
"""Keyword options of ``@pytest.mark.simclock``."""

DEFAULT_MAX_DURATION_S = "86400"
"""The ``simclock_max_duration_s`` ini default: one virtual day after the start."""

_SEED_PARAM = "_simclock_seed"
_MARKER_HELP = (
    "simclock(*, start_s=0, start_ns=0, end_s=None, stall_budget=1000, "
    "livelock_budget=1000000, seed=None, explore=None, patch_time=False, strict_io=False): "
    "run this async test on simclock's virtual clock"
)


@attrs.frozen
class ClockOptions:
    """The resolved options of one asking test.

    Attributes:
        start_ns: the virtual time the clock starts at.
        end_ns: the end of virtual time (``None``: the clock's range only).
        stall_budget: see :class:`VirtualEventLoop`.
        livelock_budget: see :class:`VirtualEventLoop`.
        seed: the schedule seed (``None``: FIFO).
        explore: how many seeds the test runs under (``None``: one run).
        patch_time: whether the wall-clock functions read the virtual clock.
        strict_io: whether blocking socket connects and subprocesses are refused.
    """

    start_ns: int
    end_ns: int | None
    stall_budget: int | None
    livelock_budget: int | None
    seed: int | None
    explore: int | None
    patch_time: bool
    strict_io: bool

    def new_loop(self) -> VirtualEventLoop:
        """A new loop with these options (interruptions reported through pytest)."""
        loop = VirtualEventLoop(
            start_ns=self.start_ns,
            stall_budget=self.stall_budget,
            livelock_budget=self.livelock_budget,
            end_ns=self.end_ns,
            seed=self.seed,
            report_interrupts=False,
        )
        return loop


def _marker_kwargs(item: pytest.Item) -> dict[str, Any]:
    """The simclock markers' options, the closest marker winning per option."""
    merged: dict[str, Any] = {}
    for marker in item.iter_markers("simclock"):
        if marker.args:
            raise ClockConfigError(
                f"@pytest.mark.simclock takes keyword options only, got {marker.args!r}"
            )
        for name, value in marker.kwargs.items():
            if name not in MARKER_OPTIONS:
                raise ClockConfigError(
                    f"@pytest.mark.simclock got an unknown option {name!r}; options: "
                    + ", ".join(MARKER_OPTIONS)
                )
            merged.setdefault(name, value)
    return merged


def _seconds_to_ns(name: str, value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ClockConfigError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return delay_to_ns(value)


def _positive_int(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ClockConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def max_duration_ns(config: pytest.Config) -> int | None:
    """The ``simclock_max_duration_s`` ini value in ns (``None`` when set to ``none``).

    Raises:
        pytest.UsageError: the value is not a number of seconds > 0 or ``none``.
    """
    raw = str(config.getini("simclock_max_duration_s")).strip()
    if raw.lower() == "none":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise pytest.UsageError(
            f"simclock_max_duration_s: must be a number of seconds > 0 or 'none', got {raw!r}"
        )
    return delay_to_ns(value)


def resolve_options(item: pytest.Item, *, seed_param: int | None = None) -> ClockOptions:
    """The clock options of an asking test: marker, then command line, then ini defaults.

    Raises:
        ClockConfigError: an option is unknown or out of range.
    """
    kwargs = _marker_kwargs(item)
    config = item.config
    if "start_s" in kwargs and "start_ns" in kwargs:
        raise ClockConfigError("give start_s or start_ns, not both")
    start_ns = kwargs.get("start_ns", 0)
    if "start_s" in kwargs:
        start_ns = _seconds_to_ns("start_s", kwargs["start_s"])
    stall_budget = kwargs.get("stall_budget", DEFAULT_STALL_BUDGET)
    livelock_budget = kwargs.get("livelock_budget", DEFAULT_LIVELOCK_BUDGET)
    problem = _check_options(start_ns, stall_budget, livelock_budget)
    if problem is not None:
        raise ClockConfigError(problem)
    end_ns: int | None
    if kwargs.get("end_s") is not None:
        end_ns, problem = _end_s_to_ns(kwargs["end_s"], None, start_ns)
        if problem is not None:
            raise ClockConfigError(problem)
    else:
        duration = max_duration_ns(config)
        end_ns = None if duration is None else min(start_ns + duration, MAX_TIME_NS)
    explore = _positive_int("explore", kwargs.get("explore"))
    seed = kwargs.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ClockConfigError(f"seed must be an int >= 0, got {seed!r}")
    command_line_seed = config.getoption("simclock_seed")
    if command_line_seed is not None:
        seed, explore = command_line_seed, None
    elif seed_param is not None:
        seed = seed_param
    for flag in ("patch_time", "strict_io"):
        if not isinstance(kwargs.get(flag, False), bool):
            raise ClockConfigError(f"{flag} must be True or False, got {kwargs[flag]!r}")
    return ClockOptions(
        start_ns=start_ns,
        end_ns=end_ns,
        stall_budget=stall_budget,
        livelock_budget=livelock_budget,
        seed=seed,
        explore=explore,
        patch_time=kwargs.get("patch_time", False),
        strict_io=kwargs.get("strict_io", False),
    )


def asks_for_the_clock(item: pytest.Item) -> bool:
    """Does this test ask for the virtual clock (marker or ``--simclock``, no ``--no-simclock``)?"""
    config = item.config
    if config.getoption("simclock_off"):
        return False
    return bool(config.getoption("simclock_all")) or item.get_closest_marker("simclock") is not None


def _replay_nodeid(item: pytest.Item, seed: int) -> str:
    """The node id of ``item`` without the explore parameter (the replay runs one seed)."""
    nodeid = item.nodeid
    part = f"simclock-seed={seed}"
    if nodeid.endswith(f"[{part}]"):
        return nodeid[: -len(part) - 2]
    return (
        nodeid.replace(f"-{part}]", "]", 1)
        .replace(f"[{part}-", "[", 1)
        .replace(f"-{part}-", "-", 1)
    )


@pytest.fixture
def _simclock_seed(request: pytest.FixtureRequest) -> int | None:
    """The seed of one explore run (set by parametrization)."""
    return getattr(request, "param", None)


@pytest.fixture
def virtual_clock(request: pytest.FixtureRequest) -> VirtualClock:
    """The virtual clock of the running test: ``now_s()``, ``now_ns()`` and assertions."""
    item = request.node
    plugin: SimclockPlugin = item.config.pluginmanager.get_plugin(SimclockPlugin.NAME)
    options = plugin.options.get(item.nodeid)
    if options is None:
        pytest.fail(
            "the virtual_clock fixture needs a test on the virtual clock: mark it "
            "@pytest.mark.simclock or run pytest with --simclock",
            pytrace=False,
        )
    return VirtualClock(start_ns=options.start_ns, seed=options.seed)


class LoopFactoriesHook:
    """pytest-asyncio's loop-factory hook, registered once a test of the session asks.

    A session in which no test asks for the virtual clock never sees it, so pytest-asyncio
    makes every loop exactly as it would without simclock installed.
    """

    NAME = "simclock-loop-factories"

    def __init__(self, plugin: SimclockPlugin) -> None:
        self.plugin = plugin

    @pytest.hookimpl(wrapper=True, optionalhook=True)
    def pytest_asyncio_loop_factories(
        self, config: pytest.Config, item: pytest.Item
    ) -> Generator[None, Mapping[str, Callable[[], Any]] | None, Mapping[str, Any]]:
        inner = yield
        if not asks_for_the_clock(item):
            # Without another implementation pytest-asyncio would have made the loop
            # with asyncio.new_event_loop(): offer exactly that.
            return inner if inner is not None else {"asyncio": asyncio.new_event_loop}
        marker = item.get_closest_marker("asyncio")
        selected = marker.kwargs.get("loop_factories") if marker is not None else None
        if selected is None:
            return {LOOP_FACTORY_NAME: self.plugin.new_loop}
        factories = dict(inner or {})
        factories.setdefault("asyncio", asyncio.new_event_loop)
        factories[LOOP_FACTORY_NAME] = self.plugin.new_loop
        return factories


class SimclockPlugin:
    """Per-session state: the options of the asking tests in progress and what they patched."""

    NAME = "simclock-session"

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options: dict[str, ClockOptions] = {}
        self._current: ClockOptions | None = None
        self._stacks: dict[str, contextlib.ExitStack] = {}
        self._replays: list[str] = []

    # ------------------------------------------------------------------ loops

    def new_loop(self) -> VirtualEventLoop:
        """The loop factory handed to pytest-asyncio and anyio for the current test."""
        options = self._current
        if options is None:  # a loop made outside an asking test's setup: defaults
            options = ClockOptions(
                start_ns=0,
                end_ns=max_duration_ns(self.config),
                stall_budget=DEFAULT_STALL_BUDGET,
                livelock_budget=DEFAULT_LIVELOCK_BUDGET,
                seed=None,
                explore=None,
                patch_time=False,
                strict_io=False,
            )
        return options.new_loop()

    # ------------------------------------------------------------------ collection

    def register_loop_factories_hook(self) -> None:
        """Make pytest-asyncio ask this plugin for loops (once per session)."""
        manager = self.config.pluginmanager
        if not manager.has_plugin(LoopFactoriesHook.NAME):
            manager.register(LoopFactoriesHook(self), LoopFactoriesHook.NAME)

    @pytest.hookimpl(wrapper=True)
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> Generator[None, None, None]:
        # A wrapper, so the hook is registered before pytest-asyncio parametrizes this test.
        definition = metafunc.definition
        if asks_for_the_clock(definition):
            self.register_loop_factories_hook()
            self._parametrize_explore(metafunc)
        return (yield)

    def _parametrize_explore(self, metafunc: pytest.Metafunc) -> None:
        definition = metafunc.definition
        if self.config.getoption("simclock_seed") is not None:
            return
        try:
            kwargs = _marker_kwargs(definition)
            explore = _positive_int("explore", kwargs.get("explore"))
        except ClockConfigError:
            return  # reported at setup, where the test can fail with the message
        if explore is None:
            return
        base = kwargs.get("seed")
        base = base if isinstance(base, int) and not isinstance(base, bool) and base >= 0 else 0
        seeds = list(range(base, base + explore))
        metafunc.fixturenames.append(_SEED_PARAM)
        metafunc.parametrize(
            _SEED_PARAM, seeds, ids=[f"simclock-seed={s}" for s in seeds], indirect=True
        )

    # ------------------------------------------------------------------ running

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not asks_for_the_clock(item):
            return
        callspec = getattr(item, "callspec", None)
        seed_param = callspec.params.get(_SEED_PARAM) if callspec is not None else None
        try:
            options = resolve_options(item, seed_param=seed_param)
        except ClockConfigError as exc:
            pytest.fail(f"@pytest.mark.simclock: {exc}", pytrace=False)
        self.options[item.nodeid] = options
        self._current = options
        stack = contextlib.ExitStack()
        self._stacks[item.nodeid] = stack
        stack.enter_context(interrupts_raise_in_the_loop())
        if options.patch_time:
            stack.enter_context(virtual_wall_clock())
        if options.strict_io:
            stack.enter_context(refuse_blocking_io())
        if "anyio_backend" in getattr(item, "fixturenames", ()):
            stack.enter_context(self._anyio_runner_on_the_virtual_loop())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            stack = self._stacks.pop(item.nodeid, None)
            self.options.pop(item.nodeid, None)
            self._current = None
            if stack is not None:
                stack.close()

    @contextlib.contextmanager
    def _anyio_runner_on_the_virtual_loop(self) -> Iterator[None]:
        # anyio's plugin makes its test runner in get_runner(backend_name, options); handing
        # it our loop factory there reaches the test and its async fixtures alike.
        if anyio_plugin._current_runner is not None:
            pytest.fail(
                "simclock: an anyio test runner made for a wider-scoped async fixture is still "
                "open, so this test cannot get a virtual loop; give the async fixtures it uses "
                "function scope",
                pytrace=False,
            )
        original = anyio_plugin.get_runner

        @contextlib.contextmanager
        def get_runner(backend_name: str, backend_options: dict[str, Any]) -> Iterator[Any]:
            if backend_name != "asyncio":
                raise ClockConfigError(
                    f"simclock runs anyio tests on the asyncio backend, but this test's "
                    f"anyio_backend is {backend_name!r}; give it an anyio_backend fixture "
                    "returning 'asyncio'"
                )
            options = {**(backend_options or {}), "loop_factory": self.new_loop}
            with original(backend_name, options) as runner:
                yield runner

        anyio_plugin.get_runner = get_runner
        try:
            yield
        finally:
            anyio_plugin.get_runner = original

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        # pytest-asyncio and anyio run their own tests; an async test neither of them
        # claims (strict mode, no asyncio or anyio marker) runs here.
        if (
            not inspect.iscoroutinefunction(pyfuncitem.obj)
            or "anyio_backend" in pyfuncitem.funcargs
            or pyfuncitem.get_closest_marker("asyncio") is not None
            or not asks_for_the_clock(pyfuncitem)
        ):
            return None
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        with asyncio.Runner(loop_factory=self.new_loop) as runner:
            runner.run(pyfuncitem.obj(**arguments))
        return True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        options = self.options.get(item.nodeid)
        if report.failed and options is not None and options.seed is not None:
            nodeid = _replay_nodeid(item, options.seed)
            report.sections.append(
                (
                    "simclock",
                    f"failed under schedule seed {options.seed}; replay this exact run with:\n"
                    f"  pytest '{nodeid}' --simclock-seed {options.seed}\n"
                    f"or with the marker option @pytest.mark.simclock(seed={options.seed})",
                )
            )
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Runs where reports are gathered (the xdist controller too), so the summary
        # lists the failing seeds of every worker.
        if report.failed:
            for title, text in report.sections:
                if title == "simclock":
                    self._replays.append(text.splitlines()[1].strip())

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self._replays:
            terminalreporter.section("simclock: failing schedule seeds")
            for command in sorted(self._replays):
                terminalreporter.write_line(command)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        notes = [
            note
            for note in getattr(excinfo.value, "__notes__", ())
            if isinstance(note, str) and note.startswith("simclock: interrupted")
        ]
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for note in notes:
            if reporter is not None:
                reporter.write_line(note)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simclock", "simclock virtual clock")
    group.addoption(
        "--simclock",
        action="store_true",
        dest="simclock_all",
        default=False,
        help="run every async test of the session on simclock's virtual clock",
    )
    group.addoption(
        "--no-simclock",
        action="store_true",
        dest="simclock_off",
        default=False,
        help="ignore @pytest.mark.simclock: every test keeps its usual event loop",
    )
    group.addoption(
        "--simclock-seed",
        type=int,
        dest="simclock_seed",
        default=None,
        metavar="N",
        help="run virtual-clock tests under schedule seed N (replays a failing explore run)",
    )
    parser.addini(
        "simclock_max_duration_s",
        default=DEFAULT_MAX_DURATION_S,
        help="virtual seconds a virtual-clock test may last before it fails with the task "
        "list ('none' for no limit; default 86400, one virtual day)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    if config.getoption("simclock_seed") is not None and config.getoption("simclock_seed") < 0:
        raise pytest.UsageError("--simclock-seed: must be an int >= 0")
    max_duration_ns(config)  # a bad ini value fails the session at once
    plugin = SimclockPlugin(config)
    config.pluginmanager.register(plugin, SimclockPlugin.NAME)
    if config.getoption("simclock_all") and not config.getoption("simclock_off"):
        plugin.register_loop_factories_hook()
