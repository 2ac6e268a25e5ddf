"""Topologies: how a run's engines are built. The aggregated topology is one composition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import attrs

from engines import BlockKeyer, Engine, EngineConfig, FixedTiming, Journal, TimingModel

__all__ = ("Aggregated", "Topology")


class Topology(Protocol):
    """What :func:`replay.run` needs of a topology: engines, their block size, a config echo.

    A topology may also define ``make_runtime(policy, engines, *, journal, keyer, rng,
    on_poison)`` returning an object with :class:`policies.PolicyRuntime`'s interface; the
    runner then uses it instead of a plain ``PolicyRuntime`` (the disaggregated topology does,
    to add the prefill-to-decode handoff).
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

    def describe(self) -> Mapping[str, object]:
        """Return ``{"type": "aggregated", "workers", "engine": {...}, "timing": {...}}``."""
        return {
            "type": "aggregated",
            "workers": self.workers,
            "engine": self.engine.as_dict(),
            "timing": _timing_echo(self.timing),
        }
