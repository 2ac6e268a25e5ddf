"""Setting and removing the breakpoints of a replay session (:class:`Breakpoint`); the
running methods of :mod:`replay._session_stepping` check them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from engines import EventKind

from ._session_core import SessionCore
from ._session_state import Breakpoint, event_kind, format_ns

if TYPE_CHECKING:
    from ._session import ReplaySession

__all__ = ("SessionBreakpoints",)


class SessionBreakpoints(SessionCore):
    """The breakpoint methods of :class:`replay.ReplaySession`."""

    __slots__ = ()

    def _add(self, bp: Breakpoint) -> Breakpoint:
        if bp.kind in ("request", "event"):
            self._need_history("event and request breakpoints")
        self._breakpoints.append(bp)
        self._next_number += 1
        return bp

    def break_at(self, time_ns: int | None = None, *, time_s: float | None = None) -> Breakpoint:
        """Stop when the clock reaches an instant (before anything at that instant runs).

        Args:
            time_ns: the instant in integer nanoseconds.
            time_s: the instant in seconds (instead of ``time_ns``).

        Returns:
            The breakpoint (it fires once).

        Raises:
            ValueError: neither or both given, or the instant is in the past.
        """
        if (time_ns is None) == (time_s is None):
            raise ValueError("give break_at exactly one of time_ns and time_s")
        when = time_ns if time_ns is not None else round(cast(float, time_s) * 1_000_000_000)
        if when < self.now_ns:
            raise ValueError(
                f"cannot break in the past: {when} ns is before now ({self.now_ns} ns)"
            )
        return self._add(
            Breakpoint(self._next_number, "time", f"at {format_ns(when)}", time_ns=when)
        )

    def break_on_request(self, request_id: str, *kinds: EventKind | str) -> Breakpoint:
        """Stop after any event of ``request_id`` (or only events of ``kinds``).

        Raises:
            ValueError: the request is not in the run, or a kind is unknown.
        """
        self._run_request(request_id)
        resolved = frozenset(event_kind(k) for k in kinds)
        names = "any event" if not resolved else "/".join(sorted(k.value for k in resolved))
        return self._add(
            Breakpoint(
                self._next_number,
                "request",
                f"request {request_id!r}: {names}",
                request_id=request_id,
                kinds=resolved,
            )
        )

    def break_on(self, *kinds: EventKind | str) -> Breakpoint:
        """Stop after any event of ``kinds``: e.g. ``"preemption"``, ``"rejection"``,
        ``"abort"`` (a dispatch abort), ``"failure"``, or any event kind value.

        Raises:
            ValueError: no kind given, or a kind is unknown.
        """
        if not kinds:
            raise ValueError("break_on needs at least one event kind")
        resolved = frozenset(event_kind(k) for k in kinds)
        names = "/".join(sorted(k.value for k in resolved))
        return self._add(Breakpoint(self._next_number, "event", names, kinds=resolved))

    def break_when(
        self, predicate: Callable[[ReplaySession], bool], *, description: str = "a predicate"
    ) -> Breakpoint:
        """Stop before a callback at which ``predicate(session)`` has become true.

        The breakpoint fires the first time the predicate holds, then again each time it
        turns from false to true. It runs before every callback: keep it cheap.
        """
        return self._add(
            Breakpoint(self._next_number, "predicate", description, predicate=predicate)
        )

    @property
    def breakpoints(self) -> tuple[Breakpoint, ...]:
        """The breakpoints set, in creation order."""
        return tuple(self._breakpoints)

    def delete(self, bp: Breakpoint | int) -> None:
        """Remove a breakpoint (or the one with that number).

        Raises:
            ValueError: no such breakpoint.
        """
        number = bp if isinstance(bp, int) else bp.number
        for existing in self._breakpoints:
            if existing.number == number:
                self._breakpoints.remove(existing)
                return
        raise ValueError(f"no breakpoint {number}")

    def clear_breakpoints(self) -> None:
        """Remove every breakpoint."""
        self._breakpoints.clear()
