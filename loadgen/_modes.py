"""Load modes, stop rules and the agentic options of a run (REFERENCE-workloads §4, §5)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from ._distributions import ArrivalProcess, parse_arrivals
from ._exceptions import WorkloadConfigError

__all__ = ("LoadMode", "Profile")


def _number(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WorkloadConfigError(f"{name}: must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise WorkloadConfigError(f"{name}: must be a finite number {bound}, got {value!r}")
    return number


def _count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return value


@attrs.frozen
class Profile:
    """A continuous profile (§5.7): an admission window, a grace, idle caps.

    Attributes:
        duration_s: admission window after the start (the warm-up barrier, else 0).
        grace_s: how long requests in flight at the cutoff may still finish.
        cancel_drain_s: bound on cancellation acknowledgements (reported only; offline
            cancellation is immediate).
        tree_idle_cap_s: a play idle this long has its pending timers moved earlier.
        global_idle_cap_s: the same when nothing is in flight anywhere.
    """

    duration_s: float = 3600.0
    grace_s: float = 30.0
    cancel_drain_s: float = 10.0
    tree_idle_cap_s: float = 300.0
    global_idle_cap_s: float = 10.0

    def __attrs_post_init__(self) -> None:
        _number("profile.duration_s", self.duration_s, positive=True)
        _number("profile.grace_s", self.grace_s, positive=False)
        _number("profile.cancel_drain_s", self.cancel_drain_s, positive=False)
        _number("profile.tree_idle_cap_s", self.tree_idle_cap_s, positive=True)
        _number("profile.global_idle_cap_s", self.global_idle_cap_s, positive=True)


@attrs.frozen
class LoadMode:
    """How a workload is released (§4) and how agentic plays run (§5).

    Attributes:
        speedup: divides root times, turn and dependency delays and pacing floors (§4.1).
        concurrency: closed loop: at most this many sessions in flight (§4.2).
        arrivals: re-time roots (session first turns) with this process (§4.3).
        target_rate: re-time by speedup so roots arrive at this rate per second (§4.3).
        max_requests: the first this many releases happen, later ones never issue.
        max_sessions: the first this many sessions start and run to their end.
        max_virtual_time_s: releases at or before this time happen; then the run stops.
        lanes: at most this many plays at once (§5.1).
        snapshots: cut each initial lane's play at a seeded point (§5.5).
        snapshot_seed: the seed of the cuts (default: the run seed).
        warmup: prime caches and wait for quiescence before measuring (§5.6).
        warmup_repeats: warm-up requests per lane.
        profile: run a continuous profile (§5.7).
    """

    speedup: float = 1.0
    concurrency: int | None = None
    arrivals: ArrivalProcess | None = None
    target_rate: float | None = None
    max_requests: int | None = None
    max_sessions: int | None = None
    max_virtual_time_s: float | None = None
    lanes: int | None = None
    snapshots: bool = False
    snapshot_seed: int | None = None
    warmup: bool = False
    warmup_repeats: int = 10
    profile: Profile | None = None

    PLAYS_PER_ENGINE: ClassVar[int] = 1
    """Plays at once per engine that takes prompts, when an agentic workload's lanes are
    left unset (:meth:`with_default_lanes`)."""

    def __attrs_post_init__(self) -> None:
        _number("speedup", self.speedup, positive=True)
        if self.concurrency is not None:
            _count("concurrency", self.concurrency, 1)
            if self.speedup != 1.0:
                raise WorkloadConfigError("speedup: not allowed with concurrency")
            if self.lanes is not None:
                raise WorkloadConfigError("concurrency: not allowed with lanes")
        if self.target_rate is not None:
            _number("target_rate", self.target_rate, positive=True)
            if self.arrivals is not None:
                raise WorkloadConfigError("target_rate: not allowed with arrivals")
            if self.speedup != 1.0:
                raise WorkloadConfigError("target_rate: not allowed with speedup")
        if self.max_requests is not None:
            _count("max_requests", self.max_requests, 0)
        if self.max_sessions is not None:
            _count("max_sessions", self.max_sessions, 0)
        if self.max_virtual_time_s is not None:
            _number("max_virtual_time_s", self.max_virtual_time_s, positive=False)
        if self.lanes is not None:
            _count("lanes", self.lanes, 1)
        if self.snapshots and self.lanes is None:
            raise WorkloadConfigError("snapshots: needs lanes")
        if self.snapshot_seed is not None:
            _count("snapshot_seed", self.snapshot_seed, 0)
        if self.warmup and not self.snapshots:
            raise WorkloadConfigError("warmup: needs snapshots")
        _count("warmup_repeats", self.warmup_repeats, 0)
        if self.profile is not None:
            if self.lanes is None or not self.snapshots:
                raise WorkloadConfigError("profile: needs lanes and snapshots")
            if self.max_virtual_time_s is not None:
                raise WorkloadConfigError("profile: cannot be combined with max_virtual_time_s")

    def with_default_lanes(self, *, plays: int, engines: int) -> LoadMode:
        """This mode, with lanes sized to the topology when a workload of plays leaves them unset.

        Without lanes every play starts at once (§5.1): the whole WEKA archive's 498 plays
        would share four engines from the first instant, evicting one another's prefixes.
        With ``lanes`` unset, no ``concurrency`` and ``plays > 0``, the result runs
        ``PLAYS_PER_ENGINE`` plays per engine (at most ``plays``); otherwise it is this mode.
        To start every play at once, set ``lanes`` to the number of plays.

        Args:
            plays: the workload's plays (0 for a workload without plays).
            engines: the engines that take prompts (aggregated workers, or the prefill pool).
        """
        if plays <= 0 or self.lanes is not None or self.concurrency is not None:
            return self
        return attrs.evolve(self, lanes=max(1, min(plays, self.PLAYS_PER_ENGINE * engines)))

    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> LoadMode:
        """Build a load mode from a config table (``[workload]`` keys, CLI options).

        ``arrivals`` may be a string such as ``"poisson(5)"`` or a table; ``profile`` may
        be ``true`` (defaults) or a table of :class:`Profile` fields.

        Raises:
            WorkloadConfigError: an unknown key or a bad value.
        """
        known = {f.name for f in attrs.fields(cls)}
        extra = sorted(set(table) - known)
        if extra:
            raise WorkloadConfigError(f"{extra[0]}: unknown load option")
        values = dict(table)
        if values.get("arrivals") is not None:
            values["arrivals"] = parse_arrivals(values["arrivals"])
        profile = values.get("profile")
        if profile is True:
            values["profile"] = Profile()
        elif profile is False:
            values["profile"] = None
        elif isinstance(profile, Mapping):
            names = {f.name for f in attrs.fields(Profile)}
            unknown = sorted(set(profile) - names)
            if unknown:
                raise WorkloadConfigError(f"profile.{unknown[0]}: unknown profile option")
            values["profile"] = Profile(**profile)
        for flag in ("snapshots", "warmup"):
            if flag in values and not isinstance(values[flag], bool):
                raise WorkloadConfigError(f"{flag}: must be true or false, got {values[flag]!r}")
        return cls(**values)
