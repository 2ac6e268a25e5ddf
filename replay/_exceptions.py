"""Errors raised by replay.

Every error derives from :class:`simclock.SimulationError`; errors about bad input also derive
from :class:`ValueError`.
"""

from __future__ import annotations

from typing import Any

from simclock import SimulationError

__all__ = (
    "ConfigError",
    "ReplayError",
    "ReplayFailedError",
    "ReplayInterrupted",
    "WorkloadValidationError",
)


class ReplayError(SimulationError):
    """Root of the errors raised by replay."""


class ConfigError(ReplayError, ValueError):
    """A replay configuration (file or flag) is malformed, or an option is past a documented
    limit; the text names the file (or flag) and the key: ``<where>: <problem>``."""


class WorkloadValidationError(ReplayError, ValueError):
    """A workload cannot be replayed: duplicate ids, unknown dependencies, bad lengths.

    The text is ``request '<id>': <field>: <problem>``.
    """


class ReplayFailedError(ReplayError):
    """A replay ended early because a step failed (a commit, an abort, a policy hook, a
    policy coroutine, an engine), it made no progress, or the loop failed (livelock,
    deadlock, stalled waiter).

    The failure is ``__cause__``. The run still produced its report: :attr:`result` holds it,
    with every request in exactly one terminal state (the failed one ``failed``).

    Attributes:
        result: the report of the run up to the failure (a ``ReplayResult``).
    """

    def __init__(self, message: str, *, result: Any) -> None:
        super().__init__(message)
        self.result = result


class ReplayInterrupted(KeyboardInterrupt):
    """A replay was interrupted (Ctrl-C, or SIGTERM on the command line) while it ran.

    Its tasks were cancelled and its loop closed; nothing was written.

    Attributes:
        virtual_time_ns: the virtual instant the run had reached.
    """

    def __init__(self, virtual_time_ns: int) -> None:
        super().__init__(f"interrupted at virtual time {virtual_time_ns / 1e9:.3f} s")
        self.virtual_time_ns = virtual_time_ns
