"""A policy of one's own, to compare with the built-ins: the engine holding the longest cached
prefix of the prompt when that prefix is long enough to matter, else the least loaded engine.

It runs wherever a built-in runs, options included::

    simclock replay --policy docs/examples/compare_prefix_first.py:PrefixFirst:min_cached_tokens=512
"""

from __future__ import annotations

from loadgen import Request
from policies import ChoicePolicy, PolicyContext


class PrefixFirst(ChoicePolicy):
    """Follow the cache when it holds at least ``min_cached_tokens`` of the prompt."""

    name = "prefix_first"

    def __init__(self, min_cached_tokens: int = 1024) -> None:
        self.min_cached_tokens = min_cached_tokens

    def choose(self, request: Request, ctx: PolicyContext) -> int:
        cached = {view.id: ctx.prefix_overlap_tokens(request, view.id) for view in ctx.engines}
        best = max(ctx.engines, key=lambda view: (cached[view.id], -view.index))
        if cached[best.id] >= self.min_cached_tokens:
            return best.id
        least_loaded = min(
            ctx.engines,
            key=lambda view: (
                view.outstanding_prefill_tokens + view.outstanding_decode_tokens,
                view.index,
            ),
        )
        return least_loaded.id
