"""Small workloads, a topology that keeps its engines, and engines with injected faults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from engines import BlockKeyer, Engine, EngineConfig, FixedTiming, Journal, Tentative
from loadgen import ArrivalRule, Dep, Identity, Lineage, Request, Workload
from replay import Aggregated, ReplayResult, run

MS = 1_000_000


def req(
    rid: str,
    prompt: int = 128,
    output: int = 4,
    *,
    at_ms: float = 0.0,
    ids: Sequence[int] | None = None,
    block_size: int = 64,
    conversation: str | None = None,
    root: str | None = None,
    after: Sequence[str] = (),
) -> Request:
    """A request; content ids default to private ids derived from the request id."""
    need = -(-prompt // block_size)
    if ids is None:
        base = 1_000_000 + 1000 * (sum(ord(c) * (i + 1) for i, c in enumerate(rid)) % 100_000)
        ids = [base + k for k in range(need)]
    lineage = None if root is None else Lineage(root_conversation_id=root)
    arrival = (
        ArrivalRule(not_before_ms=None, after=tuple(Dep(a) for a in after))
        if after
        else ArrivalRule(not_before_ms=at_ms)
    )
    return Request(
        id=rid,
        input_length=prompt,
        output_length=output,
        block_size=block_size,
        hash_ids=list(ids)[:need],
        arrival=arrival,
        identity=Identity(conversation_id=conversation, lineage=lineage),
    )


def workload(requests: Sequence[Request]) -> Workload:
    """A workload of ``requests`` in the order given."""
    return Workload(requests=tuple(requests), source="test", format="test")


def topology(
    workers: int = 2, *, num_blocks: int = 256, prefill_ms: float = 50.0, decode_ms: float = 10.0
) -> Aggregated:
    """A small aggregated topology with fixed timing."""
    return Aggregated(
        workers=workers,
        engine=EngineConfig(num_blocks=num_blocks),
        timing=FixedTiming(prefill_ms=prefill_ms, decode_ms=decode_ms),
    )


@attrs.define(eq=False)
class FaultyEngine(Engine):
    """An engine whose commit or abort fails for chosen requests.

    A failing commit first rolls the offer back through :meth:`Engine.abort` (so the engine is
    left as before the offer, as a real failed commit leaves it), then raises. A failing abort
    aborts, then raises.
    """

    fail_commit: frozenset[str] = attrs.field(default=frozenset(), kw_only=True)
    fail_abort: frozenset[str] = attrs.field(default=frozenset(), kw_only=True)

    def commit(self, tentative: Tentative) -> None:
        if tentative.request.id in self.fail_commit:
            super().abort(tentative, "commit failed")
            raise RuntimeError(f"injected commit failure for {tentative.request.id}")
        super().commit(tentative)

    def abort(self, tentative: Tentative, reason: str) -> None:
        super().abort(tentative, reason)
        if tentative.request.id in self.fail_abort:
            raise RuntimeError(f"injected abort failure for {tentative.request.id}")


@attrs.define(eq=False)
class KeepingTopology:
    """An aggregated topology that keeps the engines it built (tests inspect them after a run).

    ``fail_commit`` / ``fail_abort`` map an engine index to the request ids whose commit / abort
    fails on that engine; ``configs`` overrides the configuration of chosen engines.
    """

    inner: Aggregated = attrs.field(factory=topology)
    fail_commit: Mapping[int, frozenset[str]] = attrs.field(factory=dict)
    fail_abort: Mapping[int, frozenset[str]] = attrs.field(factory=dict)
    configs: Mapping[int, EngineConfig] = attrs.field(factory=dict)
    engines: tuple[Engine, ...] = ()

    @property
    def block_size(self) -> int:
        return self.inner.block_size

    def build(self, *, keyer: BlockKeyer, journal: Journal) -> tuple[Engine, ...]:
        self.engines = tuple(
            FaultyEngine(
                index,
                self.configs.get(index, self.inner.engine),
                self.inner.timing,
                keyer=keyer,
                journal=journal,
                fail_commit=self.fail_commit.get(index, frozenset()),
                fail_abort=self.fail_abort.get(index, frozenset()),
            )
            for index in range(self.inner.workers)
        )
        return self.engines

    def describe(self) -> Mapping[str, object]:
        return self.inner.describe()

    def make_runtime(self, policy: Any, engines: tuple[Engine, ...], **options: Any) -> Any:
        return self.inner.make_runtime(policy, engines, **options)

    def kv_blocks_used(self) -> list[int]:
        """Blocks still referenced on each engine."""
        return [engine.view.kv_blocks_used for engine in self.engines]

    def pending_offers(self) -> list[int]:
        """Offers still open on each engine."""
        return [engine.view.pending_offers for engine in self.engines]


def run_policy(
    policy: object,
    requests: Sequence[Request],
    *,
    topo: KeepingTopology | None = None,
    seed: int = 0,
    **options: object,
) -> ReplayResult:
    """Replay ``requests`` under ``policy`` on ``topo`` (default: two small engines)."""
    return run(
        workload(requests),
        topology=topo if topo is not None else KeepingTopology(),
        policy=policy,  # type: ignore[arg-type]
        seed=seed,
        **options,  # type: ignore[arg-type]
    )


def statuses(result: ReplayResult) -> dict[str, str]:
    """Request id -> terminal status."""
    return {r.request_id: r.status for r in result.requests}


def engines_of(result: ReplayResult) -> dict[str, int | None]:
    """Request id -> engine index."""
    return {r.request_id: r.engine for r in result.requests}
