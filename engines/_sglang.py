"""SGLang's scheduling rules (``--scheduler sglang``), from SGLang 0.5.23's source.

Every rule below names the function of SGLang 0.5.23 (``python/sglang/srt/...`` of the
``sglang==0.5.23`` distribution; line numbers of that version) it follows.

Design
------
SGLang keeps KV in *pages* of ``page_size`` tokens (1 by default) indexed by a radix tree
over token ids. Here a page is an engine block: the scheduler requires
``EngineConfig.block_size == page_size`` and uses the engine's :class:`~engines.KVCache`, whose
keys chain content block by block, so a lookup of a request's keys is the radix tree's
``match_prefix`` at page granularity (token granularity with page size 1). The cache is built
with ``empty_first``: blocks that cache nothing are taken before any cached block, as SGLang
allocates from its free list and evicts from the tree only for what the free list lacks
(``TokenToKVPoolAllocator.evict_to_free_tokens``, ``mem_cache/allocator/base.py:153``).
Cached free blocks are then taken in release order, the least recently released first; a
request releases its blocks last first, and a request touching a block touches every block
before it, so a block is always evicted before its parent, as ``RadixCache.evict``
(``mem_cache/radix_cache.py:552``) evicts LRU *leaves*.

One pass is one SGLang scheduler iteration (``Scheduler.get_next_batch_to_run``,
``managers/scheduler.py:3894``): a prefill batch when one can be formed, else a decode batch
of every running request (retracting some when decode memory runs out); with
``enable_mixed_chunk`` the running requests' decode steps join the prefill batch.

Rules
-----
1. Prefill first (``get_next_batch_to_run``, scheduler.py:3894-3986): a prefill batch runs
   whenever one can be formed; the decode batch runs only otherwise.
2. No prefill is tried while ``batch_is_full`` holds, nor with nothing waiting, unless a
   chunked prefill is in progress (``_get_new_batch_prefill_raw``, scheduler.py:4099-4102).
   ``batch_is_full`` is set when the running requests plus the batch reach
   ``max_running_requests`` (``EngineConfig.max_num_seqs``; ``get_num_allocatable_reqs``,
   scheduler.py:4029, and 4120-4126, 4224-4237), or when an admission ends for want of
   memory with something admitted or running (scheduler.py:4272-4277); it is cleared when a
   request leaves the running batch (scheduler.py:3944-3966, 4545) or the batch is empty.
3. Queue order (``SchedulePolicy.calc_priority``, managers/schedule_policy.py:213): ``fcfs``
   keeps the waiting queue's order; ``lpm`` sorts it (stably, in place) by the longest cached
   prefix (``_sort_by_longest_prefix``, :441), except that a request whose cached prefix is at
   most 32 tokens while a request before it in this round shares at least 32 tokens with it is
   put last (in-batch prefix caching, ``_compute_prefix_matches``, :346, thresholds :110-121);
   with more than 128 waiting requests ``lpm`` falls back to ``fcfs``
   (``_determine_active_policy``, :304), and without prefix caching it is ``fcfs``
   (``_validate_and_adjust_policy``).
4. The prefill budget (``PrefillAdder.__init__``, schedule_policy.py:607, and
   ``PrefillBudget``, mem_cache/prefill_budget.py:62): ``rem_input_tokens = max_prefill_tokens``,
   ``rem_chunk_tokens = chunked_prefill_size`` (each less the running batch size with mixed
   chunking), and ``rem_total_tokens = free + evictable - offset``, where the offset starts
   with ``new_token_ratio * min(max_new_tokens - output, 4096)`` summed over the running
   requests (``_get_running_request_total_token_offset``, :785): the new-token-ratio
   reservation for their future decode tokens.
5. Admission of one waiting request (``add_one_req``, :1395; ``_select_prefill_admission``,
   :1592): its cached prefix (at most ``input - 1`` tokens, page-aligned;
   ``Req._compute_max_prefix_len``, schedule_batch.py:1766) is locked, then it needs
   ``extend + min(max_new_tokens - output, 4096) + page_size < rem_total_tokens`` or
   admission stops (NO_TOKEN); without chunked prefill a request after the first stops
   admission when its page-rounded extend reaches ``rem_input_tokens``; a request whose
   page-rounded extend exceeds ``rem_chunk_tokens`` is admitted with a first chunk of
   ``rem_chunk_tokens`` rounded down to a page boundary and becomes *the* chunked request.
   Each admission charges (``_update_prefill_budget``, :895; ``PrefillBudget.reserve``):
   ``ceil_page(extend) + page_size + min(max_new_tokens, 4096)`` (no decode tokens for a
   chunk that does not end the prompt) to the offset, ``ceil_page(extend)`` to
   ``rem_input_tokens`` and ``rem_chunk_tokens``. After each admission admission goes on only
   while ``rem_total_tokens > 0`` and both token budgets are positive (``budget_state``, :874).
6. The chunked request goes first in the next prefill batch with what is left of
   ``rem_chunk_tokens`` (capped by ``rem_total_tokens`` when that is positive;
   ``add_chunked_req``, :1140, ``PrefillBudget.available_chunk_tokens``).
7. Decode (``update_running_batch``, scheduler.py:4459): when the running requests' next
   decode step needs more pages than are free or evictable (``ScheduleBatch.check_decode_mem``,
   schedule_batch.py:3432; ``new_tokens_required_next_decode``, :3403), requests are retracted
   (``retract_decode``, :3451): fewest output tokens first, ties longest prompt first, then
   the last in batch order (``_get_decode_retraction_order``, :3542); at least one, then
   more while the step still does not fit, always keeping one. A retracted request frees its
   pages (its prompt's stay cached; ``release_req``, :2360) and goes to the *back* of the
   waiting queue (``Scheduler._add_request_to_queue``, scheduler.py:3480); the ratio becomes
   ``min(1, (output tokens + 20 * kept) / (sum of max_new_tokens + 1))`` over the kept
   requests (``NewTokenRatioTracker.estimate_new_token_ratio_after_retract``,
   managers/scheduler_components/new_token_ratio_tracker.py:41). A decode step without
   retraction decays the ratio by ``(init - min) / decay_steps`` down to ``min``
   (``decay_step``, :34); an idle engine resets it to ``init`` (``Scheduler.on_idle``,
   scheduler.py:5318). ``init = min(0.7 * schedule_conservativeness, 1)``,
   ``min = min(init * 0.14, 1)``, ``decay_steps = 600`` (``from_config``, :21; environ.py:646-650).
8. Mixed chunking (scheduler.py:4375-4416): the decode steps of the running requests join a
   prefill batch, after its prefills, when the step fits the memory left (no retraction then:
   otherwise they sit the pass out).

Not modelled: whole-node eviction (SGLang frees a whole radix leaf, possibly more tokens than
needed; here a page at a time, as needed), the refresh of a node's access time by a lookup
that admits nothing (LPM's ranking), the immediate eviction of ``20 * kept`` tokens at a
retraction (``release_req``; here blocks are evicted when taken), the cut of a request's
output by SGLang's cap of ``max_new_tokens`` to the pool (``init_req_max_new_tokens``,
scheduler.py:2693; the capped value, ``capacity - ceil_page(prompt) - page_size - 1``, is used
in every estimate above, so an idle engine always admits, but the output runs to the engine's
length), the overlap scheduler, priorities, LoRA, hierarchical cache, and the P/D roles (the
scheduler runs aggregated engines only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from simclock import InternalError

from ._core import RUNNING, EngineCore, Pass, Seq
from ._exceptions import EngineConfigError
from ._kv import KVCache

if TYPE_CHECKING:
    from ._config import EngineConfig
    from ._macro import MacroRun

__all__ = ("SGLangRules", "SGLangScheduler")

#: LPM falls back to FCFS above this many waiting requests (schedule_policy.py:304).
LPM_MAX_QUEUE = 128
#: In-batch prefix caching thresholds, in tokens (schedule_policy.py:110-121).
IN_BATCH_CHECK_TOKENS = 32
IN_BATCH_DEPRIORITIZE_TOKENS = 32

# PrefillAdder.budget_state results (schedule_policy.py:571)
_CONTINUE = 0
_NO_TOKEN = 1
_OTHER = 2


def _int(low: int) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise EngineConfigError(
                f"SGLangScheduler.{attribute.name} must be an int >= {low}, got {value!r}"
            )

    return check


def _optional_size(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _int(1)(instance, attribute, value)


def _ratio(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value <= 1.0:
        raise EngineConfigError(
            f"SGLangScheduler.{attribute.name} must be a number in (0, 1], got {value!r}"
        )


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value < 1e9:
        raise EngineConfigError(
            f"SGLangScheduler.{attribute.name} must be a positive number, got {value!r}"
        )


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise EngineConfigError(f"SGLangScheduler.{attribute.name} must be a bool, got {value!r}")


def _policy(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ("lpm", "fcfs"):
        raise EngineConfigError(
            f"SGLangScheduler.schedule_policy must be 'lpm' or 'fcfs', got {value!r}"
        )


@attrs.frozen(kw_only=True)
class SGLangScheduler:
    """SGLang's scheduling rules (SGLang 0.5.23), with its defaults.

    Attributes:
        page_size: tokens per KV page; must equal ``EngineConfig.block_size`` (SGLang's
            default is 1: token-granular prefix matching).
        schedule_policy: ``"fcfs"`` (SGLang's default) or ``"lpm"`` (longest prefix match).
        chunked_prefill_size: tokens of prompt per prefill batch; ``None`` (the default)
            takes ``EngineConfig.max_num_batched_tokens``. Chunked prefill is on as
            ``EngineConfig.enable_chunked_prefill`` says.
        max_prefill_tokens: tokens of prompt per prefill batch without chunking (16384).
        enable_mixed_chunk: the running requests' decode steps join prefill batches.
        init_new_token_ratio: ``SGLANG_INIT_NEW_TOKEN_RATIO`` (0.7).
        min_new_token_ratio_factor: ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` (0.14).
        new_token_ratio_decay_steps: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` (600).
        schedule_conservativeness: scales the initial ratio (1.0).
        clip_max_new_tokens: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` (4096).
        retract_decode_steps: ``SGLANG_RETRACT_DECODE_STEPS`` (20).

    Raises:
        EngineConfigError: an option has a bad value.
    """

    page_size: int = attrs.field(default=1, validator=_int(1))
    schedule_policy: str = attrs.field(default="fcfs", validator=_policy)
    chunked_prefill_size: int | None = attrs.field(default=None, validator=_optional_size)
    max_prefill_tokens: int = attrs.field(default=16384, validator=_int(1))
    enable_mixed_chunk: bool = attrs.field(default=False, validator=_bool)
    init_new_token_ratio: float = attrs.field(default=0.7, validator=_ratio)
    min_new_token_ratio_factor: float = attrs.field(default=0.14, validator=_ratio)
    new_token_ratio_decay_steps: int = attrs.field(default=600, validator=_int(1))
    schedule_conservativeness: float = attrs.field(default=1.0, validator=_positive)
    clip_max_new_tokens: int = attrs.field(default=4096, validator=_int(1))
    retract_decode_steps: int = attrs.field(default=20, validator=_int(0))

    @property
    def name(self) -> str:
        """``"sglang"``."""
        return "sglang"

    def options(self) -> dict[str, Any]:
        """The options that differ from their defaults."""
        return attrs.asdict(self, filter=lambda a, v: v != a.default)

    @property
    def ratios(self) -> tuple[float, float, float]:
        """``(init, min, decay per step)`` of the new-token ratio (``from_config``)."""
        init = min(self.init_new_token_ratio * self.schedule_conservativeness, 1.0)
        low = min(init * self.min_new_token_ratio_factor, 1.0)
        return init, low, (init - low) / self.new_token_ratio_decay_steps

    def make_cache(self, config: EngineConfig) -> KVCache:
        """The engine's blocks as SGLang's pages: free pages before evicting cached ones.

        Raises:
            EngineConfigError: ``config.block_size`` is not the page size, or the engine
                has a P/D role.
        """
        if config.block_size != self.page_size:
            raise EngineConfigError(
                f"SGLangScheduler.page_size {self.page_size} must equal "
                f"EngineConfig.block_size {config.block_size} (a page is a KV block)"
            )
        if config.role != "aggregated":
            raise EngineConfigError(
                f"SGLangScheduler runs aggregated engines only, not role {config.role!r}"
            )
        return KVCache(config.num_blocks, config.block_size, empty_first=True)

    def bind(self, core: EngineCore) -> SGLangRules:
        """The rules applied to ``core``."""
        return SGLangRules(core, self)


class SGLangRules:
    """:class:`SGLangScheduler` bound to one engine, with SGLang's per-engine state: the
    new-token ratio, ``batch_is_full`` and the chunked request."""

    __slots__ = (
        "_chunk",
        "_clip",
        "_count",
        "_decay",
        "_init",
        "_last_end",
        "_lpm",
        "_max_prefill",
        "_min",
        "_mixed",
        "_steps",
        "batch_is_full",
        "chunked",
        "core",
        "ratio",
    )

    def __init__(self, core: EngineCore, scheduler: SGLangScheduler) -> None:
        self.core = core
        config = core.config
        self._init, self._min, self._decay = scheduler.ratios
        self.ratio = self._init
        self._chunk: int | None = None
        if config.enable_chunked_prefill:
            self._chunk = scheduler.chunked_prefill_size or config.max_num_batched_tokens
        self._max_prefill = scheduler.max_prefill_tokens
        self._mixed = scheduler.enable_mixed_chunk and self._chunk is not None
        self._lpm = scheduler.schedule_policy == "lpm" and core.caching
        self._clip = scheduler.clip_max_new_tokens
        self._steps = scheduler.retract_decode_steps
        self.batch_is_full = False
        self.chunked: Seq | None = None
        self._count = 0
        self._last_end = 0

    def plan_run(
        self, now_ns: int, publish: Callable[[int], None], max_passes: int
    ) -> MacroRun | None:
        """``None``: the engine steps SGLang's rules one pass at a time."""
        return None

    # -- the pass ----------------------------------------------------------------------------

    def schedule(self, now_ns: int) -> Pass | None:
        """Plan the pass starting at ``now_ns``: a prefill batch if one can be formed, else a
        decode batch (rule 1); all KV effects happen here."""
        core = self.core
        running = core.running
        if len(running) < self._count:  # a request left the running batch (rule 2)
            self.batch_is_full = False
        chunked = self.chunked
        if chunked is not None and chunked.state != RUNNING:  # cancelled
            chunked = self.chunked = None
        if not running and now_ns > self._last_end:
            self.ratio = self._init  # the engine was idle (rule 7)
        decoding = [r for r in running if r is not chunked] if chunked else running[:]
        if not decoding:
            self.batch_is_full = False
        plan = self._prefill(now_ns, decoding)
        if plan is None and decoding:
            plan = self._decode(now_ns, decoding)
        self._count = len(core.running)
        if plan is not None:
            self._last_end = plan.end_ns
        return plan

    # -- prefill (rules 2-6, 8) ------------------------------------------------------------

    def _prefill(self, now_ns: int, decoding: list[Seq]) -> Pass | None:
        core = self.core
        waiting = core.waiting
        chunked = self.chunked
        if (self.batch_is_full or not waiting) and chunked is None:
            return None
        bs = len(decoding)
        max_seqs = core.config.max_num_seqs
        if chunked is None and bs >= max_seqs:
            self.batch_is_full = True
            return None
        if self._lpm and 1 < len(waiting) <= LPM_MAX_QUEUE:
            self._sort_lpm()
        e = core.block_size
        kv = core.kv
        clip = self._clip
        ratio = self.ratio
        mixed = bs if self._mixed else 0
        rem_input = self._max_prefill - mixed
        rem_chunk = None if self._chunk is None else self._chunk - mixed
        max_new = self._max_new
        offset = mixed + sum(ratio * min(max(max_new(r) - r.num_output, 0), clip) for r in decoding)
        # Pages are taken at admission here (SGLang takes them once the batch is formed):
        # the pages taken in this round count as free for the rest of the round's checks.
        taken = 0
        entries: list[Seq] = []
        sched_n: list[int] = []
        comp: list[int] = []
        samples: list[bool] = []

        def state() -> int:  # PrefillAdder.budget_state
            if (kv.free_count + taken) * e - offset <= 0:
                return _NO_TOKEN
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                return _OTHER
            return _CONTINUE

        if chunked is not None:  # add_chunked_req (rule 6)
            if rem_chunk is None:
                raise InternalError("a chunked request without chunked prefill")
            left = int((kv.free_count + taken) * e - offset)
            limit = min(rem_chunk, left) if left > 0 else rem_chunk
            c = chunked.num_computed
            cand = chunked.prompt + chunked.num_output - c
            n = min(cand, limit)
            # what the free pages hold at most (SGLang would fail the allocation)
            n = min(n, (len(chunked.blocks) + kv.free_count) * e - c)
            if n > 0:
                need = -(-(c + n) // e) - len(chunked.blocks)
                if need > 0 and not kv.allocate(chunked.blocks, [], need):
                    raise InternalError(f"chunk of {chunked.rid!r} could not allocate")
                taken += max(need, 0)
                last = n == cand
                charge = -(-n // e) * e
                offset += charge + e + (min(max_new(chunked), clip) if last else 0)
                rem_input -= charge
                rem_chunk -= charge
                core.cache_full(chunked, c + n)
                entries.append(chunked)
                sched_n.append(n)
                comp.append(c)
                samples.append(last and chunked.target > 0)
                chunked.num_computed = c + n
                core.refresh(chunked)
                if last:
                    self.chunked = None
        admitted = 0
        for r in waiting:
            if state() == _OTHER:
                break
            if len(entries) >= max_seqs - bs:
                self.batch_is_full = True
                break
            num_tokens = r.prompt + r.num_output
            hits = core.lookup(r, (num_tokens - 1) // e)
            prefix = len(hits) * e
            extend = num_tokens - prefix
            total = extend + min(max(max_new(r) - r.num_output, 0), clip) + e
            locked = list(map(kv.ref.__getitem__, hits)).count(0) if hits else 0
            if total >= (kv.free_count + taken - locked) * e - offset:
                result = _NO_TOKEN
            else:
                paged = -(-extend // e) * e
                if rem_chunk is None and entries and paged >= rem_input:
                    result = _OTHER
                else:
                    n = extend
                    decode = min(max_new(r), clip)
                    if rem_chunk is not None and paged > rem_chunk:
                        n = (prefix + rem_chunk // e * e) // e * e - prefix
                        decode = 0
                    if n <= 0:
                        result = _OTHER
                    else:
                        need = -(-(prefix + n) // e) - len(hits)
                        if not kv.allocate(r.blocks, hits, need):
                            raise InternalError(f"admission of {r.rid!r} could not allocate")
                        taken += need
                        charge = -(-n // e) * e
                        offset += charge + e + decode
                        rem_input -= charge
                        if rem_chunk is not None:
                            rem_chunk -= charge
                        if n < extend:
                            self.chunked = r
                        core.admit(r, now_ns, len(hits), prefix, prefix, n)
                        entries.append(r)
                        sched_n.append(n)
                        comp.append(prefix)
                        samples.append(n == extend and r.target > 0)
                        admitted += 1
                        result = state()
            if result != _CONTINUE:
                if result == _NO_TOKEN:
                    self.batch_is_full = bool(entries) or bool(decoding)
                break
        for _ in range(admitted):
            waiting.popleft()
        if not entries:
            return None
        outb = [r.num_output for r in entries]
        prompts = [r.prompt for r in entries]
        if self._mixed and decoding and self._decode_need(decoding) <= kv.free_count:
            self._step(decoding, entries, sched_n, comp, outb, prompts, samples)
        plan = Pass(now_ns, entries, sched_n, comp, outb)
        core.price(plan, prompts, samples)
        return plan

    def _max_new(self, r: Seq) -> int:
        """SGLang's ``max_new_tokens`` of ``r``: its output length, capped to
        ``capacity - ceil_page(prompt) - page_size - 1`` (``init_req_max_new_tokens``,
        scheduler.py:2693, ``max_new_tokens_for_memory``, mem_cache/allocator/base.py:93), so
        an idle engine always admits a request (its output is not cut here)."""
        e = self.core.block_size
        return max(0, min(r.target, self.core.kv_capacity - -(-r.prompt // e) * e - e - 1))

    def _sort_lpm(self) -> None:
        """Sort the waiting queue by longest cached prefix, in place (rule 3)."""
        core = self.core
        e = core.block_size
        # the key of the block completing the first 32 tokens: a request whose key there
        # is another's shares at least those 32 tokens with it (keys chain their prefix)
        k = -(-IN_BATCH_DEPRIORITIZE_TOKENS // e)
        seen: set[int] = set()
        ranked: list[tuple[float, Seq]] = []
        for r in core.waiting:
            num_tokens = r.prompt + r.num_output
            hits = len(core.lookup(r, num_tokens // e)) * e
            rank: float = -min(hits, num_tokens - 1)
            if hits <= IN_BATCH_CHECK_TOKENS:
                keys = r.keys
                if len(keys) >= k:
                    if keys[k - 1] in seen:
                        rank = float("inf")
                    else:
                        seen.add(keys[k - 1])
            ranked.append((rank, r))
        ranked.sort(key=lambda x: x[0])
        core.waiting.clear()
        core.waiting.extend(r for _, r in ranked)

    # -- decode (rule 7) -------------------------------------------------------------------

    def _decode_need(self, reqs: list[Seq]) -> int:
        """Pages the next decode step of ``reqs`` starts (``new_tokens_required_next_decode``)."""
        e = self.core.block_size
        return sum(1 for r in reqs if r.num_computed >= len(r.blocks) * e)

    def _decode(self, now_ns: int, decoding: list[Seq]) -> Pass | None:
        core = self.core
        kv = core.kv
        if self._decode_need(decoding) > kv.free_count:
            decoding = self._retract(now_ns, decoding)
        else:
            self.ratio = max(self.ratio - self._decay, self._min)
        entries: list[Seq] = []
        sched_n: list[int] = []
        comp: list[int] = []
        outb: list[int] = []
        prompts: list[int] = []
        samples: list[bool] = []
        self._step(decoding, entries, sched_n, comp, outb, prompts, samples)
        plan = Pass(now_ns, entries, sched_n, comp, outb)
        plan.steady = len(entries)  # every entry samples a token that is not its first
        core.price(plan, prompts, samples)
        return plan

    def _step(
        self,
        reqs: list[Seq],
        entries: list[Seq],
        sched_n: list[int],
        comp: list[int],
        outb: list[int],
        prompts: list[int],
        samples: list[bool],
    ) -> None:
        """Schedule one decode step of each of ``reqs`` (their pages are free)."""
        core = self.core
        kv = core.kv
        e = core.block_size
        caching = core.caching
        for r in reqs:
            c = r.num_computed
            if c >= len(r.blocks) * e and not kv.take_one(r.blocks):
                raise InternalError(f"decode step of {r.rid!r} could not allocate")
            if caching and (c + 1) // e > r.nkeyed:
                core.cache_full(r, c + 1)
            entries.append(r)
            sched_n.append(1)
            comp.append(c)
            outb.append(r.num_output)
            prompts.append(r.prompt)
            samples.append(True)
            r.num_computed = c + 1

    def _retract(self, now_ns: int, decoding: list[Seq]) -> list[Seq]:
        """Retract running requests until the decode step fits (``retract_decode``);
        returns the kept ones in running order."""
        core = self.core
        order = sorted(
            range(len(decoding)),
            key=lambda i: (decoding[i].num_output, -decoding[i].prompt),
            reverse=True,
        )
        first = True
        while first or self._decode_need([decoding[i] for i in order]) > core.kv.free_count:
            if len(order) == 1:
                break
            first = False
            v = decoding[order.pop()]
            core.running.remove(v)
            core.preempt(v, now_ns)
            core.waiting.popleft()
            core.waiting.append(v)  # retracted requests queue at the back
            # its decode pages are freed, not cached: later output keys are new ones
            v.serial = core.keyer.new_serial()
            del v.keys[v.prompt // core.block_size :]
        kept = sorted(order)
        if self._decode_need([decoding[i] for i in kept]) > core.kv.free_count:
            raise InternalError("a lone running request's decode step does not fit")
        reqs = [decoding[i] for i in kept]
        decoded = sum(r.num_output for r in reqs)
        budget = sum(map(self._max_new, reqs))
        self.ratio = min(1.0, (decoded + self._steps * len(reqs)) / (budget + 1))
        self.batch_is_full = False
        return reqs
