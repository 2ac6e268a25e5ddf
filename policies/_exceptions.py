"""Errors raised by policies and by the dispatch handshake.

Every error derives from :class:`simclock.SimulationError`; errors about bad input (a wrong
engine index, a stale or non-finite wakeup, a request dispatched twice) also derive from
:class:`ValueError`.
"""

from __future__ import annotations

from simclock import SimulationError

__all__ = (
    "CommitError",
    "InvalidWakeupError",
    "PlacementError",
    "PolicyError",
    "PolicyHookError",
    "RuntimePoisonedError",
)


class PolicyError(SimulationError):
    """Root of the errors raised by the policy runtime."""


class PlacementError(PolicyError, ValueError):
    """A dispatch call is invalid: unknown engine, unknown request, or a request that is
    already placed or already has an open offer."""


class InvalidWakeupError(PolicyError, ValueError):
    """A policy asked to wake up at a non-integer, negative, or past virtual instant.

    The text names the policy, the requested instant and the current one.
    """


class CommitError(PolicyError):
    """An engine failed to commit a tentative placement.

    The engine has rolled the placement back. The original error is ``__cause__``; every
    error raised while cleaning up (the policy's abort hook) is kept in
    :attr:`cleanup_errors` and named in a note, never swallowed.

    Attributes:
        request_id: the request whose commit failed.
        engine: the index of the engine that failed.
        cleanup_errors: errors raised during cleanup, in the order they happened.
    """

    def __init__(
        self,
        message: str,
        *,
        request_id: str,
        engine: int,
        cleanup_errors: tuple[BaseException, ...] = (),
    ) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.engine = engine
        self.cleanup_errors = cleanup_errors
        for error in cleanup_errors:
            self.add_note(f"during cleanup: {type(error).__name__}: {error}")


class PolicyHookError(PolicyError):
    """A policy hook (``on_committed``, ``on_aborted``, ``on_finished``, ``on_kv_event``)
    raised. The hook's error is ``__cause__``.

    Attributes:
        hook: the hook's name.
    """

    def __init__(self, message: str, *, hook: str) -> None:
        super().__init__(message)
        self.hook = hook


class RuntimePoisonedError(PolicyError):
    """The policy runtime failed earlier; no further step is allowed.

    The failure that poisoned the runtime is ``__cause__``.
    """
