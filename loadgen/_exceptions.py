"""Errors raised by loadgen.

Every error derives from :class:`simclock.SimulationError`; errors about bad input also
derive from :class:`ValueError`.
"""

from __future__ import annotations

from simclock import SimulationError

__all__ = ("SLOError", "TraceFormatError", "WorkloadConfigError", "WorkloadRunError")


class TraceFormatError(SimulationError, ValueError):
    """A trace file holds a record that breaks its format (REFERENCE-workloads §0).

    The text is exactly ``<file>:<line>: <field>: <problem>``: ``<file>`` is the path as
    given (a tar member is ``<archive>!<member>``), ``<line>`` the 1-based physical line
    (a JSON object's first line; a CSV header is line 1), ``<field>`` a JSON path such as
    ``requests[3].t`` or ``-`` for the whole line.

    Attributes:
        file: the file name as given.
        line: the 1-based line number.
        field: the offending field, ``-`` for the whole line.
        problem: what is wrong.
    """

    def __init__(self, file: str, line: int, field: str, problem: str) -> None:
        super().__init__(f"{file}:{line}: {field}: {problem}")
        self.file = file
        self.line = line
        self.field = field
        self.problem = problem


class WorkloadConfigError(SimulationError, ValueError):
    """An option, a synthetic workload spec or a load-mode setting is invalid.

    The text is ``<option>: <problem>``, e.g. ``speedup: not allowed with concurrency``.
    """


class WorkloadRunError(SimulationError):
    """The workload driver cannot go on, e.g. a warm-up request failed (§5.6)."""


class SLOError(SimulationError, ValueError):
    """An SLO specification is malformed (unknown metric, bad number, repeated key)."""
