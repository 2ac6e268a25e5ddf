"""The run's cluster: its engines by stable id, and how they join, drain and leave.

A :class:`Cluster` holds every engine of a run, by stable id, and changes the set at virtual
instants. Per engine (the policy side's states, :mod:`policies._cluster`, after a cold start
that only the cluster sees)::

    starting ──(cold start over)──► active ──drain──► draining ──(idle, removal asked)──► removed
       │                               └──────────remove (idle at once)──────────────────────┘
       └──drain or remove (it never served)──────────────────────────────────────────────────┘

1. Ids: the topology's engines are ``0 .. n-1`` in topology order; an added engine takes the
   next unused number. An id is never reused; a removed engine stays in the report under it.
2. :meth:`Cluster.add_engine` at instant ``t`` builds the engine (the topology's spec, or the
   one given), starts its coroutine, and the policy sees it in ``ctx.engines`` from ``t``
   (hook ``on_engine_added``). It serves from ``t``, or, with a cold start ``c > 0`` (the
   ``cold_start_s`` run option), it is ``starting`` from ``t`` and joins (coroutine started,
   seen by the policy) at ``t + c``; a starting engine that is drained or removed leaves at
   once, having served nothing.
3. :meth:`Cluster.drain` at ``t``: from ``t`` the engine accepts no new placement (an offer
   is refused with reason ``"engine_draining"``; hook ``on_engine_draining``); it finishes
   what it has, and stays a member until removed.
4. :meth:`Cluster.remove` at ``t``: an idle engine (nothing placed on it, no open offer) is
   removed at ``t``; a busy one is drained (if it is not already) and removed at the instant
   it becomes idle (hook ``on_engine_removed``). Its coroutine then ends.
5. :meth:`Cluster.fail` at ``t``: the engine crashes: it is removed at ``t`` whatever it
   had, which is lost (its requests go back to the policy or fail, as the caller says; see
   :mod:`replay._faults`).
6. Changes are made on the run's loop, from a coroutine or callback of the run (a
   ``cluster_tasks`` coroutine, the ``cluster_events`` schedule); they take effect at once,
   at the current instant, in the order they are made.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import attrs

import simclock
from engines import Engine, EngineConfig, TimingModel
from policies import EngineFailure, InactivePlacement

from ._exceptions import ReplayError

__all__ = (
    "CLUSTER_ACTIONS",
    "CLUSTER_STATES",
    "Cluster",
    "ClusterAction",
    "ClusterError",
    "ClusterEvent",
    "ClusterState",
    "ElasticRuntime",
    "EngineInterval",
    "EngineSpec",
    "FailingRuntime",
    "check_events",
)

ClusterAction = Literal["add", "drain", "remove"]
"""What a :class:`ClusterEvent` does."""

CLUSTER_ACTIONS: tuple[str, ...] = get_args(ClusterAction)
"""Every cluster action."""

ClusterState = Literal["starting", "active", "draining", "removed"]
"""An engine's state in the cluster: the policy side's states (:data:`policies.MemberState`)
and ``"starting"``, an added engine's cold start, which only the cluster sees."""

CLUSTER_STATES: tuple[ClusterState, ...] = ("starting", "active", "draining", "removed")
"""Every cluster state, in lifecycle order."""

_NS_PER_S = 1_000_000_000


class ClusterError(ReplayError, ValueError):
    """A cluster change is invalid: an unknown or removed engine, a pool the topology does not
    have, a topology that cannot add engines, or a change made off the run's loop."""


@attrs.frozen(kw_only=True)
class EngineSpec:
    """What an added engine is: its configuration and its timing model.

    Attributes:
        config: the engine's knobs (its ``role`` names its pool in a P/D topology).
        timing: its pass-timing model.
    """

    config: EngineConfig
    timing: TimingModel


def _check_event(instance: ClusterEvent, attribute: attrs.Attribute[Any], value: object) -> None:
    name = attribute.name
    if name == "at_s":
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ClusterError(f"at_s: must be a finite number >= 0, got {value!r}")
    elif name == "action":
        if value not in CLUSTER_ACTIONS:
            raise ClusterError(
                f"action: must be one of {', '.join(map(repr, CLUSTER_ACTIONS))}, got {value!r}"
            )
    elif name == "engine":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ClusterError(f"engine: must be an int id, got {value!r}")
    elif name == "pool" and value is not None and not isinstance(value, str):
        raise ClusterError(f"pool: must be a string, got {value!r}")


