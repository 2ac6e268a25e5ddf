"""Errors raised by the simulated engines.

Every error derives from :class:`simclock.SimulationError`; the ones that describe bad input
also derive from :class:`ValueError`.
"""

from __future__ import annotations

from simclock import SimulationError

__all__ = (
    "EngineClosedError",
    "EngineConfigError",
    "EngineError",
    "HandshakeError",
    "InvalidRequestError",
    "PassTimingError",
)


class EngineError(SimulationError):
    """Root of the errors raised by :mod:`engines` on purpose."""


class EngineConfigError(EngineError, ValueError):
    """An :class:`~engines.EngineConfig` field has a bad value."""


class InvalidRequestError(EngineError, ValueError):
    """A request cannot be offered to an engine (malformed, or already placed there)."""


class HandshakeError(EngineError, ValueError):
    """A handshake step does not match an open offer (committed twice, aborted, foreign)."""


class EngineClosedError(EngineError):
    """Work was offered to, committed to, or asked of an engine after :meth:`Engine.close`."""


class PassTimingError(EngineError, ValueError):
    """A timing model returned a duration that is not a finite number of ms ``>= 0``."""
