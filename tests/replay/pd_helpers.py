"""Helpers for the P/D tests: a disaggregated topology that keeps its (faulty) engines."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs
import numpy as np

from engines import BlockKeyer, Engine, EngineConfig, FixedTiming, Journal
from loadgen import ArrivalRule, Request, Workload
from policies import Policy
from replay import Disaggregated, KVLink, PDRuntime, ReplayResult, run

from ..policies.support import FaultyEngine

KV_BYTES_9D = 2 * 64 * 8 * 128 * 2  # §9d: 64 layers, 8 KV heads, head dim 128, bf16


def request(
    rid: str, *, at_ms: float = 0.0, p: int = 1000, n: int = 10, ids: Sequence[int] = (1, 2)
) -> Request:
    """A trace-style request (512-token content ids)."""
    return Request(
        id=rid,
        input_length=p,
        output_length=n,
        block_size=512,
        hash_ids=list(ids),
        arrival=ArrivalRule(not_before_ms=at_ms),
    )


def example_d(
    *,
    decode_ms: float = 10.0,
    bandwidth_gbps: float | None = 50.0,
    kv_bytes_per_token: float = KV_BYTES_9D,
    mode: str = "destination_missing",
    order: str = "source_first",
    prefill_workers: int = 1,
    decode_workers: int = 1,
    decode_blocks: int = 10_000,
    latency_ms: float = 0.0,
) -> Disaggregated:
    """The topology of REFERENCE-engine §9d (fixed 50/10 ms, E = 64, 50 GB/s)."""
    return Disaggregated(
        prefill_workers=prefill_workers,
        decode_workers=decode_workers,
        prefill_engine=EngineConfig(num_blocks=10_000),
        decode_engine=EngineConfig(num_blocks=decode_blocks),
        prefill_timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        decode_timing=FixedTiming(prefill_ms=50.0, decode_ms=decode_ms),
        link=KVLink(
            mode=mode,  # type: ignore[arg-type]
            kv_bytes_per_token=kv_bytes_per_token,
            bandwidth_gbps=bandwidth_gbps,
            latency_ms=latency_ms,
        ),
        order=order,  # type: ignore[arg-type]
    )


@attrs.define(eq=False)
class KeepingPD:
    """A disaggregated topology that keeps its engines; chosen engines fail commit/abort.

    ``fail_commit`` / ``fail_abort`` map a global engine index to request ids; ``configs``
    overrides chosen engines' configurations (role included).
    """

    inner: Disaggregated
    fail_commit: Mapping[int, frozenset[str]] = attrs.field(factory=dict)
    fail_abort: Mapping[int, frozenset[str]] = attrs.field(factory=dict)
    configs: Mapping[int, EngineConfig] = attrs.field(factory=dict)
    engines: tuple[Engine, ...] = ()
    runtime: PDRuntime | None = None

    @property
    def block_size(self) -> int:
        return self.inner.block_size

    def build(self, *, keyer: BlockKeyer, journal: Journal) -> tuple[Engine, ...]:
        built = self.inner.build(keyer=keyer, journal=journal)
        self.engines = tuple(
            FaultyEngine(
                e.index,
                self.configs.get(e.index, e.config),
                e.timing,
                keyer=keyer,
                journal=journal,
                fail_commit=self.fail_commit.get(e.index, frozenset()),
                fail_abort=self.fail_abort.get(e.index, frozenset()),
            )
            for e in built
        )
        return self.engines

    def describe(self) -> Mapping[str, object]:
        return self.inner.describe()

    def make_runtime(
        self,
        policy: Policy,
        engines: Sequence[Engine],
        *,
        journal: Journal,
        keyer: BlockKeyer,
        rng: np.random.Generator,
        on_poison: Callable[[BaseException], None] | None = None,
    ) -> PDRuntime:
        self.runtime = self.inner.make_runtime(
            policy, engines, journal=journal, keyer=keyer, rng=rng, on_poison=on_poison
        )
        return self.runtime

    def kv_blocks_used(self) -> list[int]:
        """Blocks still referenced, per engine."""
        return [e.view.kv_blocks_used for e in self.engines]

    def leftovers(self) -> list[tuple[int, int, tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
        """Per engine: blocks used, open offers, held, reserving, reserved."""
        out = []
        for e in self.engines:
            snap = e.snapshot()
            out.append(
                (
                    e.view.kv_blocks_used,
                    snap.pending_offers,
                    snap.held,
                    snap.reserving,
                    snap.reserved,
                )
            )
        return out


def clean(
    topo: KeepingPD,
) -> list[tuple[int, int, tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    """What every engine should look like at the end of any run."""
    return [(0, 0, (), (), ())] * len(topo.engines)


def replay(
    requests: Sequence[Request], topology: object, policy: object, **options: object
) -> ReplayResult:
    """Replay ``requests`` on ``topology`` under ``policy``."""
    return run(
        Workload(requests=tuple(requests), source="test", format="test"),
        topology=topology,  # type: ignore[arg-type]
        policy=policy,  # type: ignore[arg-type]
        seed=0,
        **options,  # type: ignore[arg-type]
    )


def statuses(result: ReplayResult) -> dict[str, str]:
    """Request id -> terminal status."""
    return {r.request_id: r.status for r in result.requests}
