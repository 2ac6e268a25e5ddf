"""The built-in policies. They use only the public policy API, as a user's policy would.

Each chooses among ``ctx.engines``, the engines accepting placements at the instant of the
choice, and returns the chosen view's stable id; so each handles engines that join, drain and
leave. In a cluster that never changes the views are engines ``0 .. n-1`` in order.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from engines import EngineView
from loadgen import Request

from ._base import ChoicePolicy
from ._runtime import PolicyContext

__all__ = ("KVAware", "LeastLoaded", "Random", "RoundRobin", "SessionAffinity", "conversation_key")


@attrs.define(eq=False)
class RoundRobin(ChoicePolicy):
    """Engines in turn: request ``k`` (in release order) goes to ``ctx.engines[k mod n]``,
    where ``n`` is the number of engines accepting placements at that instant (engine ``k mod
    n`` in a cluster that never changes)."""

    name: str = attrs.field(default="round_robin", kw_only=True)
    _next: int = attrs.field(default=0, init=False)

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        """Return the next engine in turn."""
        engines = ctx.engines
        view = engines[self._next % len(engines)]
        self._next += 1
        return view.id


@attrs.define(eq=False)
class Random(ChoicePolicy):
    """A uniformly random engine per request among those accepting placements, drawn from
    the policy's seeded generator."""

    name: str = attrs.field(default="random", kw_only=True)

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        """Return the id of ``ctx.engines[ctx.rng.integers(n)]``."""
        engines = ctx.engines
        return engines[int(ctx.rng.integers(len(engines)))].id


def _load(view: EngineView) -> tuple[int, int]:
    return (view.outstanding_prefill_tokens + view.outstanding_decode_tokens, view.id)


@attrs.define(eq=False)
class LeastLoaded(ChoicePolicy):
    """The engine with the fewest outstanding tokens (prefill + decode); ties by lowest id."""

    name: str = attrs.field(default="least_loaded", kw_only=True)

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        """Return the least loaded engine."""
        return min(ctx.engines, key=_load).id


@attrs.define(eq=False)
class KVAware(ChoicePolicy):
    """Prefix-cache-aware placement: the engine with the lowest cost wins.

    ``cost_i = prefill_weight * (outstanding_prefill_tokens_i + P - overlap_i)
    + outstanding_decode_tokens_i``, where ``P`` is the request's prompt length and
    ``overlap_i`` the prompt tokens engine ``i`` holds cached now
    (:meth:`PolicyContext.prefix_overlap_tokens`). Ties go to the lowest id.

    With ``temperature > 0`` the engine is drawn instead, with probability proportional to
    ``exp(-(cost_i - min cost) / (temperature * (max cost - min cost)))``, from the policy's
    seeded generator (all engines equally likely when every cost is equal).

    Args:
        prefill_weight: the weight of prefill tokens against decode tokens (>= 0).
        temperature: 0 for the deterministic lowest cost; > 0 for the softmax draw.
    """

    prefill_weight: float = attrs.field(default=1.0, kw_only=True)
    temperature: float = attrs.field(default=0.0, kw_only=True)
    name: str = attrs.field(default="kv_aware", kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not math.isfinite(self.prefill_weight) or self.prefill_weight < 0:
            raise ValueError(f"prefill_weight must be finite and >= 0, got {self.prefill_weight}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")

    def costs(self, request: Request, ctx: PolicyContext) -> list[float]:
        """Return every engine's cost for ``request``, in ``ctx.engines`` order."""
        costs = []
        for view in ctx.engines:
            to_compute = request.input_length - ctx.prefix_overlap_tokens(request, view.id)
            prefill = view.outstanding_prefill_tokens + to_compute
            costs.append(self.prefill_weight * prefill + view.outstanding_decode_tokens)
        return costs

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        """Return the lowest-cost engine (or the softmax draw with a temperature)."""
        engines = ctx.engines
        costs = self.costs(request, ctx)
        lowest = min(costs)
        if self.temperature == 0:
            return engines[costs.index(lowest)].id
        span = max(costs) - lowest
        if span == 0:
            return engines[int(ctx.rng.integers(len(costs)))].id
        logits = -(np.asarray(costs) - lowest) / (self.temperature * span)
        weights = np.exp(logits)
        return engines[int(ctx.rng.choice(len(costs), p=weights / weights.sum()))].id


def conversation_key(request: Request) -> str | None:
    """The stickiness key of a request: its lineage root, else its conversation, else None."""
    identity = request.identity
    if identity.lineage is not None:
        return identity.lineage.root_conversation_id
    return identity.conversation_id


@attrs.define(eq=False)
class SessionAffinity(ChoicePolicy):
    """Sticky placement per conversation, falling back to another policy.

    The key is the lineage root conversation when the request has lineage, else its
    conversation id. The first request of a key is placed by ``fallback.choose``; later
    requests of that key go to the engine that accepted the first. Requests without a key
    always use the fallback. Only the fallback's ``choose`` is used, not its hooks.

    When an engine starts draining (or is removed), the keys it was home to are forgotten:
    the next request of each is placed by the fallback among the engines accepting
    placements, and its engine becomes the key's new home.

    Args:
        fallback: the policy choosing for new keys (default :class:`LeastLoaded`).
    """

    fallback: ChoicePolicy = attrs.field(factory=LeastLoaded, kw_only=True)
    name: str = attrs.field(default="session_affinity", kw_only=True)
    _engine_of: dict[str, int] = attrs.field(factory=dict, init=False)

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        """Return the key's engine, or the fallback's choice for a new key."""
        key = conversation_key(request)
        if key is not None and key in self._engine_of:
            return self._engine_of[key]
        return self.fallback.choose(request, ctx)

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        """Dispatch to :meth:`choose`'s engine and remember it for the request's key."""
        if not ctx.engines:
            await ctx.wait_for_engines()
        placement = await ctx.dispatch(request, self.choose(request, ctx))
        if placement.rejected:
            ctx.reject(request, reason=placement.reason or "rejected")
            return
        key = conversation_key(request)
        if key is not None:
            self._engine_of.setdefault(key, placement.engine)

    def on_engine_draining(self, view: EngineView) -> None:
        """Forget the keys whose home is ``view.id``: they are re-homed by the fallback."""
        self._rehome(view.id)

    def on_engine_removed(self, view: EngineView) -> None:
        """Forget the keys whose home is ``view.id`` (none left, if it drained first)."""
        self._rehome(view.id)

    def _rehome(self, engine: int) -> None:
        gone = [key for key, home in self._engine_of.items() if home == engine]
        for key in gone:
            del self._engine_of[key]
