"""``python -m simclock`` and the ``simclock`` script: the command-line tool.

This module is the program entry point, not part of the library. The clock package knows
nothing of the packages built on it: the command line is whatever the installed distribution
registers in the ``simclock.cli`` entry-point group (``simclock = "replay._cli:main"`` in
``pyproject.toml``). :func:`main` loads it so that Ctrl-C or SIGTERM while it loads ends the
program as quietly as during a replay (one line, exit status 130 or 143, no traceback).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

#: The entry-point group naming the command line, and the name it is registered under.
COMMAND_LINE_GROUP = "simclock.cli"
COMMAND_LINE_NAME = "simclock"


class NoCommandLineError(Exception):
    """No installed distribution registers a command line."""


def load_command_line() -> Callable[[], int]:
    """The command line's ``main`` registered in :data:`COMMAND_LINE_GROUP`.

    Raises:
        NoCommandLineError: no installed distribution registers one.
    """
    from importlib.metadata import entry_points  # kept off the import path of the module

    found = entry_points(group=COMMAND_LINE_GROUP, name=COMMAND_LINE_NAME)
    for entry in found:
        command_line: Callable[[], int] = entry.load()
        return command_line
    raise NoCommandLineError(
        f"no command line is registered in the {COMMAND_LINE_GROUP!r} entry-point group "
        "(install the package: python -m pip install .)"
    )


def main() -> int:
    """Load and run the command line; return the process exit status."""
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_signal)
    previous_int = signal.signal(signal.SIGINT, on_signal)
    try:
        try:
            # Deferred on purpose: the command line imports every package (numpy among
            # them), and an interrupt during that import must not print a traceback. A
            # package's own import code may turn the interrupt into another error (numpy
            # reports an ImportError): any failure after a signal is that signal.
            run_command_line = load_command_line()
        except NoCommandLineError as exc:
            signal.signal(signal.SIGINT, previous_int)
            print(f"simclock: {exc}", file=sys.stderr)
            return 2
        except BaseException as exc:
            if not received and not isinstance(exc, KeyboardInterrupt):
                signal.signal(signal.SIGINT, previous_int)
                raise
            if not received:
                signal.signal(signal.SIGINT, previous_int)
            # Otherwise the handler stays: an import interrupted in C code may deliver the
            # signal again.
            terminated = bool(received) and received[0] == signal.SIGTERM
            print(
                f"simclock: {'terminated' if terminated else 'interrupted'} while starting",
                file=sys.stderr,
            )
            return 143 if terminated else 130
        signal.signal(signal.SIGINT, previous_int)
        return run_command_line()
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
