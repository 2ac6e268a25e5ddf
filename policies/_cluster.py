"""The engines a policy runtime places on: stable ids, and which of them accept placements.

Every engine has a stable id (:attr:`engines.EngineView.id`): the engines a run starts with
are ``0 .. n-1`` in topology order, an engine added later takes the next unused number, and
an id is never reused. Per id, an engine is in one of three states::

    active ──drain──► draining ──remove (once idle)──► removed
      └───────────────remove (idle)───────────────────────┘

- ``active``: accepts placements; its view is in ``ctx.engines``.
- ``draining``: accepts no new placement but finishes what it has. An offer to it is refused
  with the reason :data:`ENGINE_DRAINING`, as an engine refuses a request it cannot hold; an
  offer opened before the drain may still be committed (the engine accepted it tentatively
  while active) or aborted. Its view stays readable by id (``PolicyRuntime.view``), not in
  ``ctx.engines``.
- ``removed``: gone for good; an offer to it is refused with the reason
  :data:`ENGINE_REMOVED`. Its id stays in reports and is never given to another engine.

Every offer refused because of an engine's state, and every commit made on an engine no
longer active, is kept in :attr:`Membership.inactive` (an :class:`InactivePlacement` each):
a policy that ignores drains is caught by checking that it is empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

import attrs

from engines import EngineView

from ._exceptions import PlacementError

if TYPE_CHECKING:
    from ._runtime import EngineHandle

__all__ = (
    "ENGINE_CRASHED",
    "ENGINE_DRAINING",
    "ENGINE_REMOVED",
    "ENGINE_STATES",
    "EngineFailure",
    "InactivePlacement",
    "MemberState",
    "Membership",
)

MemberState = Literal["active", "draining", "removed"]
"""An engine's state in a cluster (see the module docstring)."""

ENGINE_STATES: tuple[MemberState, ...] = ("active", "draining", "removed")
"""Every engine state, in lifecycle order."""

ENGINE_DRAINING = "engine_draining"
"""The reason of an offer refused because its engine is draining."""

ENGINE_REMOVED = "engine_removed"
"""The reason of an offer refused because its engine was removed."""

ENGINE_CRASHED = "engine_crashed"
"""The reason of everything a crashed engine had: offers withdrawn, requests given back to
the policy (``REQUEUED``) or failed (``FAILED``)."""


@attrs.frozen
class EngineFailure:
    """An engine crashed (``on_engine_failed``): it is removed, and lost what it had.

    Attributes:
        time_ns: the instant of the crash.
        engine: the crashed engine's id (never reused).
        requests: the requests it had (waiting, running, held, reserved), in the order they
            were committed there; their KV is lost.
        requeued: True when they went back to the policy's request stream (to be placed
            again, like new requests, keeping their ids); False when they failed (status
            ``failed``, reason :data:`ENGINE_CRASHED`).
        offers: the requests whose open offers on it were withdrawn (``on_aborted`` with
            reason :data:`ENGINE_CRASHED`; they are held by the policy again).
    """

    time_ns: int
    engine: int
    requests: tuple[str, ...]
    requeued: bool
    offers: tuple[str, ...] = ()


@attrs.frozen
class InactivePlacement:
    """An offer or a commit that reached an engine not accepting placements.

    Attributes:
        time_ns: the virtual instant.
        request_id: the request.
        engine: the engine's id.
        state: the engine's state then (``"draining"`` or ``"removed"``).
        outcome: ``"refused"`` (an offer, refused: nothing was placed) or ``"committed"`` (the
            commit of an offer opened while the engine was active: the request was placed).
    """

    time_ns: int
    request_id: str
    engine: int
    state: MemberState
    outcome: Literal["refused", "committed"] = "refused"

    @property
    def reason(self) -> str:
        """The refusal's reason (:data:`ENGINE_DRAINING` or :data:`ENGINE_REMOVED`)."""
        return ENGINE_DRAINING if self.state == "draining" else ENGINE_REMOVED


@attrs.define(eq=False)
class Membership:
    """The engines of one policy runtime by stable id, with their states.

    Attributes:
        accepting: the handles of the active engines, by id, in id order.
        views: the views of the active engines, in id order (``ctx.engines``).
        inactive: every offer refused, and every commit made, on an engine not active, in
            order.
    """

    _handles: dict[int, EngineHandle] = attrs.field(factory=dict, init=False)
    _states: dict[int, MemberState] = attrs.field(factory=dict, init=False)
    accepting: dict[int, EngineHandle] = attrs.field(factory=dict, init=False)
    views: tuple[EngineView, ...] = attrs.field(default=(), init=False)
    inactive: list[InactivePlacement] = attrs.field(factory=list, init=False)

    @classmethod
    def of(cls, handles: Iterable[EngineHandle]) -> Membership:
        """The membership of ``handles``, all active.

        Raises:
            PlacementError: the ids do not increase strictly.
        """
        membership = cls()
        for position, handle in enumerate(handles):
            last = next(reversed(membership._handles), None)
            if last is not None and handle.index <= last:
                raise PlacementError(
                    f"engine at position {position} has index {handle.index}; "
                    "engines must be given in index order"
                )
            membership._enter(handle)
        membership._refresh()
        return membership

    def _enter(self, handle: EngineHandle) -> None:
        self._handles[handle.index] = handle
        self._states[handle.index] = "active"
        self.accepting[handle.index] = handle

    def _refresh(self) -> None:
        self.views = tuple(handle.view for handle in self.accepting.values())

    # -- reading ------------------------------------------------------------------------

    def handle(self, engine: int) -> EngineHandle | None:
        """The handle of engine ``engine`` in any state, or None if it never was a member."""
        return self._handles.get(engine)

    def state(self, engine: int) -> MemberState | None:
        """The state of engine ``engine``, or None if it never was a member."""
        return self._states.get(engine)

    def ids(self) -> tuple[int, ...]:
        """Every member's id, removed ones too, in id order."""
        return tuple(self._handles)

    def unknown(self, engine: object) -> PlacementError:
        """The error for an id that names no member."""
        ids = list(self._handles)
        if ids == list(range(len(ids))):
            known = f"0..{len(ids) - 1}"
        else:
            known = ", ".join(map(str, ids)) or "none"
        return PlacementError(f"unknown engine {engine!r}; engines are {known}")

    # -- changing -----------------------------------------------------------------------

    def add(self, handle: EngineHandle) -> None:
        """Add an active engine whose id is higher than every member's.

        Raises:
            PlacementError: the id is not higher than every member's.
        """
        last = next(reversed(self._handles), None)
        if last is not None and handle.index <= last:
            raise PlacementError(
                f"engine {handle.index} cannot join: ids are never reused and must increase "
                f"(the last is {last})"
            )
        self._enter(handle)
        self._refresh()

    def set_state(self, engine: int, state: MemberState) -> EngineHandle:
        """Move engine ``engine`` to ``state`` (``"draining"`` or ``"removed"``).

        Returns:
            The engine's handle.

        Raises:
            PlacementError: no such engine, or it was removed already.
        """
        handle = self._handles.get(engine)
        if handle is None:
            raise self.unknown(engine)
        if self._states[engine] == "removed":
            raise PlacementError(f"engine {engine} was removed")
        self._states[engine] = state
        if self.accepting.pop(engine, None) is not None:
            self._refresh()
        return handle
