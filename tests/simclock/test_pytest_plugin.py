"""The pytest plugin, run as a user would: test files in a fresh directory, run by pytest."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ("pytester",)

INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def _write(pytester: pytest.Pytester, name: str, source: str) -> None:
    pytester.makepyfile(**{name: textwrap.dedent(source)})


def test_plugin_is_registered_through_the_pytest11_entry_point() -> None:
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="pytest11") if e.name == "simclock"]
    assert [e.value for e in found] == ["simclock._pytest_plugin"]


def test_marked_tests_run_on_the_virtual_loop_in_every_flavour(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_flavours",
        """
        import asyncio

        import anyio
        import pytest
        import pytest_asyncio

        import simclock


        @pytest_asyncio.fixture
        async def warmed_up():
            await asyncio.sleep(60)
            return asyncio.get_running_loop()


        @pytest.mark.simclock
        @pytest.mark.asyncio
        async def test_pytest_asyncio(warmed_up, virtual_clock):
            assert warmed_up is asyncio.get_running_loop()
            await asyncio.sleep(3600)
            virtual_clock.assert_elapsed(s=3660)


        @pytest.fixture
        def anyio_backend():
            return "asyncio"


        @pytest.fixture
        async def anyio_resource():
            await anyio.sleep(7)
            return asyncio.get_running_loop()


        @pytest.mark.simclock(start_s=100)
        @pytest.mark.anyio
        async def test_anyio(anyio_resource, virtual_clock):
            assert anyio_resource is asyncio.get_running_loop()
            await anyio.sleep(5)
            virtual_clock.assert_now(s=112)


        @pytest.mark.simclock(start_ns=5)
        async def test_plain_async_function(virtual_clock):
            await asyncio.sleep(1)
            assert virtual_clock.now_ns() == 1_000_000_005
        """,
    )
    result = project.runpytest("-v")
    result.assert_outcomes(passed=3)


def test_unmarked_tests_in_the_same_session_keep_the_stock_loop_and_real_sockets(
    project: pytest.Pytester,
) -> None:
    _write(
        project,
        "test_mixed",
        """
        import asyncio

        import anyio
        import pytest

        import simclock


        @pytest.mark.simclock
        @pytest.mark.asyncio
        async def test_marked():
            assert isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)


        async def _echo_round_trip():
            async def handle(reader, writer):
                writer.write(await reader.readline())
                await writer.drain()
                writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping\\n")
            line = await reader.readline()
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()
            return line


        @pytest.mark.asyncio
        async def test_unmarked_pytest_asyncio_uses_real_sockets():
            assert type(asyncio.get_running_loop()).__module__.startswith("asyncio")
            assert await _echo_round_trip() == b"ping\\n"


        @pytest.fixture
        def anyio_backend():
            return "asyncio"


        @pytest.mark.anyio
        async def test_unmarked_anyio_uses_real_sockets():
            assert not isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)
            assert await _echo_round_trip() == b"ping\\n"
        """,
    )
    project.runpytest().assert_outcomes(passed=3)


def test_class_and_module_markers_apply_and_the_closest_option_wins(
    project: pytest.Pytester,
) -> None:
    _write(
        project,
        "test_scopes",
        """
        import asyncio

        import pytest

        import simclock

        pytestmark = pytest.mark.simclock(start_s=10, livelock_budget=5000)


        @pytest.mark.asyncio
        async def test_module_marker(virtual_clock):
            virtual_clock.assert_now(s=10)
            assert asyncio.get_running_loop()._livelock_budget == 5000


        @pytest.mark.simclock(start_s=20)
        class TestClass:
            @pytest.mark.asyncio
            async def test_class_marker(self, virtual_clock):
                virtual_clock.assert_now(s=20)
                assert asyncio.get_running_loop()._livelock_budget == 5000

            @pytest.mark.simclock(start_s=30)
            @pytest.mark.asyncio
            async def test_own_marker(self, virtual_clock):
                virtual_clock.assert_now(s=30)
        """,
    )
    project.runpytest().assert_outcomes(passed=3)


def test_command_line_opts_every_async_test_in_and_out(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_switches",
        """
        import asyncio

        import pytest

        import simclock


        @pytest.mark.asyncio
        async def test_unmarked():
            print("VIRTUAL" if isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)
                  else "STOCK")


        @pytest.mark.simclock
        @pytest.mark.asyncio
        async def test_marked():
            print("VIRTUAL" if isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)
                  else "STOCK")
        """,
    )
    plain = project.runpytest("-s")
    plain.assert_outcomes(passed=2)
    assert plain.stdout.str().count("VIRTUAL") == 1
    opted_in = project.runpytest("-s", "--simclock")
    opted_in.assert_outcomes(passed=2)
    assert opted_in.stdout.str().count("VIRTUAL") == 2
    opted_out = project.runpytest("-s", "--no-simclock")
    opted_out.assert_outcomes(passed=2)
    assert opted_out.stdout.str().count("VIRTUAL") == 0


def test_a_deadlock_behind_a_heartbeat_fails_at_the_default_limit_with_the_task_list(
    project: pytest.Pytester,
) -> None:
    _write(
        project,
        "test_heartbeat",
        """
        import asyncio

        import pytest


        @pytest.mark.simclock
        @pytest.mark.asyncio
        async def test_waits_for_a_reply_that_never_comes():
            async def heartbeat():
                while True:
                    await asyncio.sleep(5)

            asyncio.create_task(heartbeat(), name="heartbeat")
            await asyncio.Event().wait()
        """,
    )
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*VirtualTimeLimitError: virtual time limit: the clock would jump from "
            "86400000000000 ns to the next event at 86405000000000 ns, past "
            "end_ns=86400000000000 (86400 s); 2 tasks are unfinished:",
            "*'Task-*' waits in test_waits_for_a_reply_that_never_comes -> Event.wait",
            "*'heartbeat' waits in test_waits_for_a_reply_that_never_comes.<locals>.heartbeat"
            " -> sleep",
        ]
    )


def test_the_default_limit_is_set_in_the_ini_file_and_end_s_overrides_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI + "simclock_max_duration_s = 60\n")
    _write(
        pytester,
        "test_limits",
        """
        import asyncio

        import pytest


        @pytest.mark.simclock
        @pytest.mark.asyncio
        async def test_ini_limit():
            await asyncio.sleep(61)


        @pytest.mark.simclock(end_s=120)
        @pytest.mark.asyncio
        async def test_marker_end_s():
            await asyncio.sleep(100)


        @pytest.mark.simclock(end_s=120)
        @pytest.mark.asyncio
        async def test_marker_end_s_passed():
            await asyncio.sleep(121)
        """,
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * from 0 ns to the next event at 61000000000 ns, past end_ns=60000000000 (60 s)*",
            "E * from 0 ns to the next event at 121000000000 ns, past end_ns=120000000000 (120 s)*",
        ]
    )


def test_a_bad_ini_limit_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI + "simclock_max_duration_s = soon\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*simclock_max_duration_s: must be a number of seconds > 0 or 'none', got 'soon'"]
    )


def test_bad_marker_options_fail_the_test_with_the_reason(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_bad",
        """
        import pytest


        @pytest.mark.simclock(start_minutes=3)
        @pytest.mark.asyncio
        async def test_unknown_option():
            pass


        @pytest.mark.simclock(stall_budget=0)
        @pytest.mark.asyncio
        async def test_bad_budget():
            pass
        """,
    )
    result = project.runpytest()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.simclock: @pytest.mark.simclock got an unknown option "
            "'start_minutes'; options: start_s, start_ns, end_s, stall_budget, "
            "livelock_budget, seed, explore, patch_time, strict_io",
            "*@pytest.mark.simclock: stall_budget must be an int >= 1 or None, got 0",
        ]
    )


def test_virtual_clock_fixture_refuses_a_test_off_the_clock(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_fixture",
        """
        import pytest


        @pytest.mark.asyncio
        async def test_unmarked(virtual_clock):
            pass
        """,
    )
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*the virtual_clock fixture needs a test on the virtual clock: mark it "
            "@pytest.mark.simclock or run pytest with --simclock"
        ]
    )


def test_the_conftest_recipe_keeps_working_beside_the_plugin(project: pytest.Pytester) -> None:
    project.makeconftest(
        """
        import pytest

        import simclock.testing


        def pytest_asyncio_loop_factories(config, item):
            return simclock.testing.loop_factories_for(item)
        """
    )
    _write(
        project,
        "test_recipe",
        """
        import asyncio

        import pytest

        import simclock


        @pytest.mark.asyncio(loop_factories=["simclock"])
        async def test_recipe():
            await asyncio.sleep(3600)
            assert simclock.now_ns() == 3600 * 10**9


        @pytest.mark.simclock(start_s=1)
        @pytest.mark.asyncio
        async def test_marker_under_the_recipe(virtual_clock):
            virtual_clock.assert_now(s=1)


        @pytest.mark.asyncio
        async def test_unmarked():
            assert not isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)
        """,
    )
    project.runpytest("-v").assert_outcomes(passed=3)


def test_plugin_works_under_xdist(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_workers",
        """
        import asyncio

        import pytest


        @pytest.mark.simclock
        @pytest.mark.asyncio
        @pytest.mark.parametrize("hours", [1, 2, 3, 4])
        async def test_hours(hours, virtual_clock):
            await asyncio.sleep(hours * 3600)
            virtual_clock.assert_elapsed(s=hours * 3600)
        """,
    )
    result = project.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_interrupting_a_marked_test_prints_the_virtual_time(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_interrupt",
        """
        import asyncio
        import os
        import signal

        import pytest


        @pytest.mark.simclock
        @pytest.mark.asyncio
        async def test_long_wait():
            loop = asyncio.get_running_loop()
            loop.call_later(90, os.kill, os.getpid(), signal.SIGINT)
            await asyncio.sleep(3600)
        """,
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "simclock: interrupted at virtual time 90000000000 ns (90.000000000 s), "
            "1 unfinished task:",
            "  'Task-*' waits in test_long_wait -> sleep",
        ]
    )


def test_an_explicit_loop_factories_choice_wins_over_the_marker(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_explicit",
        """
        import asyncio

        import pytest

        import simclock


        @pytest.mark.simclock
        @pytest.mark.asyncio(loop_factories=["asyncio"])
        async def test_asks_for_stock_asyncio():
            assert not isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)


        @pytest.mark.simclock(start_s=3)
        @pytest.mark.asyncio(loop_factories=["simclock"])
        async def test_asks_for_simclock_by_name(virtual_clock):
            virtual_clock.assert_now(s=3)
        """,
    )
    project.runpytest().assert_outcomes(passed=2)


def test_anyio_tests_need_the_asyncio_backend(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_backend",
        """
        import pytest


        @pytest.fixture
        def anyio_backend():
            return "trio"


        @pytest.mark.simclock
        @pytest.mark.anyio
        async def test_on_trio():
            pass
        """,
    )
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * simclock runs anyio tests on the asyncio backend, but this test's "
            "anyio_backend is 'trio'; give it an anyio_backend fixture returning 'asyncio'"
        ]
    )


def test_an_anyio_runner_held_by_a_wider_fixture_is_reported(project: pytest.Pytester) -> None:
    _write(
        project,
        "test_wide",
        """
        import pytest


        @pytest.fixture(scope="module")
        def anyio_backend():
            return "asyncio"


        @pytest.fixture(scope="module")
        async def shared():
            yield "shared"


        @pytest.mark.anyio
        async def test_first(shared):
            pass


        @pytest.mark.simclock
        @pytest.mark.anyio
        async def test_second(shared):
            pass
        """,
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*simclock: an anyio test runner made for a wider-scoped async fixture is still "
            "open, so this test cannot get a virtual loop; give the async fixtures it uses "
            "function scope"
        ]
    )


def test_a_session_without_asking_tests_never_sees_the_loop_factory_hook(
    project: pytest.Pytester,
) -> None:
    _write(
        project,
        "test_untouched",
        """
        import asyncio

        import pytest


        @pytest.mark.asyncio
        async def test_plain(pytestconfig):
            hook = pytestconfig.hook.pytest_asyncio_loop_factories
            names = [impl.plugin_name for impl in hook.get_hookimpls()]
            print("HOOKS", names)
        """,
    )
    untouched = project.runpytest("-s")
    untouched.assert_outcomes(passed=1)
    assert "HOOKS []" in untouched.stdout.str()
    opted_in = project.runpytest("-s", "--simclock")
    opted_in.assert_outcomes(passed=1)
    assert "HOOKS ['simclock-loop-factories']" in opted_in.stdout.str()