@attrs.frozen(kw_only=True)
class ClusterEvent:
    """One change of a declared cluster schedule (the ``cluster_events`` run option).

    Attributes:
        at_s: the virtual instant, seconds.
        action: ``"add"`` (an engine of the topology's spec joins; ``pool`` names its pool in
            a P/D topology), ``"drain"`` or ``"remove"`` (engine ``engine``).
        engine: the engine's id, for ``drain`` and ``remove``.
        pool: ``"prefill"`` or ``"decode"`` for ``add`` in a P/D topology; else None.

    Raises:
        ClusterError: a field has a bad value, ``engine`` is missing for a drain or removal,
            or given for an addition.
    """

    at_s: float = attrs.field(validator=_check_event)
    action: ClusterAction = attrs.field(validator=_check_event)
    engine: int | None = attrs.field(default=None, validator=_check_event)
    pool: str | None = attrs.field(default=None, validator=_check_event)

    def __attrs_post_init__(self) -> None:
        if self.action == "add" and self.engine is not None:
            raise ClusterError("engine: an added engine gets the next id; do not give one")
        if self.action != "add" and self.engine is None:
            raise ClusterError(f"engine: {self.action} needs the id of an engine")
        if self.action != "add" and self.pool is not None:
            raise ClusterError(f"pool: only an added engine has a pool, not a {self.action}")

    @property
    def at_ns(self) -> int:
        """The instant in integer nanoseconds."""
        return round(self.at_s * _NS_PER_S)

    def as_dict(self) -> dict[str, object]:
        """The event as JSON-compatible values, without the fields left at None."""
        out: dict[str, object] = {"at_s": self.at_s, "action": self.action}
        if self.engine is not None:
            out["engine"] = self.engine
        if self.pool is not None:
            out["pool"] = self.pool
        return out


def check_events(events: Sequence[ClusterEvent], initial: int) -> tuple[ClusterEvent, ...]:
    """The schedule in the order it is applied (by instant, then as given), checked against
    a cluster that starts with engines ``0 .. initial-1``.

    Raises:
        ClusterError: ``cluster_events[i]: ...`` for an event naming an engine that does not
            exist then, or was removed earlier.
    """
    order = sorted(range(len(events)), key=lambda i: events[i].at_ns)
    next_id = initial
    removed: set[int] = set()
    for i in order:
        event = events[i]
        if not isinstance(event, ClusterEvent):
            raise ClusterError(f"cluster_events[{i}]: must be a ClusterEvent, got {event!r}")
        if event.action == "add":
            next_id += 1
            continue
        engine = event.engine
        if engine is None:
            raise simclock.InternalError(f"cluster_events[{i}]: {event.action} without an engine")
        if not 0 <= engine < next_id:
            raise ClusterError(
                f"cluster_events[{i}]: engine {engine} does not exist at {event.at_s} s "
                f"(engines 0..{next_id - 1})"
            )
        if engine in removed:
            raise ClusterError(
                f"cluster_events[{i}]: engine {engine} was removed before {event.at_s} s"
            )
        if event.action == "remove":
            removed.add(engine)
    return tuple(events[i] for i in order)


@runtime_checkable
class ElasticRuntime(Protocol):
    """What a cluster needs of a run's runtime to change its engines
    (:class:`policies.PolicyRuntime` and :class:`replay.PDRuntime` have it)."""

    def add_engine(self, engine: Engine) -> None:
        """An engine joined (a P/D runtime adds it to the pool of its role)."""
        ...

    def drain_engine(self, engine: int) -> None:
        """Engine ``engine`` accepts no new placement."""
        ...

    def remove_engine(self, engine: int) -> None:
        """Engine ``engine`` left."""
        ...

    @property
    def inactive_placements(self) -> tuple[InactivePlacement, ...]:
        """Offers refused, and commits made, on engines not accepting placements."""
        ...


@runtime_checkable
class FailingRuntime(Protocol):
    """What a cluster needs of a run's runtime to crash its engines
    (:class:`policies.PolicyRuntime` has it)."""

    def fail_engine(
        self, engine: int, request_ids: Sequence[str], *, requeue: bool
    ) -> EngineFailure:
        """Engine ``engine`` crashed with ``request_ids``: requeue them or fail them."""
        ...


class _Joinable(Protocol):
    def engine_spec(
        self, *, pool: str | None = None, spec: EngineSpec | None = None
    ) -> EngineSpec: ...


