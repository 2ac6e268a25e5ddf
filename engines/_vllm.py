"""vLLM v1's scheduler (REFERENCE-engine §3.2-§3.3, §4.4): the default batching policy.

One pass at a time: the running requests first, in running order, each taking what it has
left of its prompt (or one decode step) within the token budget, a request that needs a block
the free queue cannot give preempting the newest running request; then, with nobody
preempted, waiting requests in queue order while budget, ``max_num_seqs`` and blocks last,
each sharing its longest cached prefix. Blocks come from :class:`~engines.KVCache` (vLLM's
free queue). Macro-stepping plans runs of steady decode passes, and of the chunks of one
prompt, with :class:`~engines._macro.MacroRun`.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import add, sub
from typing import TYPE_CHECKING, Any

import attrs

from simclock import InternalError

from ._core import RUNNING, EngineCore, Pass
from ._exceptions import EngineConfigError
from ._kv import KVCache
from ._macro import MacroRun

if TYPE_CHECKING:
    from ._config import EngineConfig

__all__ = ("VLLMScheduler",)

#: No prefix hits (a shared empty list: ``KVCache.allocate`` only reads it).
_NO_HITS: list[int] = []


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise EngineConfigError(f"VLLMScheduler.{attribute.name} must be a bool, got {value!r}")


@attrs.frozen(kw_only=True)
class VLLMScheduler:
    """vLLM v1's scheduling rules (the default), with two options that follow AISimulate's
    replay where it departs from vLLM, for cross-checking against it.

    Attributes:
        admit_whole_prompt: admit a waiting request only when the blocks of its whole
            remaining prompt (every position it still has to compute) would fit in the free
            queue, as AISimulate's replay does; vLLM (the default, ``False``) asks for the
            blocks of the first chunk only. Either way only the chunk's blocks are taken.
        evict_empty_first: take free blocks that cache nothing (never used, or released
            without a key: a partial block, an output block) before any free block holding
            a cached prefix, which is then evicted least recently released first, as
            AISimulate's replay does; vLLM (the default, ``False``) takes its free queue's
            head, whatever it holds.

    Raises:
        EngineConfigError: an option is not a bool.
    """

    admit_whole_prompt: bool = attrs.field(default=False, validator=_bool)
    evict_empty_first: bool = attrs.field(default=False, validator=_bool)

    @property
    def name(self) -> str:
        """``"vllm"``."""
        return "vllm"

    def options(self) -> dict[str, Any]:
        """The options that differ from their defaults."""
        return attrs.asdict(self, filter=lambda a, v: v != a.default)

    def make_cache(self, config: EngineConfig) -> KVCache:
        """vLLM's free queue, or AISimulate's order with :attr:`evict_empty_first`."""
        return KVCache(config.num_blocks, config.block_size, empty_first=self.evict_empty_first)

    def bind(self, core: EngineCore) -> VLLMRules:
        """The rules applied to ``core``."""
        return VLLMRules(core, self)


class VLLMRules:
    """:class:`VLLMScheduler` bound to one engine."""

    __slots__ = ("_admit_whole", "_chunked", "_max_seqs", "_max_tokens", "_watermark", "core")

    def __init__(self, core: EngineCore, scheduler: VLLMScheduler) -> None:
        self.core = core
        config = core.config
        # the frozen config's knobs, read once per pass
        self._max_tokens = config.max_num_batched_tokens
        self._max_seqs = config.max_num_seqs
        self._chunked = config.enable_chunked_prefill
        self._watermark = config.watermark_blocks
        self._admit_whole = scheduler.admit_whole_prompt

    def plan_run(
        self, now_ns: int, publish: Callable[[int], None], max_passes: int
    ) -> MacroRun | None:
        """A run of steady decode passes, possibly with one prompt's chunks
        (:meth:`MacroRun.plan <engines._macro.MacroRun.plan>`)."""
        return MacroRun.plan(self.core, now_ns, publish, max_passes)

    def schedule(self, now_ns: int) -> Pass | None:
        """Plan the pass starting at ``now_ns`` (§3.2); all KV effects happen here.

        Returns:
            The pass, priced by the timing model, or ``None`` if no token was scheduled.
        """
        core = self.core
        e = core.block_size
        kv = core.kv
        caching = core.caching
        budget = self._max_tokens
        running = core.running
        entries: list[Any]
        sched_n: list[int]
        comp: list[int]
        outb: list[int]
        prompts: list[int]
        samples: list[bool]
        steady = self._steady_columns() if running and core.role != "prefill" else None
        steady_count = 0
        if steady is None:
            entries, sched_n, comp, outb, prompts, samples = [], [], [], [], [], []
            nrun = len(running)
        else:
            # every running request took its decode step; go on to admissions
            comp, outb, prompts = steady
            entries = running[:]
            nrun = len(entries)
            sched_n = [1] * nrun
            samples = [True] * nrun
            budget -= nrun
            steady_count = nrun
            nrun = 0
        add_entry = entries.append
        add_n = sched_n.append
        add_comp = comp.append
        add_out = outb.append
        add_prompt = prompts.append
        add_sample = samples.append
        # N = 0 requests never sample; on a prefill engine the hidden bootstrap token does
        any_target = core.role == "prefill"
        preempted = False
        i = 0
        # num_computed advances as each entry is scheduled: nothing later in the schedule
        # phase reads an earlier entry's counter (a victim is never an earlier entry)
        while i < nrun and budget > 0:
            r = running[i]
            c = r.num_computed
            out = r.num_output
            prompt = r.prompt
            rem = prompt + out - c
            if rem == 1:  # a decode step (budget >= 1 here)
                n = 1
            elif rem > budget:
                n = budget
            elif rem == 0:
                i += 1
                continue
            else:
                n = rem
            end = c + n
            blocks = r.blocks
            if end > len(blocks) * e:
                need = -(-end // e) - len(blocks)
                while not kv.allocate(blocks, _NO_HITS, need):
                    v = running.pop()
                    core.preempt(v, now_ns)
                    preempted = True
                    if v is r:
                        break
                nrun = len(running)
                if r.state != RUNNING:
                    break
            if caching and end // e > r.nkeyed:
                core.cache_full(r, end)
            add_entry(r)
            add_n(n)
            add_comp(c)
            add_out(out)
            add_prompt(prompt)
            add_sample(n == rem and (any_target or r.target > 0))
            r.num_computed = end
            if r.pf:  # a steady decode entry (pf 0) stays at pf 0
                core.refresh(r)
            budget -= n
            i += 1
        if not preempted:
            waiting = core.waiting
            max_seqs = self._max_seqs
            chunked = self._chunked
            wm = self._watermark
            while waiting and budget > 0 and len(running) < max_seqs:
                r = waiting[0]
                num_tokens = r.prompt + r.num_output
                hits = core.lookup(r, (num_tokens - 1) // e) if r.num_computed == 0 else []
                hit = len(hits) * e
                start = r.num_computed + hit
                n = num_tokens - start
                if n > budget:
                    if not chunked:
                        break
                    n = budget
                need = -(-(start + n) // e) - len(r.blocks) - len(hits)
                if need < 0:
                    need = 0
                if self._admit_whole:
                    whole = -(-num_tokens // e) - len(r.blocks) - len(hits)
                    if whole > need and not kv.can_allocate(hits, whole, wm if entries else 0):
                        break
                if not kv.allocate(r.blocks, hits, need, wm if entries else 0):
                    break
                waiting.popleft()
                core.admit(r, now_ns, len(hits), hit, start, n)
                add_entry(r)
                add_n(n)
                add_comp(start)
                add_out(r.num_output)
                add_prompt(r.prompt)
                add_sample(start + n == num_tokens and (any_target or r.target > 0))
                budget -= n
        if not entries:
            return None
        plan = Pass(now_ns, entries, sched_n, comp, outb)
        plan.steady = steady_count
        core.price(plan, prompts, samples)
        return plan

    def _steady_columns(self) -> tuple[list[int], list[int], list[int]] | None:
        """Schedule every running request's decode step at once, or return ``None``.

        Applies when every running request has sampled and has exactly one position left
        to compute (its newest token), has no prompt work outstanding, the budget covers one
        position each and the free queue covers every block the steps start. Then the
        general loop of :meth:`schedule` would take each running request in order with
        ``n = 1``, allocate a block where the step starts one, register the blocks it fills
        and preempt nobody: this does exactly that, with list operations for the per-entry
        columns and the per-request loop reduced to the requests at a block boundary.

        Returns:
            ``(computed, output_before, prompt_length)`` columns of the running requests,
            whose ``num_computed`` has advanced by one; ``None`` with nothing changed.
        """
        core = self.core
        running = core.running
        k = len(running)
        if k > self._max_tokens:
            return None
        comp = [r.num_computed for r in running]
        outb = [r.num_output for r in running]
        prompts = [r.prompt for r in running]
        if 0 in outb or list(map(sub, map(add, prompts, outb), comp)).count(1) != k:
            return None
        if [r.pf for r in running].count(0) != k:
            return None
        e = core.block_size
        caching = core.caching
        # A running request holds at least ceil(c / e) blocks and, with caching, has at least
        # its c // e full blocks keyed, so only a step from a c with c % e == 0 can need a
        # block and only one with c % e == e - 1 can fill one; the exact conditions are then
        # checked on those few.
        last = e - 1
        special = [
            r
            for r in [running[j] for j, c in enumerate(comp) if c % e == 0 or c % e == last]
            if r.num_computed >= len(r.blocks) * e
            or (caching and (r.num_computed + 1) // e > r.nkeyed)
        ]
        if special:
            kv = core.kv
            if sum(1 for r in special if r.num_computed >= len(r.blocks) * e) > kv.free_count:
                return None
            for r in special:
                end = r.num_computed + 1
                blocks = r.blocks
                # a step past the last block starts exactly one more
                if end > len(blocks) * e and not kv.take_one(blocks):
                    raise InternalError(f"steady pass could not allocate for {r.rid!r}")
                if caching and end // e > r.nkeyed:
                    core.cache_full(r, end)
        for r in running:
            r.num_computed += 1
        return comp, outb, prompts
