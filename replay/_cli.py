"""The ``simclock`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from simclock import __version__

__all__ = ("main",)


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="simclock",
        description=(
            "Replay LLM-serving workloads through simulated inference engines and async "
            "routing policies on a deterministic virtual clock."
        ),
    )
    parser.add_argument("--version", action="version", version=f"simclock {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stdout)
        return 0
    return 0
