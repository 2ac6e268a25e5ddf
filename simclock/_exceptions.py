"""The error hierarchy of simclock.

Every error simclock and its sibling packages raise on purpose derives from
:class:`SimulationError`. Leaves that describe bad input also derive from the builtin
they resemble (``ValueError``), so ``except ValueError`` keeps working for callers
that do not know about simclock.
"""

from __future__ import annotations

__all__ = ("InternalError", "SimulationError")


class SimulationError(Exception):
    """Root of every error raised on purpose by simclock and its sibling packages."""


class InternalError(SimulationError):
    """An internal invariant broke: a bug in simclock, never a user mistake.

    Raised instead of ``assert`` so that ``python -O`` cannot remove the check.
    """
