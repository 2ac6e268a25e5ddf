"""``python -m simclock`` and the ``simclock`` script: the command-line tool.

This module is the program entry point, not part of the library: it is the one place the
``simclock`` package reaches the ``replay`` package, which owns the command line. It loads the
command line inside :func:`main`, so that Ctrl-C or SIGTERM while it loads ends the program
as quietly as during a replay (one line, exit status 130 or 143, no traceback).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


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
            from replay._cli import main as run_command_line
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