@attrs.frozen
class EngineInterval:
    """When one engine was a member of the cluster.

    Attributes:
        engine: its id.
        pool: ``"prefill"`` or ``"decode"`` in a P/D topology; None for aggregated engines.
        joined_ns: when it joined (0 for the topology's engines).
        draining_ns: when it started draining, or None.
        drained_ns: when, draining, it first had nothing left to finish, or None.
        removed_ns: when it left, or None if it stayed to the end.
        ready_ns: when it started accepting placements: ``joined_ns`` plus the cold start;
            None while starting, or if it left during its cold start.
        failed: whether it left by crashing (:meth:`Cluster.fail`).
    """

    engine: int
    pool: str | None
    joined_ns: int
    draining_ns: int | None = None
    drained_ns: int | None = None
    removed_ns: int | None = None
    ready_ns: int | None = attrs.field(default=None, kw_only=True)
    failed: bool = attrs.field(default=False, kw_only=True)

    def states(self) -> tuple[tuple[int, ClusterState], ...]:
        """Its state changes as ``(instant_ns, state from then)``, in time order."""
        out: list[tuple[int, ClusterState]] = []
        if self.ready_ns != self.joined_ns:
            out.append((self.joined_ns, "starting"))
        if self.ready_ns is not None:
            out.append((self.ready_ns, "active"))
        if self.draining_ns is not None:
            out.append((self.draining_ns, "draining"))
        if self.removed_ns is not None:
            out.append((self.removed_ns, "removed"))
        return tuple(out)


@attrs.define(eq=False)
class _Member:
    engine: Engine
    pool: str | None
    joined_ns: int
    state: ClusterState = "active"
    draining_ns: int | None = None
    drained_ns: int | None = None
    removed_ns: int | None = None
    remove_when_idle: bool = False
    ready_ns: int | None = None
    cold_start: asyncio.Future[None] | None = None
    failed: bool = False

    def interval(self) -> EngineInterval:
        return EngineInterval(
            self.engine.index,
            self.pool,
            self.joined_ns,
            self.draining_ns,
            self.drained_ns,
            self.removed_ns,
            ready_ns=self.ready_ns,
            failed=self.failed,
        )


def _pool(engine: Engine) -> str | None:
    role = engine.role
    return None if role == "aggregated" else role


