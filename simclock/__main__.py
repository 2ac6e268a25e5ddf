"""``python -m simclock``: the same command-line tool as the ``simclock`` script.

This module is the program entry point, not part of the library: it is the one place the
``simclock`` package reaches the ``replay`` package, which owns the command line.
"""

from __future__ import annotations

import sys

from replay._cli import main

if __name__ == "__main__":
    sys.exit(main())
