"""``import simclock`` loads nothing heavy: the command line takes over Ctrl-C and SIGTERM
before asyncio, numpy or any other package of the simulator loads."""

from __future__ import annotations

import subprocess
import sys

import pytest

import simclock


def _modules_after(statement: str) -> list[str]:
    probe = (
        f"{statement}; import sys; "
        "print(' '.join(m for m in ('asyncio', 'numpy', 'structlog', 'anyio', 'replay', "
        "'engines', 'loadgen', 'policies') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_importing_the_package_or_its_entry_module_loads_nothing_heavy() -> None:
    assert _modules_after("import simclock") == []
    assert _modules_after("import simclock.__main__") == []


def test_public_names_load_on_first_use_and_stay() -> None:
    loop_class = simclock.VirtualEventLoop
    assert loop_class.__module__ == "simclock._loop"
    assert vars(simclock)["VirtualEventLoop"] is loop_class
    assert "now_ns" in dir(simclock)
    loaded = _modules_after("import simclock; simclock.now_ns")
    assert "asyncio" in loaded and "replay" not in loaded and "engines" not in loaded


def test_the_entry_module_finds_the_command_line_by_its_entry_point() -> None:
    import simclock.__main__ as entry
    from replay._cli import main

    assert entry.load_command_line() is main  # registered in pyproject.toml, not imported


def test_without_a_registered_command_line_the_entry_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.metadata

    import simclock.__main__ as entry

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kwargs: ())
    assert entry.main() == 2
    assert capsys.readouterr().err == (
        "simclock: no command line is registered in the 'simclock.cli' entry-point group "
        "(install the package: python -m pip install .)\n"
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        simclock.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert str(exc) == "module 'simclock' has no attribute 'no_such_name'"
    else:
        raise AssertionError("no AttributeError")


def test_a_signal_while_the_command_line_loads_is_one_line_even_if_an_import_turns_it_into_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import signal
    import time

    import simclock.__main__ as entry

    def importing() -> object:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler interrupts this
        except KeyboardInterrupt:
            # what numpy does when its C import is interrupted
            raise ImportError("PyCapsule_Import could not import module 'datetime'") from None
        raise AssertionError("not interrupted")

    monkeypatch.setattr(entry, "load_command_line", importing)
    try:
        assert entry.main() == 130
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert capsys.readouterr().err == "simclock: interrupted while starting\n"
