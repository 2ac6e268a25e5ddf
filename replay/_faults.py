"""Faults and stale information, declared: engines that crash (and restart) or drain at
instants, and engine views and KV events that reach the policy late or periodically.

A :class:`Faults` value is the ``faults`` run option (and the ``[faults]`` table of a
``simclock replay --config`` file). The run applies its schedule on its clock, as a task of
the run (``faults``), through :class:`replay.Cluster`:

1. ``crashes``: at ``at_s`` engine ``engine`` crashes (:meth:`Cluster.fail`): it is removed
   at once and what it had is lost. With ``on_crash = "requeue"`` (the default) its requests
   go back to the policy's request stream, keeping their ids and release instants (recorded
   ``REQUEUED``; their records list the fault under ``faults``); with ``"fail"`` they end
   ``failed``, reason ``engine_crashed``. With ``restart_s``, a fresh engine of the same
   pool joins ``restart_s`` after the crash, under the next unused id.
2. ``drains``: at ``at_s`` engine ``engine`` drains (:meth:`Cluster.drain`).
3. Same-instant steps run in the order: crashes, restarts, drains, each as declared. A step
   on an engine already removed does nothing (an explored schedule may move a crash after
   the engine's removal).
4. ``transfer_failures``, ``transfer_failure_p`` (prefill/decode topologies): KV transfers
   fail at instants, or each with a seeded probability
   (:meth:`replay.PDRuntime.set_transfer_failures`);
   the request goes back to prefill or fails, as ``on_transfer_failure`` (default: as
   ``on_crash``) says.
5. ``view_delay_ms``, ``view_period_ms``, ``kv_event_delay_ms``: what the policy sees of the
   engines lags (:attr:`Faults.staleness`, given to every policy runtime of the run; see
   :mod:`policies._stale`). All zero (the default) changes nothing.

A run without faults is exactly the run it was before faults existed, byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import attrs
import numpy as np

import simclock
from policies import Staleness

from ._cluster import Cluster, ClusterEvent
from ._exceptions import ReplayError

__all__ = (
    "ON_CRASH",
    "EngineCrash",
    "EngineDrain",
    "FaultError",
    "FaultStep",
    "Faults",
    "OnCrash",
    "TransferFailure",
    "fault_plan",
    "run_faults",
)

OnCrash = Literal["requeue", "fail"]
"""What becomes of a crashed engine's requests."""

ON_CRASH: tuple[str, ...] = get_args(OnCrash)
"""Every :data:`OnCrash` choice."""

_NS_PER_S = 1_000_000_000


class FaultError(ReplayError, ValueError):
    """A fault declaration is invalid (the message names the field)."""


