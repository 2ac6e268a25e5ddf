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
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            # Deferred on purpose: the command line imports every package (numpy among
            # them), and an interrupt during that import must not print a traceback.
            from replay._cli import main as run_command_line
        except KeyboardInterrupt:
            what = "terminated" if received else "interrupted"
            print(f"simclock: {what} while starting", file=sys.stderr)
            return 143 if received else 130
        return run_command_line()
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
