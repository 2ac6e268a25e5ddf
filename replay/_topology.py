"""Topologies and runtimes: how a run's engines are built and who places requests on them.

The aggregated topology is one composition (engines under a :class:`policies.PolicyRuntime`);
the disaggregated one (:mod:`replay._pd_topology`) another (two pools and the handoff).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import attrs
import numpy as np

from engines import (
    BlockKeyer,
    Engine,
    EngineConfig,
    FixedTiming,
    Journal,
    RequestTrace,
    TimingModel,
)
from loadgen import Request
from policies import Policy, PolicyContext, PolicyRuntime, RequestStatus, RequestStream

from ._cluster import ClusterError, EngineSpec

__all__ = ("Aggregated", "Runtime", "Topology")


class Runtime(Protocol):
    """What a run needs of the runtime that places its requests (:class:`policies.PolicyRuntime`
    for aggregated engines, :class:`replay.PDRuntime` for disaggregated pools).

    Lifecycle: :meth:`start` inside the running loop, :meth:`submit` each released request,
    :meth:`close` the stream when no more will come, :meth:`request_terminal` for every request
    that ends, :meth:`shutdown` at the end.

    """

    @property
    def name(self) -> str:
        """The policy's name (reports)."""
        ...

    @property
    def failure(self) -> BaseException | None:
        """What poisoned the runtime, if anything (the run then fails)."""
        ...

    @property
    def stream(self) -> RequestStream:
        """The requests submitted and not yet taken by the policy."""
        ...

    @property
    def context(self) -> PolicyContext:
        """The policy context."""
        ...

    @property
    def runs_timed_work(self) -> bool:
        """Whether the runtime runs timed work of its own that no engine shows (KV
        transfers): idle engines then do not mean a stalled run."""
        ...

    @property
    def unsettled(self) -> int:
        """Requests submitted and not yet placed, held or given up."""
        ...

    @property
    def wakeup_watch(self) -> Callable[[str], None] | None:
        """Called with a waiter's name at each policy wakeup (the run's progress watch)."""
        ...

    @wakeup_watch.setter
    def wakeup_watch(self, watch: Callable[[str], None] | None) -> None: ...

    def start(self) -> None:
        """Start the policy's coroutines on the running loop."""
        ...

    def submit(self, request: Request) -> None:
        """Give the policy a released request."""
        ...

    def close(self) -> None:
        """No more requests will be submitted."""
        ...

    def status(self, request_id: str) -> RequestStatus | None:
        """Where the request stands with the runtime, or None if it never reached it."""
        ...

    def held_request_ids(self) -> list[str]:
        """The requests the policy holds without placing them."""
        ...

    def request_terminal(self, trace: RequestTrace) -> None:
        """A request reached its terminal state."""
        ...

    async def shutdown(self) -> None:
        """Stop the policy's coroutines."""
        ...


class Topology(Protocol):
    """What :func:`replay.run` needs of a topology: engines, their block size, a config echo,
    and the runtime that places requests on the engines.

    A topology that also has ``engine_spec(*, pool=None, spec=None) -> EngineSpec`` (as
    :class:`Aggregated` and :class:`replay.Disaggregated` do) lets a run add engines
    (:meth:`replay.Cluster.add_engine`).
    """

    @property
    def block_size(self) -> int:
        """The engines' KV block size ``E`` (tokens per block)."""
        ...

    def build(self, *, keyer: BlockKeyer, journal: Journal) -> tuple[Engine, ...]:
        """Build fresh engines, in index order, sharing ``keyer`` and ``journal``."""
        ...

    def describe(self) -> Mapping[str, object]:
        """Return the topology's configuration as JSON-compatible values."""
        ...

    def make_runtime(
        self,
        policy: Policy,
        engines: tuple[Engine, ...],
        *,
        journal: Journal,
        keyer: BlockKeyer,
        rng: np.random.Generator,
        on_poison: Callable[[BaseException], None] | None = None,
    ) -> Runtime:
        """The runtime placing requests on ``engines`` (built by :meth:`build`) under
        ``policy``."""
        ...


def _workers(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Aggregated.workers must be an int >= 1, got {value!r}")


def _timing_echo(timing: TimingModel) -> dict[str, object]:
    echo: dict[str, object] = {"type": type(timing).__name__}
    if attrs.has(type(timing)):
        for name, value in attrs.asdict(cast(Any, timing), recurse=False).items():
            if isinstance(value, bool | int | float | str) or value is None:
                echo[name] = value
            else:
                echo[name] = repr(value)
    return echo


@attrs.frozen(kw_only=True)
class Aggregated:
    """``workers`` identical aggregated engines (prefill and decode on the same engine).

    Attributes:
        workers: the number of engines (>= 1).
        engine: every engine's configuration.
        timing: every engine's pass-timing model.

    Raises:
        ValueError: ``workers`` is not an int >= 1.
    """

    workers: int = attrs.field(default=4, validator=_workers)
    engine: EngineConfig = attrs.field(factory=lambda: EngineConfig(num_blocks=4096))
    timing: TimingModel = attrs.field(factory=lambda: FixedTiming(prefill_ms=50.0, decode_ms=10.0))

    @property
    def block_size(self) -> int:
        """The engines' KV block size."""
        return self.engine.block_size

    def build(self, *, keyer: BlockKeyer, journal: Journal) -> tuple[Engine, ...]:
        """Build ``workers`` fresh engines, indexed from 0, sharing ``keyer`` and ``journal``."""
        return tuple(
            Engine(index, self.engine, self.timing, keyer=keyer, journal=journal)
            for index in range(self.workers)
        )

    def engine_spec(self, *, pool: str | None = None, spec: EngineSpec | None = None) -> EngineSpec:
        """The spec of an engine added to the run: ``spec``, checked, or every engine's.

        Raises:
            ClusterError: a ``pool`` (an aggregated topology has none), or a ``spec`` of
                another block size or of a prefill or decode role.
        """
        if pool is not None:
            raise ClusterError(f"pool: an aggregated topology has no pools, got {pool!r}")
        if spec is None:
            return EngineSpec(config=self.engine, timing=self.timing)
        if spec.config.role != "aggregated":
            raise ClusterError(
                f"an aggregated topology adds aggregated engines, not {spec.config.role!r} ones"
            )
        if spec.config.block_size != self.block_size:
            raise ClusterError(
                f"an added engine's block_size {spec.config.block_size} differs from the "
                f"topology's {self.block_size}"
            )
        return spec

    def make_runtime(
        self,
        policy: Policy,
        engines: tuple[Engine, ...],
        *,
        journal: Journal,
        keyer: BlockKeyer,
        rng: np.random.Generator,
        on_poison: Callable[[BaseException], None] | None = None,
    ) -> Runtime:
        """A :class:`policies.PolicyRuntime` of ``policy`` over ``engines``."""
        return PolicyRuntime(policy, engines, journal, keyer, rng, on_poison=on_poison)

    def describe(self) -> Mapping[str, object]:
        """Return ``{"type": "aggregated", "workers", "engine": {...}, "timing": {...}}``."""
        return {
            "type": "aggregated",
            "workers": self.workers,
            "engine": self.engine.as_dict(),
            "timing": _timing_echo(self.timing),
        }