def _number(value: object, where: str, *, positive: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        bound = "> 0" if positive else ">= 0"
        raise FaultError(f"{where}: must be a finite number {bound}, got {value!r}")
    return float(value)


def _engine_id(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FaultError(f"{where}: must be an engine id (an int >= 0), got {value!r}")
    return value


def _check_at(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _number(value, attribute.name)


def _check_engine(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _engine_id(value, attribute.name)


def _check_restart(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _number(value, attribute.name)


@attrs.frozen(kw_only=True)
class EngineCrash:
    """An engine crash at an instant.

    Attributes:
        at_s: the virtual instant, seconds.
        engine: the id of the engine that crashes.
        restart_s: a fresh engine of the same pool joins this long after the crash (under
            the next unused id); None: no restart.
    """

    at_s: float = attrs.field(validator=_check_at)
    engine: int = attrs.field(validator=_check_engine)
    restart_s: float | None = attrs.field(default=None, validator=_check_restart)

    def as_dict(self) -> dict[str, object]:
        """The crash as JSON values (``restart_s`` only when set)."""
        out: dict[str, object] = {"at_s": self.at_s, "engine": self.engine}
        if self.restart_s is not None:
            out["restart_s"] = self.restart_s
        return out


@attrs.frozen(kw_only=True)
class EngineDrain:
    """An engine drain at an instant.

    Attributes:
        at_s: the virtual instant, seconds.
        engine: the id of the engine that drains.
    """

    at_s: float = attrs.field(validator=_check_at)
    engine: int = attrs.field(validator=_check_engine)

    def as_dict(self) -> dict[str, object]:
        """The drain as JSON values."""
        return {"at_s": self.at_s, "engine": self.engine}


@attrs.frozen(kw_only=True)
class TransferFailure:
    """A P/D KV-transfer failure at an instant: every transfer in progress then fails.

    Attributes:
        at_s: the virtual instant, seconds.
    """

    at_s: float = attrs.field(validator=_check_at)

    def as_dict(self) -> dict[str, object]:
        """The failure as JSON values."""
        return {"at_s": self.at_s}


_STEP_KINDS: dict[str, type[EngineCrash | EngineDrain | TransferFailure]] = {
    "crashes": EngineCrash,
    "drains": EngineDrain,
    "transfer_failures": TransferFailure,
}


def _check_faults(instance: Faults, attribute: attrs.Attribute[Any], value: object) -> None:
    name = attribute.name
    if name in ("on_crash", "on_transfer_failure"):
        if value not in ON_CRASH and not (name == "on_transfer_failure" and value is None):
            raise FaultError(
                f"{name}: must be one of {', '.join(map(repr, ON_CRASH))}, got {value!r}"
            )
    elif name == "transfer_failure_p":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise FaultError(f"{name}: must be a number in [0, 1], got {value!r}")
    elif name in _STEP_KINDS:
        kind = _STEP_KINDS[name]
        if not isinstance(value, tuple):
            raise FaultError(f"{name}: must be a tuple of {kind.__name__}, got {value!r}")
        for i, item in enumerate(value):
            if not isinstance(item, kind):
                raise FaultError(f"{name}[{i}]: must be a {kind.__name__}, got {item!r}")
    else:
        _number(value, name)


def _tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen(kw_only=True)
class Faults:
    """The faults of a run (the ``faults`` run option; the ``[faults]`` config table).

    Attributes:
        crashes: engine crashes (:class:`EngineCrash`).
        drains: engine drains (:class:`EngineDrain`).
        on_crash: ``"requeue"`` (a crashed engine's requests go back to the policy) or
            ``"fail"`` (they end ``failed``, reason ``engine_crashed``).
        transfer_failures: P/D KV-transfer failures at instants (:class:`TransferFailure`).
        transfer_failure_p: each P/D KV transfer fails at its end with this probability
            (a child random stream of the run seed).
        on_transfer_failure: what becomes of a failed transfer's request: ``"requeue"``
            (back to the prefill policy) or ``"fail"`` (reason ``transfer_failed``); None:
            as ``on_crash``.
        view_delay_ms: engine views show each engine as it was this long ago.
        view_period_ms: engine views refresh on this period (they show the engine as it was
            at the last multiple of it).
        kv_event_delay_ms: KV events reach ``on_kv_event`` this much later, and
            ``prefix_overlap`` follows them.

    Raises:
        FaultError: a field has a bad value.
    """

    crashes: tuple[EngineCrash, ...] = attrs.field(
        default=(), converter=_tuple, validator=_check_faults
    )
    drains: tuple[EngineDrain, ...] = attrs.field(
        default=(), converter=_tuple, validator=_check_faults
    )
    on_crash: OnCrash = attrs.field(default="requeue", validator=_check_faults)
    transfer_failures: tuple[TransferFailure, ...] = attrs.field(
        default=(), converter=_tuple, validator=_check_faults
    )
    transfer_failure_p: float = attrs.field(default=0.0, validator=_check_faults)
    on_transfer_failure: OnCrash | None = attrs.field(default=None, validator=_check_faults)
    view_delay_ms: float = attrs.field(default=0.0, validator=_check_faults)
    view_period_ms: float = attrs.field(default=0.0, validator=_check_faults)
    kv_event_delay_ms: float = attrs.field(default=0.0, validator=_check_faults)

    @property
    def staleness(self) -> Staleness | None:
        """What the policy's information lags by, or None when it does not lag."""
        if not (self.view_delay_ms or self.view_period_ms or self.kv_event_delay_ms):
            return None
        return Staleness(
            view_delay_ns=round(self.view_delay_ms * 1_000_000),
            view_period_ns=round(self.view_period_ms * 1_000_000),
            kv_event_delay_ns=round(self.kv_event_delay_ms * 1_000_000),
        )

    @property
    def is_empty(self) -> bool:
        """Whether the run is exactly a run without faults."""
        return (
            not self.crashes
            and not self.drains
            and not self.has_transfer_failures
            and self.staleness is None
        )

    @property
    def has_transfer_failures(self) -> bool:
        """Whether P/D KV transfers can fail."""
        return bool(self.transfer_failures) or self.transfer_failure_p > 0

    @property
    def requeue_transfers(self) -> bool:
        """Whether a failed transfer's request goes back to the prefill policy."""
        return (self.on_transfer_failure or self.on_crash) == "requeue"

    def as_dict(self) -> dict[str, object]:
        """The faults as JSON values (what ``config.json`` echoes; :meth:`from_mapping` reads
        it back); fields left at their defaults are left out."""
        out: dict[str, object] = {}
        if self.crashes:
            out["crashes"] = [crash.as_dict() for crash in self.crashes]
            out["on_crash"] = self.on_crash
        if self.drains:
            out["drains"] = [drain.as_dict() for drain in self.drains]
        if self.transfer_failures:
            out["transfer_failures"] = [f.as_dict() for f in self.transfer_failures]
        if self.transfer_failure_p:
            out["transfer_failure_p"] = self.transfer_failure_p
        if self.has_transfer_failures:
            out["on_transfer_failure"] = self.on_transfer_failure or self.on_crash
        for name in ("view_delay_ms", "view_period_ms", "kv_event_delay_ms"):
            value = getattr(self, name)
            if value:
                out[name] = value
        return out

    @classmethod
    def from_mapping(cls, table: object, *, where: str = "faults") -> Faults:
        """The faults of a ``[faults]`` table::

            on_crash = "requeue"          # or "fail"
            view_delay_ms = 200
            crashes = [{at_s = 1.5, engine = 0, restart_s = 2}]
            drains = [{at_s = 3, engine = 1}]

        Raises:
            FaultError: an unknown key or a bad value, named ``<where>.<key>``.
        """
        if not isinstance(table, Mapping):
            raise FaultError(f"{where}: must be a table")
        known = [f.name for f in attrs.fields(cls)]
        values: dict[str, Any] = {}
        for key, value in table.items():
            if key not in known:
                raise FaultError(f"{where}.{key}: unknown key; known: {', '.join(known)}")
            if key in _STEP_KINDS:
                values[key] = _steps(key, value, f"{where}.{key}")
            elif key in ("on_crash", "on_transfer_failure"):
                if value not in ON_CRASH:
                    raise FaultError(
                        f"{where}.{key}: must be one of {', '.join(map(repr, ON_CRASH))}, "
                        f"got {value!r}"
                    )
                values[key] = value
            elif key == "transfer_failure_p":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not 0 <= value <= 1
                ):
                    raise FaultError(f"{where}.{key}: must be a number in [0, 1], got {value!r}")
                values[key] = float(value)
            else:
                values[key] = _number(value, f"{where}.{key}")
        return cls(**values)

    def varied(
        self, rng: np.random.Generator, *, jitter_s: float, delays_ms: Sequence[float]
    ) -> Faults:
        """These faults with each instant moved by a uniform draw in ``[-jitter_s,
        jitter_s]`` (never below 0) and, when ``delays_ms`` is given, each information delay
        that is set replaced by a draw among ``delays_ms`` (``explore``'s variation)."""

        def move(at_s: float) -> float:
            if not jitter_s:
                return at_s
            return max(0.0, at_s + float(rng.uniform(-jitter_s, jitter_s)))

        crashes = tuple(attrs.evolve(c, at_s=move(c.at_s)) for c in self.crashes)
        drains = tuple(attrs.evolve(d, at_s=move(d.at_s)) for d in self.drains)
        varied = attrs.evolve(self, crashes=crashes, drains=drains)
        if self.transfer_failures:
            moved = tuple(attrs.evolve(f, at_s=move(f.at_s)) for f in self.transfer_failures)
            varied = attrs.evolve(varied, transfer_failures=moved)
        if delays_ms:

            def draw(value: float) -> float:
                return float(delays_ms[int(rng.integers(len(delays_ms)))]) if value else 0.0

            varied = attrs.evolve(
                varied,
                view_delay_ms=draw(self.view_delay_ms),
                view_period_ms=draw(self.view_period_ms),
                kv_event_delay_ms=draw(self.kv_event_delay_ms),
            )
        return varied


def _steps(
    key: str, value: object, where: str
) -> tuple[EngineCrash | EngineDrain | TransferFailure, ...]:
    if not isinstance(value, list | tuple):
        raise FaultError(f"{where}: must be a list of tables, got {value!r}")
    kind = _STEP_KINDS[key]
    known = [f.name for f in attrs.fields(kind)]
    out: list[EngineCrash | EngineDrain | TransferFailure] = []
    for i, item in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise FaultError(f"{here}: must be a table, got {item!r}")
        for name in item:
            if name not in known:
                raise FaultError(f"{here}.{name}: unknown key; known: {', '.join(known)}")
        for name in ("at_s", "engine")[: len(known)]:
            if name not in item:
                raise FaultError(f"{here}: {name} is required")
        _number(item["at_s"], f"{here}.at_s")
        if "engine" in known:
            _engine_id(item["engine"], f"{here}.engine")
        if item.get("restart_s") is not None:
            _number(item["restart_s"], f"{here}.restart_s")
        out.append(kind(**item))
    return tuple(out)


@attrs.frozen
class FaultStep:
    """One step of a run's fault schedule.

    Attributes:
        at_ns: its instant.
        action: ``"crash"``, ``"restart"`` or ``"drain"``.
        engine: the engine crashed or drained; for a restart, the crashed engine whose pool
            the new engine joins.
    """

    at_ns: int
    action: Literal["crash", "restart", "drain"]
    engine: int


_ORDER = {"crash": 0, "restart": 1, "drain": 2}


def fault_plan(
    faults: Faults,
    initial: int,
    cluster_events: Sequence[ClusterEvent] = (),
    *,
    where: str = "faults",
) -> tuple[FaultStep, ...]:
    """The schedule of ``faults`` in the order it is applied, checked against a cluster that
    starts with engines ``0 .. initial-1`` and changes by ``cluster_events``; errors name
    the table ``where``.

    Raises:
        FaultError: ``faults.crashes[i]: engine 7 does not exist at 1.0 s (engines 0..3)``.
    """
    steps: list[tuple[int, int, int, FaultStep, str, float]] = []
    for i, crash in enumerate(faults.crashes):
        at = round(crash.at_s * _NS_PER_S)
        steps.append((at, 0, i, FaultStep(at, "crash", crash.engine), f"crashes[{i}]", crash.at_s))
        if crash.restart_s is not None:
            back = at + round(crash.restart_s * _NS_PER_S)
            restart = FaultStep(back, "restart", crash.engine)
            steps.append((back, 1, i, restart, f"crashes[{i}]", crash.at_s))
    for i, drain in enumerate(faults.drains):
        at = round(drain.at_s * _NS_PER_S)
        steps.append((at, 2, i, FaultStep(at, "drain", drain.engine), f"drains[{i}]", drain.at_s))
    steps.sort(key=lambda s: s[:3])
    # engines that exist at each instant: the initial ones, then one more per addition
    additions = sorted(
        [e.at_ns for e in cluster_events if e.action == "add"]
        + [s[0] for s in steps if s[3].action == "restart"]
    )
    for at, _, _, step, label, at_s in steps:
        if step.action == "restart":
            continue
        known = initial + sum(1 for t in additions if t <= at)
        if step.engine >= known:
            raise FaultError(
                f"{where}.{label}: engine {step.engine} does not exist at {at_s} s "
                f"(engines 0..{known - 1})"
            )
    return tuple(s[3] for s in steps)


async def run_faults(cluster: Cluster, plan: Sequence[FaultStep], *, requeue: bool) -> None:
    """Apply a fault schedule (:func:`fault_plan`) to ``cluster``, each step at its instant
    (a task of the run)."""
    for step in plan:
        if step.at_ns > simclock.now_ns():
            await simclock.sleep_until_ns(step.at_ns, waiter="faults")
        if step.action == "restart":
            cluster.add_engine(pool=cluster.interval(step.engine).pool)
            continue
        if cluster.state(step.engine) == "removed":
            continue
        if step.action == "crash":
            cluster.fail(step.engine, requeue=requeue)
        elif cluster.state(step.engine) == "active":
            cluster.drain(step.engine)