@attrs.define(eq=False)
class Cluster:
    """A run's engines by stable id; add, drain and remove them at virtual instants.

    Built by the run from the topology's engines (ids ``0 .. n-1``). See the module docstring
    for the rules.

    Args:
        engines: the topology's engines, in id order.
        build: makes an engine of a spec with a given id (the run's keyer, journal and
            stepping).
        start: starts an engine's coroutine on the run's loop.
        topology: gives the spec of an added engine (its ``engine_spec`` method).
        cold_start_ns: how long an added engine loads before it serves, ns (0: at once);
            fixed for the run, so engines join in the order they were added.

    Attributes:
        engines: every engine the run had, removed ones too, in id order.
        live: the engines not removed, in id order.
        changed: whether the cluster changed during the run.
    """

    _initial: Sequence[Engine]
    _build: Callable[[int, EngineSpec], Engine]
    _start: Callable[[Engine], None]
    _topology: object
    _cold_start_ns: int = attrs.field(default=0, kw_only=True)
    engines: tuple[Engine, ...] = attrs.field(init=False)
    live: tuple[Engine, ...] = attrs.field(init=False)
    changed: bool = attrs.field(default=False, init=False)
    _runtime: object = attrs.field(default=None, init=False)
    _loop: asyncio.AbstractEventLoop | None = attrs.field(default=None, init=False)
    _members: dict[int, _Member] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self.engines = self.live = tuple(self._initial)
        for engine in self.engines:
            self._members[engine.index] = _Member(engine, _pool(engine), 0, ready_ns=0)

    @property
    def cold_start_ns(self) -> int:
        """How long an added engine is ``starting`` before it serves, in ns."""
        return self._cold_start_ns

    def attach(self, runtime: object, loop: asyncio.AbstractEventLoop) -> None:
        """Bind the runtime that places requests on the engines, and the run's loop."""
        self._runtime = runtime
        self._loop = loop

    # -- reading ------------------------------------------------------------------------

    def state(self, engine: int) -> ClusterState:
        """Engine ``engine``'s state: ``"starting"``, ``"active"``, ``"draining"`` or
        ``"removed"``.

        Raises:
            ClusterError: no such engine.
        """
        return self._member(engine).state

    def engine(self, engine: int) -> Engine:
        """The engine with id ``engine`` (removed ones too).

        Raises:
            ClusterError: no such engine.
        """
        return self._member(engine).engine

    def ids(self, *states: ClusterState) -> tuple[int, ...]:
        """The ids of the engines in any of ``states`` (every engine when none is given), in
        id order."""
        return tuple(i for i, m in self._members.items() if not states or m.state in states)

    def intervals(self) -> tuple[EngineInterval, ...]:
        """When each engine was a member, in id order."""
        return tuple(member.interval() for member in self._members.values())

    def inactive_placements(self) -> tuple[InactivePlacement, ...]:
        """Offers refused, and commits made, on engines not accepting placements, in order
        (empty unless a policy offered to a draining or removed engine, or committed an offer
        after its engine started draining). Empty for a runtime that cannot change."""
        runtime = self._runtime
        if not isinstance(runtime, ElasticRuntime):
            return ()
        return runtime.inactive_placements

    def interval(self, engine: int) -> EngineInterval:
        """When engine ``engine`` was a member.

        Raises:
            ClusterError: no such engine.
        """
        return self._member(engine).interval()

    # -- changing -----------------------------------------------------------------------

    def add_engine(self, spec: EngineSpec | None = None, *, pool: str | None = None) -> int:
        """Add an engine now; it accepts placements at once, or after the cluster's cold
        start (``starting`` until then).

        Args:
            spec: the engine's configuration and timing; default the topology's (for
                ``pool`` in a P/D topology).
            pool: ``"prefill"`` or ``"decode"`` in a P/D topology; None for an aggregated one.

        Returns:
            The new engine's id (the next unused number).

        Raises:
            ClusterError: called off the run's loop, a pool the topology does not have, or a
                topology that cannot add engines.
        """
        now = self._now("add_engine")
        joinable = getattr(self._topology, "engine_spec", None)
        if joinable is None:
            raise ClusterError(
                f"topology {type(self._topology).__name__} cannot add engines "
                "(it has no engine_spec method)"
            )
        topology: _Joinable = self._topology  # type: ignore[assignment]
        resolved = topology.engine_spec(pool=pool, spec=spec)
        runtime = self._elastic()
        engine_id = self.engines[-1].index + 1 if self.engines else 0
        engine = self._build(engine_id, resolved)
        self.changed = True
        member = _Member(engine, _pool(engine), now)
        self._members[engine_id] = member
        self.engines = (*self.engines, engine)
        self.live = (*self.live, engine)
        if self._cold_start_ns > 0:
            member.state = "starting"
            self._start_after_cold_start(member, now + self._cold_start_ns)
            return engine_id
        member.ready_ns = now
        self._start(engine)
        runtime.add_engine(engine)
        return engine_id

    def drain(self, engine: int) -> None:
        """Stop placements on engine ``engine`` now; it finishes what it has.

        Draining an engine that is already draining does nothing.

        Raises:
            ClusterError: called off the run's loop, no such engine, or it was removed.
        """
        now = self._now("drain")
        member = self._member(engine)
        if member.state == "removed":
            raise ClusterError(f"engine {engine} was removed; it cannot be drained")
        if member.state == "draining":
            return
        if member.state == "starting":
            self._remove_starting(member, now)
            return
        self._drain(member, now)

    def remove(self, engine: int) -> None:
        """Remove engine ``engine``: now if it is idle, else (draining it first) at the
        instant it becomes idle.

        Raises:
            ClusterError: called off the run's loop, no such engine, or it was removed.
        """
        now = self._now("remove")
        member = self._member(engine)
        if member.state == "removed":
            raise ClusterError(f"engine {engine} was removed already")
        if member.state == "starting":
            self._remove_starting(member, now)
            return
        member.remove_when_idle = True
        if member.state == "active":
            self._drain(member, now)
        if member.engine.idle:
            self._remove(member, now)

    def fail(self, engine: int, *, requeue: bool = True) -> EngineFailure:
        """Crash engine ``engine`` now: it is removed at once, and what it had (waiting,
        running, held and reserved requests, their KV, its cache) is lost. Its requests go
        back to the policy (``requeue``) or fail (reason ``"engine_crashed"``); open offers
        on it are withdrawn. Its id is never reused; a restart is an :meth:`add_engine`.

        Returns:
            What the policy is told (``on_engine_failed``).

        Raises:
            ClusterError: called off the run's loop, no such engine, it was removed, or the
                runtime cannot crash engines.
        """
        now = self._now("fail")
        member = self._member(engine)
        if member.state == "removed":
            raise ClusterError(f"engine {engine} was removed; it cannot crash")
        runtime = self._runtime
        if not isinstance(runtime, FailingRuntime):
            raise ClusterError(
                f"the run's runtime {type(runtime).__name__} cannot crash engines "
                "(it has no fail_engine)"
            )
        self.changed = True
        if member.state == "starting":
            # it never joined the runtime: nothing was placed on it
            self._remove_starting(member, now)
            member.failed = True
            return EngineFailure(now, engine, (), requeue)
        member.state = "removed"
        member.failed = True
        member.removed_ns = now
        crashed = member.engine
        crashed.on_idle = None
        self.live = tuple(e for e in self.live if e is not crashed)
        dropped = crashed.crash()
        return runtime.fail_engine(engine, dropped, requeue=requeue)

    # -- internals ----------------------------------------------------------------------

    def _member(self, engine: int) -> _Member:
        member = (
            None
            if isinstance(engine, bool) or not isinstance(engine, int)
            else self._members.get(engine)
        )
        if member is None:
            raise ClusterError(f"unknown engine {engine!r}; engines are {self._known()}")
        return member

    def _known(self) -> str:
        ids = list(self._members)
        return f"0..{ids[-1]}" if ids else "none"

    def _now(self, what: str) -> int:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is None or running is not self._loop:
            raise ClusterError(
                f"Cluster.{what}: call it on the run's loop (from a coroutine of the run, "
                "e.g. a cluster_tasks coroutine)"
            )
        return simclock.now_ns()

    def _elastic(self) -> ElasticRuntime:
        runtime = self._runtime
        if not isinstance(runtime, ElasticRuntime):
            raise ClusterError(
                f"the run's runtime {type(runtime).__name__} cannot change its engines "
                "(it has no add_engine, drain_engine and remove_engine)"
            )
        return runtime

    def _start_after_cold_start(self, member: _Member, ready_ns: int) -> None:
        """Make ``member`` join at ``ready_ns`` (a timer on the run's loop)."""
        loop = self._loop
        if not isinstance(loop, simclock.VirtualEventLoop):
            raise simclock.InternalError("a cold start needs the run's virtual loop")
        future: asyncio.Future[None] = loop.create_future()
        member.cold_start = future
        future.add_done_callback(lambda done: self._ready(member, done))
        loop.wake_at_ns(future, ready_ns, waiter=f"cluster:cold_start[{member.engine.index}]")

    def _ready(self, member: _Member, done: asyncio.Future[None]) -> None:
        """The cold start is over: the engine joins (unless it left meanwhile)."""
        if done.cancelled() or member.state != "starting":
            return
        member.cold_start = None
        member.state = "active"
        member.ready_ns = simclock.now_ns()
        self._start(member.engine)
        self._elastic().add_engine(member.engine)

    def _remove_starting(self, member: _Member, now: int) -> None:
        """A starting engine leaves at once: it never joined the runtime."""
        if member.cold_start is not None:
            member.cold_start.cancel()
            member.cold_start = None
        member.state = "removed"
        member.removed_ns = member.drained_ns = now
        engine = member.engine
        self.live = tuple(e for e in self.live if e is not engine)
        engine.close()

    def _drain(self, member: _Member, now: int) -> None:
        runtime = self._elastic()
        self.changed = True
        member.state = "draining"
        member.draining_ns = now
        member.engine.on_idle = self._on_idle
        runtime.drain_engine(member.engine.index)
        if member.engine.idle:
            member.drained_ns = now

    def _on_idle(self, engine: Engine) -> None:
        """A draining engine waits for work: if nothing is left on it, it is drained (and
        removed, if that was asked)."""
        member = self._members[engine.index]
        if member.state != "draining" or not engine.idle:
            return
        now = simclock.now_ns()
        if member.drained_ns is None:
            member.drained_ns = now
        if member.remove_when_idle:
            self._remove(member, now)

    def _remove(self, member: _Member, now: int) -> None:
        runtime = self._elastic()
        member.state = "removed"
        member.removed_ns = now
        if member.drained_ns is None:
            member.drained_ns = now
        engine = member.engine
        engine.on_idle = None
        self.live = tuple(e for e in self.live if e is not engine)
        runtime.remove_engine(engine.index)
        engine.close()
