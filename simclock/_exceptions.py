"""The error hierarchy of simclock.

Every error simclock and its sibling packages raise on purpose derives from
:class:`SimulationError`. Leaves that describe bad input also derive from the builtin
they resemble (``ValueError``), so ``except ValueError`` keeps working for callers
that do not know about simclock.
"""

from __future__ import annotations

__all__ = (
    "BlockingCallError",
    "ClockConfigError",
    "ClockRangeError",
    "DeadlockError",
    "InternalError",
    "LivelockError",
    "NonFiniteWakeupError",
    "NotVirtualLoopError",
    "RealIOError",
    "RealThreadError",
    "SimulationError",
    "StaleWakeupError",
    "StalledWaiterError",
    "VirtualTimeLimitError",
    "WakeupError",
)


class SimulationError(Exception):
    """Root of every error raised on purpose by simclock and its sibling packages."""


class InternalError(SimulationError):
    """An internal invariant broke: a bug in simclock, never a user mistake.

    Raised instead of ``assert`` so that ``python -O`` cannot remove the check.
    """


class ClockConfigError(SimulationError, ValueError):
    """A virtual event loop option is out of range (for example a negative budget)."""


class NotVirtualLoopError(SimulationError, RuntimeError):
    """A simclock clock function was called without a running :class:`VirtualEventLoop`."""


class WakeupError(SimulationError):
    """A wakeup request on the virtual clock was refused.

    Attributes:
        waiter: who asked to wake up.
        requested: the requested instant or delay, as given (an ``int`` of nanoseconds or a
            ``float`` of seconds).
        now_ns: the virtual time when the request was made, in nanoseconds.
    """

    def __init__(self, message: str, *, waiter: str, requested: object, now_ns: int) -> None:
        super().__init__(message)
        self.waiter = waiter
        self.requested = requested
        self.now_ns = now_ns


class NonFiniteWakeupError(WakeupError, ValueError):
    """A wakeup was requested at a non-finite instant or after a non-finite delay (NaN, ±inf)."""


class StaleWakeupError(WakeupError, ValueError):
    """A wakeup was requested at an instant earlier than the current virtual time."""


class ClockRangeError(WakeupError, ValueError):
    """A wakeup was requested past the end of the clock's range.

    Virtual time is an int64 count of nanoseconds: no instant after ``2**63 - 1`` ns (about
    292 years) exists. A wakeup at ``+inf`` is not past the range: it never fires.
    """


class StalledWaiterError(WakeupError, RuntimeError):
    """One waiter asked for the current instant more often than the stall budget allows.

    The clock cannot advance while a waiter keeps asking to wake up "now", so the run is
    stuck at one instant; this error turns that into a failure at the offending call.
    """


class LivelockError(SimulationError, RuntimeError):
    """The loop ran more events at one virtual instant than the livelock budget allows.

    Attributes:
        now_ns: the virtual instant the loop was stuck at.
        busiest: ``(label, events)`` pairs of the busiest waiters in the diagnostic window,
            busiest first.
    """

    def __init__(self, message: str, *, now_ns: int, busiest: tuple[tuple[str, int], ...]) -> None:
        super().__init__(message)
        self.now_ns = now_ns
        self.busiest = busiest


class DeadlockError(SimulationError, RuntimeError):
    """Nothing is ready, no timer is pending and the run has not finished.

    Attributes:
        now_ns: the virtual instant the loop stopped at.
        blocked: one line per blocked task, naming the task and what it waits on.
    """

    def __init__(self, message: str, *, now_ns: int, blocked: tuple[str, ...]) -> None:
        super().__init__(message)
        self.now_ns = now_ns
        self.blocked = blocked


class RealIOError(SimulationError, RuntimeError):
    """Real I/O was requested from a virtual event loop, where it has no meaning.

    Attributes:
        call: the name of the refused loop method, e.g. ``"create_connection"``.
    """

    def __init__(self, call: str) -> None:
        super().__init__(
            f"VirtualEventLoop.{call}() is real I/O, which has no meaning on a virtual clock; "
            "replace it with an in-memory fake (for example an asyncio.Queue)"
        )
        self.call = call


class VirtualTimeLimitError(SimulationError, RuntimeError):
    """The clock would pass the run's end of virtual time (``end_s`` / ``end_ns``).

    Raised instead of advancing the clock, so a run kept alive by a periodic task (a
    heartbeat hiding a deadlock) fails instead of running for ever.

    Attributes:
        now_ns: the virtual instant the loop stopped at.
        end_ns: the end of virtual time the run was given.
        next_ns: the instant of the next pending event, past ``end_ns``.
        blocked: one line per unfinished task, naming the task and what it waits on.
    """

    def __init__(
        self, message: str, *, now_ns: int, end_ns: int, next_ns: int, blocked: tuple[str, ...]
    ) -> None:
        super().__init__(message)
        self.now_ns = now_ns
        self.end_ns = end_ns
        self.next_ns = next_ns
        self.blocked = blocked


class RealThreadError(SimulationError, RuntimeError):
    """A real thread tried to call into a virtual event loop.

    Threads run in real time, which the virtual clock never waits for: a callback handed
    over from another thread (``call_soon_threadsafe``, ``asyncio.run_coroutine_threadsafe``,
    ``anyio.from_thread``) would land at an instant that depends on the machine's speed.

    Attributes:
        call: the refused call, e.g. ``"call_soon_threadsafe(Future.set_result)"``.
        thread: the name of the calling thread.
    """

    def __init__(self, message: str, *, call: str, thread: str) -> None:
        super().__init__(message)
        self.call = call
        self.thread = thread


class BlockingCallError(SimulationError, RuntimeError):
    """A blocking real-time call was made inside a virtual run that refuses it.

    Raised by ``time.sleep`` while the wall-clock functions read the virtual clock
    (``patch_time``), and by blocking socket connects and subprocesses in strict mode.

    Attributes:
        call: the refused call, e.g. ``"time.sleep(0.5)"``.
        caller: where it was called from, as ``file:line in function``.
    """

    def __init__(self, message: str, *, call: str, caller: str) -> None:
        super().__init__(message)
        self.call = call
        self.caller = caller
