"""Going back in a replay session: the stops it made, and how a fresh run finds one again.

A run cannot be copied (its engines and policy are coroutines), but it is deterministic: the
same inputs replayed from the start pass through the same states. So a session keeps a
*trail*, one :class:`Position` per stop it made, and goes back by re-executing a fresh run
of the same inputs up to the position (:meth:`replay.ReplaySession.back`,
:meth:`replay.ReplaySession.goto`).

A position is found again in two phases:

1. *fast forward*: up to :attr:`Position.switch_ns` the fresh run is watched for the
   lifecycle events a session keeps (every kind but per-token events), so the engines
   keep macro-stepping (docs/explanation/macro-stepping.md), nearly at the speed of
   :func:`replay.run`; ``switch_ns`` is the earliest start of a pass in flight at the
   stop, so that every pass the stop could see is a pass of the second phase;
2. *observed*: from there the run is watched as the session watched it (per-token events
   too, so one engine deadline per pass) up to the same instant and the same number of
   loop callbacks run at that instant.

The position is then checked (instant, callbacks at the instant, lifecycle events seen); a
mismatch, which would mean a macro-stepped stretch scheduled its callbacks differently,
makes the session re-execute with every event observed from the start instead, which finds
the position exactly. A session that records a timeline always re-executes observed from the
start: the timeline needs every per-token event.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs

from engines import EventKind

__all__ = ("NON_TOKEN_KINDS", "Position", "pristine_options")

NON_TOKEN_KINDS: tuple[EventKind, ...] = tuple(k for k in EventKind if k is not EventKind.TOKEN)
"""The kinds a fast forward watches: what a session keeps of every request."""


@attrs.frozen
class Position:
    """Where a session stopped, as a re-execution of the run finds it again.

    Attributes:
        time_ns: the virtual instant.
        callbacks: loop callbacks run at that instant before the stop (0: nothing at the
            instant has run yet, as after ``run_until(time_ns)``).
        events: lifecycle events other than per-token ones the session had seen.
        switch_ns: from this instant on, a re-execution observes every event (see the
            module docstring).
        finished: the run was over.
    """

    time_ns: int
    callbacks: int
    events: int
    switch_ns: int
    finished: bool = False

    def before(self, other: Position) -> bool:
        """Whether this position comes earlier in a run than ``other``."""
        if self.finished or other.finished:
            return other.finished and not self.finished
        return (self.time_ns, self.callbacks) < (other.time_ns, other.callbacks)


START = Position(0, 0, 0, 0)


def pristine_options(options: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A deep copy of a run's options taken before the run starts, for re-executions.

    The policy (and any other stateful component) is copied before it has seen a request, so
    each re-execution gets a fresh copy of the same starting state.

    Returns:
        ``(copy, None)``, or ``(None, why)`` when the run cannot be re-executed.
    """
    if options.get("request_log") is not None:
        return None, "the run streams its records to a request_log (files cannot be rewound)"
    try:
        return copy.deepcopy(options), None
    except Exception as error:
        return None, f"its options cannot be copied ({type(error).__name__}: {error})"
