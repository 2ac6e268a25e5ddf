"""The engine's synchronous state machine: queues, KV cache, commit, roles (REFERENCE-engine
§3, §6).

:class:`EngineCore` knows nothing of the event loop: every method takes the current virtual
time explicitly. :class:`~engines.Engine` wraps it in a coroutine and the dispatch handshake.
Which requests a pass holds is decided by the engine's scheduler (:mod:`engines._scheduler`),
which works on the core through the methods of its "scheduler's view" section.
"""

from __future__ import annotations

import math
from collections import deque
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from loadgen import Request
from simclock import InternalError

from ._exceptions import PassTimingError
from ._journal import EventKind, Journal, LifecycleEvent, RequestTrace
from ._keys import (
    BlockKeyer,
    output_key,
)
from ._pass import PassShape, TimingModel, model_method
from ._timing import SMALL_PASS_ENTRIES
from ._tokentimes import TokenTimes

if TYPE_CHECKING:
    from ._config import EngineConfig
    from ._kv import KVCache
    from ._scheduler import EngineScheduler

__all__ = ("EngineCore", "Pass", "Seq")

WAITING = "waiting"
RUNNING = "running"
HELD = "held"
RESERVING = "reserving"
RESERVED = "reserved"
DONE = "done"


_times = attrgetter("times")


class Seq:
    """One request inside one engine, with its live counters (REFERENCE-engine §1).

    ``state`` is one of ``waiting``, ``running``, ``held`` (prefill role: prompt done,
    blocks kept for the transfer), ``reserving`` (decode role: in the reservation queue),
    ``reserved`` (decode role: blocks reserved, transfer in flight), ``done``.
    """

    __slots__ = (
        "blocks",
        "dec",
        "keys",
        "nkeyed",
        "num_computed",
        "num_output",
        "num_preemptions",
        "pf",
        "prompt",
        "request",
        "rid",
        "serial",
        "state",
        "target",
        "times",
        "trace",
    )

    def __init__(self, request: Request, target: int, trace: RequestTrace) -> None:
        """Wrap ``request``; ``target`` is its output length after context truncation."""
        self.request = request
        self.rid = request.id
        self.prompt = request.input_length
        self.target = target
        self.trace = trace
        self.times = trace.token_times_ns  # appended to directly when no event is wanted
        self.num_output = 0
        self.num_computed = 0
        self.num_preemptions = 0
        self.serial = 0
        self.blocks: list[int] = []
        self.nkeyed = 0
        # keys of blocks 0..: with caching, every full prompt block's from placement on, and
        # those of blocks holding output positions once they are needed
        self.keys: list[int] = []
        self.state = WAITING
        self.pf = 0
        self.dec = 0


class Pass:
    """A planned pass: its entries in scheduling order and its interval."""

    __slots__ = (
        "computed",
        "end_ns",
        "entries",
        "output_before",
        "scheduled",
        "start_ns",
        "steady",
    )

    def __init__(
        self,
        start_ns: int,
        entries: list[Seq],
        scheduled: list[int],
        computed: list[int],
        output_before: list[int],
    ) -> None:
        """Hold the entries; ``end_ns`` is set once the timing model has priced the pass."""
        self.start_ns = start_ns
        self.end_ns = start_ns
        self.entries = entries
        self.scheduled = scheduled
        self.computed = computed
        self.output_before = output_before
        # the leading entries that are running requests' decode steps, scheduled together
        # (see engines._vllm.VLLMRules._steady_columns)
        self.steady = 0


class EngineCore:
    """Queues + KV cache + commit of one engine, driven with explicit virtual times; its
    scheduler (``config.scheduler``, bound to it as :attr:`scheduler`) decides each pass.

    What a scheduler reads and calls (the scheduler's view): the queues :attr:`waiting` and
    :attr:`running` with their :class:`Seq` counters, :attr:`kv` (the cache the scheduler
    made), :attr:`config`, :attr:`role`, :attr:`block_size`, :attr:`caching`,
    :attr:`max_tokens` (the pass budget); :meth:`lookup` (cached prefix blocks of a request),
    :meth:`cache_full` (key and register the blocks a pass fills), :meth:`refresh` (the
    outstanding-work counters after a request's counters moved), :meth:`preempt`,
    :meth:`admit` (a waiting request into the running batch), :meth:`record` (a lifecycle
    event) and :meth:`price` (time and count a planned pass).

    Request flow: :meth:`enqueue` (engine arrival) -> waiting -> running (admission at a pass
    start) -> finished, with preemption back to the waiting front. Prefill role: at prompt
    completion the request leaves running and its blocks are *held* until
    :meth:`release_held`. Decode role: :meth:`enqueue_reservation` -> reservation queue ->
    reserved (:meth:`process_reservations`) -> :meth:`activate` -> waiting with the prompt
    KV resident.
    """

    def __init__(
        self,
        index: int,
        config: EngineConfig,
        timing: TimingModel,
        keyer: BlockKeyer,
        journal: Journal,
    ) -> None:
        """Build an empty engine state."""
        self.index = index
        self.config = config
        self.timing = timing
        self.keyer = keyer
        self.journal = journal
        self.role = config.role
        self.block_size = config.block_size
        self.caching = config.enable_prefix_caching
        self.kv: KVCache = config.scheduler.make_cache(config)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.seqs: dict[str, Seq] = {}
        self.held: dict[str, Seq] = {}
        self.reservations: deque[Seq] = deque()
        self.reserved: dict[str, Seq] = {}
        self.prefill_outstanding = 0
        self.decode_outstanding = 0
        self.passes = 0
        self.busy_ns = 0
        # entries summed over the passes (the mean batch size is this over ``passes``)
        self.entries = 0
        # the most requests running at once
        self.peak_running = 0
        self.max_tokens = config.max_num_batched_tokens
        self.kv_capacity = config.num_blocks * config.block_size
        # the model's shortcuts, where it has them (engines._pass.model_method)
        self._small_pass_ms = model_method(timing, "pass_time_ms_lists")
        self.steady_decode_ms = model_method(timing, "steady_decode_ms")
        # a running request was cancelled while a pass was being timed
        self._cancelled_in_pass = False
        self.scheduler: EngineScheduler = config.scheduler.bind(self)

    # -- events ------------------------------------------------------------------------------

    def record(
        self, t: int, kind: EventKind, s: Seq, detail: tuple[tuple[str, object], ...] = ()
    ) -> None:
        """Record the lifecycle event ``kind`` of ``s`` on this engine at ``t``."""
        self.journal.record(LifecycleEvent(t, kind, s.rid, self.index, detail))

    # -- outstanding work counters -----------------------------------------------------------

    def refresh(self, s: Seq) -> None:
        """Bring the engine's outstanding prefill and decode token counts up to date with
        ``s``'s counters (after its ``num_computed``, ``num_output`` or state moved)."""
        rem = s.prompt + s.num_output - s.num_computed
        if s.state == RESERVING or s.state == RESERVED:
            pf = 0  # its prompt KV comes by transfer
        elif rem == 1 and (s.num_output >= 1 or self.role == "decode"):
            pf = 0
        else:
            pf = rem
        self.prefill_outstanding += pf - s.pf
        s.pf = pf
        dec = 0 if self.role == "prefill" else s.target - s.num_output
        self.decode_outstanding += dec - s.dec
        s.dec = dec

    def admit(
        self, s: Seq, now_ns: int, hit_blocks: int, reused_tokens: int, start: int, n: int
    ) -> None:
        """Move ``s``, taken from the waiting queue with its blocks allocated, into the running
        batch with ``n`` positions scheduled from ``start``: its ``hit_blocks`` shared prefix
        blocks are keyed, the blocks the pass fills are registered, and ``ADMITTED`` is
        recorded (with ``reused_tokens``) while ``num_computed`` is ``start``."""
        running = self.running
        running.append(s)
        if len(running) > self.peak_running:
            self.peak_running = len(running)
        s.state = RUNNING
        if hit_blocks:
            s.nkeyed = hit_blocks
        s.num_computed = start
        self.cache_full(s, start + n)
        self.record(
            now_ns,
            EventKind.ADMITTED,
            s,
            (
                ("reused_tokens", reused_tokens),
                ("is_readmission", s.num_preemptions > 0),
                ("role", self.role),
            ),
        )
        s.num_computed = start + n
        self.refresh(s)

    def _drop(self, s: Seq) -> None:
        self.prefill_outstanding -= s.pf
        self.decode_outstanding -= s.dec
        s.pf = 0
        s.dec = 0

    # -- arrival -----------------------------------------------------------------------------

    def rejection(self, request: Request) -> tuple[str, str] | None:
        """Return ``(reason, message)`` if §4.8 refuses ``request`` here, else ``None``."""
        cfg = self.config
        p = request.input_length
        if p >= cfg.context_length:
            return (
                "prompt_too_long",
                f"prompt of {p} tokens does not fit context_length {cfg.context_length}",
            )
        target = min(request.output_length, cfg.context_length - p)
        positions = p if self.role == "prefill" else max(p, p + target - 1)
        blocks = -(-positions // cfg.block_size)
        if blocks > cfg.num_blocks:
            return (
                "exceeds_kv_capacity",
                f"needs {blocks} KV blocks, engine has {cfg.num_blocks}",
            )
        if not cfg.enable_chunked_prefill and p > cfg.max_num_batched_tokens:
            return (
                "exceeds_batch_budget",
                f"prompt of {p} tokens exceeds max_num_batched_tokens "
                f"{cfg.max_num_batched_tokens} with chunked prefill disabled",
            )
        return None

    def new_seq(self, request: Request) -> Seq:
        """Wrap an accepted request (not yet queued anywhere)."""
        target = min(request.output_length, self.config.context_length - request.input_length)
        trace = self.journal.trace(
            request.id, input_length=request.input_length, output_length=request.output_length
        )
        if trace.input_length == 0:  # created by an event that did not carry the lengths
            trace.input_length = request.input_length
            trace.output_length = request.output_length
        s = Seq(request, target, trace)
        s.serial = self.keyer.new_serial()
        known = self.keyer.cached_block_keys(request, self.block_size)
        if known:
            s.keys = list(known)
        elif self.caching:
            # a donor's keys save walking the shared prefix (block by block, or a content
            # id at a time with several blocks per id)
            s.keys = self.keyer.shared_prefix(request, self.block_size)
            # Every full prompt block is keyed now, when the request is placed: keys are
            # numbered in placement order, the same however the engines' passes are
            # stepped (REFERENCE-engine §4.2).
            self.keyer.extend_prompt(s.keys, request, self.block_size)
        return s

    def enqueue(self, s: Seq) -> None:
        """Append ``s`` to the waiting queue (engine arrival); no event is recorded."""
        s.state = WAITING
        self.seqs[s.rid] = s
        self.waiting.append(s)
        self.refresh(s)

    def unqueue(self, s: Seq) -> None:
        """Undo :meth:`enqueue` or :meth:`enqueue_reservation` of the newest arrival."""
        if s.state == WAITING and self.waiting and self.waiting[-1] is s:
            self.waiting.pop()
        elif s.state == RESERVING and self.reservations and self.reservations[-1] is s:
            self.reservations.pop()
        else:
            raise InternalError(f"request {s.rid!r} is not the newest arrival")
        self._drop(s)
        del self.seqs[s.rid]
        s.state = DONE

    # -- keys and lookup ---------------------------------------------------------------------

    def extend_keys(self, s: Seq, stop: int) -> None:
        """Give ``s``'s blocks keys up to ``stop``: its full prompt blocks have theirs from
        placement; a block holding output positions gets its placement's (:func:`output_key`)."""
        keys = s.keys
        if len(keys) < stop:
            first = output_key(s.serial, 0)
            keys.extend(range(first + len(keys), first + stop))

    def lookup(self, s: Seq, limit: int) -> list[int]:
        """Cached blocks for the first ``limit`` blocks of ``s`` (stops at the first miss)."""
        if not self.caching:
            return []
        keys = s.keys
        self.extend_keys(s, limit)
        # probes up to about the first miss: often most of a prompt's blocks are new, and
        # each probe of a large cache is a memory access
        return self.kv.lookup_prefix(keys, min(limit, len(keys)), chain=True)

    def cache_full(self, s: Seq, positions: int) -> None:
        """Key and register every block of ``s`` that ``positions`` scheduled makes full."""
        if not self.caching:
            return
        full = min(positions, s.prompt + s.num_output) // self.block_size
        k = s.nkeyed
        if k < full:
            keys = s.keys
            if len(keys) < full:
                self.extend_keys(s, full)
            if full - k == 1:
                self.kv.register(s.blocks[k], keys[k])
            else:
                self.kv.register_chain(s.blocks[k:full], keys[k:full])
            s.nkeyed = full

    # -- schedule phase (§3.2) ---------------------------------------------------------------

    def schedule(self, now_ns: int) -> Pass | None:
        """Plan the pass starting at ``now_ns`` with the engine's scheduler; all KV effects
        happen here (:meth:`EngineScheduler.schedule <engines.EngineScheduler.schedule>`).

        Returns:
            The pass, priced by the timing model, or ``None`` if no token was scheduled.
        """
        return self.scheduler.schedule(now_ns)

    def price(self, plan: Pass, prompts: list[int], samples: list[bool]) -> None:
        """Price a scheduled ``plan`` with the timing model and count it: its end instant,
        the engine's pass count and busy time, and its ``PREFILL_CHUNK`` events if wanted.

        Args:
            plan: the pass, its entries and columns filled in.
            prompts: the prompt length of each entry.
            samples: whether each entry samples a token at the end of the pass.
        """
        duration = self.duration_ns(plan, prompts, samples)
        plan.end_ns = plan.start_ns + duration
        self.passes += 1
        self.busy_ns += duration
        self.entries += len(prompts)
        if self.journal.wants(EventKind.PREFILL_CHUNK):
            self._record_chunks(plan)

    def duration_ns(self, plan: Pass, prompts: list[int], samples: list[bool]) -> int:
        """The duration of ``plan`` in ns from the timing model (its shortcut for small passes
        where it has one), rounded from milliseconds.

        Raises:
            PassTimingError: the model returned something other than a finite number >= 0.
        """
        k = len(prompts)
        small = self._small_pass_ms
        if small is not None and k <= SMALL_PASS_ENTRIES:
            ms = small(plan.computed, prompts, plan.output_before, samples, self.role)
            if type(ms) is float and 0.0 <= ms < math.inf:
                return round(ms * 1_000_000)
            # anything else: priced again through pass_time_ms, which reports a bad value
        shape = PassShape(
            np.fromiter(plan.scheduled, np.int64, k),
            np.fromiter(plan.computed, np.int64, k),
            np.fromiter(prompts, np.int64, k),
            np.fromiter(plan.output_before, np.int64, k),
            np.array(samples, dtype=np.bool_),
            self.role,
            self.kv_capacity,
        )
        ms = self.timing.pass_time_ms(shape)
        if type(ms) is float and 0.0 <= ms < math.inf:
            return round(ms * 1_000_000)
        if isinstance(ms, bool) or not isinstance(ms, int | float) or not ms >= 0 or math.isinf(ms):
            raise PassTimingError(
                f"{type(self.timing).__name__}.pass_time_ms returned {ms!r}; "
                "a pass duration must be a finite number of ms >= 0"
            )
        return round(ms * 1_000_000)

    def _record_chunks(self, plan: Pass) -> None:
        decode_role = self.role == "decode"
        for j, r in enumerate(plan.entries):
            n = plan.scheduled[j]
            if n > 1 or (not decode_role and plan.output_before[j] == 0):
                self.record(
                    plan.start_ns,
                    EventKind.PREFILL_CHUNK,
                    r,
                    (("tokens", n), ("computed", plan.computed[j]), ("end_ns", plan.end_ns)),
                )

    def preempt(self, v: Seq, now_ns: int) -> None:
        """Preempt running ``v`` (already out of the running list): free its blocks, reset
        its progress, put it at the front of the waiting queue and record ``PREEMPTED``."""
        self.kv.release(v.blocks)
        v.blocks = []
        v.nkeyed = 0
        v.num_computed = 0
        v.num_preemptions += 1
        v.state = WAITING
        self.waiting.appendleft(v)
        self.refresh(v)
        self.record(now_ns, EventKind.PREEMPTED, v, (("num_output", v.num_output),))

    # -- commit phase (§3.4) -----------------------------------------------------------------

    def commit(self, plan: Pass) -> None:
        """Apply the effects of ``plan`` at its end: tokens, finishes, freed blocks."""
        if self.role == "prefill":
            self._commit_prefill(plan)
            return
        t = plan.end_ns
        token_events = self.journal.wants_token_events
        entries = plan.entries
        if self._cancelled_in_pass:
            # a cancelled entry (num_computed -1) is skipped by the general loop below
            self._cancelled_in_pass = False
            plan.steady = 0
        finished = False
        if plan.steady and not token_events:
            finished = self._commit_steady(entries, plan.steady, t)
            entries = entries[plan.steady :]
        # Steady decode entries only count down decode_outstanding; the count is applied in
        # one step, and always before an event is recorded (a subscriber may read the view).
        sampled = 0
        for r in entries:
            out = r.num_output
            if r.num_computed != r.prompt + out:
                continue
            target = r.target
            if out < target:
                out += 1
                r.num_output = out
                # caught up and sampled: one position to compute next, one token fewer to go
                if r.pf:
                    self.prefill_outstanding -= r.pf
                    r.pf = 0
                r.dec -= 1
                if out == 1 or token_events:
                    self.decode_outstanding -= sampled + 1
                    sampled = 0
                    self.record(t, EventKind.FIRST_TOKEN if out == 1 else EventKind.TOKEN, r)
                else:
                    sampled += 1
                    r.times.append(t)
            if out >= target:
                if sampled:
                    self.decode_outstanding -= sampled
                    sampled = 0
                finished = True
                self._finish(r, t)
        if sampled:
            self.decode_outstanding -= sampled
        if finished:
            self.running = [r for r in self.running if r.state == RUNNING]

    def commit_steady_pass(self, entries: list[Seq], t: int) -> None:
        """Commit at ``t`` a pass of steady decode steps of ``entries`` (running order), as
        :meth:`commit` does for a pass whose entries are all steady and no ``TOKEN`` event
        is wanted (macro-stepping)."""
        if self._commit_steady(entries, len(entries), t):
            self.running = [r for r in self.running if r.state == RUNNING]

    def _commit_steady(self, entries: list[Seq], k: int, t: int) -> bool:
        """Commit the steady decode steps ``entries[:k]`` when no ``TOKEN`` event is wanted.

        Each of them samples one token that is not its first. The general loop appends the
        token time, counts the entry down and, for an entry reaching its target, applies the
        counted decrements of ``decode_outstanding`` before it releases the blocks and records
        ``FINISHED``; this does the same with the per-entry work in list operations.

        Returns:
            Whether a request finished.
        """
        steady = entries[:k] if k < len(entries) else entries
        TokenTimes.append_to_each(map(_times, steady), t)
        done: list[int] = []
        for j, r in enumerate(steady):
            n = r.num_output + 1
            r.num_output = n
            r.dec -= 1
            if n >= r.target:
                done.append(j)
        applied = 0
        for j in done:
            self.decode_outstanding -= j + 1 - applied
            applied = j + 1
            self._finish(steady[j], t)
        self.decode_outstanding -= k - applied
        return bool(done)

    def _finish(self, r: Seq, t: int) -> None:
        """Release a request that reached its target and record ``FINISHED`` at ``t``."""
        self.kv.release(r.blocks)
        r.blocks = []
        r.state = DONE
        if self.caching:
            self.keyer.remember(r.request, self.block_size, r.keys)
        self._drop(r)
        del self.seqs[r.rid]
        self.record(t, EventKind.FINISHED, r, (("truncated", r.target < r.request.output_length),))

    def _commit_prefill(self, plan: Pass) -> None:
        """Prefill role: a request whose prompt is done leaves running, its blocks held."""
        t = plan.end_ns
        finished = False
        for r in plan.entries:
            if r.num_computed != r.prompt + r.num_output:
                continue
            r.state = HELD
            self.held[r.rid] = r
            if self.caching:
                self.keyer.remember(r.request, self.block_size, r.keys)
            self._drop(r)
            finished = True
            self.record(t, EventKind.PREFILL_DONE, r)
        if finished:
            self.running = [r for r in self.running if r.state == RUNNING]

    # -- roles (§6) --------------------------------------------------------------------------

    def release_held(self, rid: str) -> Seq:
        """Prefill role: free the blocks kept for ``rid``'s transfer (they stay cached)."""
        s = self.held.pop(rid)
        self.kv.release(s.blocks)
        s.blocks = []
        s.state = DONE
        del self.seqs[rid]
        return s

    def enqueue_reservation(self, s: Seq) -> None:
        """Decode role: put ``s`` at the back of the FIFO reservation queue."""
        s.state = RESERVING
        self.seqs[s.rid] = s
        self.reservations.append(s)
        self.refresh(s)

    def process_reservations(self, now_ns: int) -> list[Seq]:
        """Decode role: reserve blocks for the queue head(s) while they fit (§6.2).

        Each reservation pins the resident prefix of the prompt's full blocks and takes
        ``ceil(P/E) - hit_blocks`` fresh blocks. Stops at the first request lacking blocks or
        a running slot (``running + waiting + reserved >= max_num_seqs``), and after one
        reservation with ``reserve_one_per_pass``.

        Returns:
            The requests reserved now, in order.
        """
        done: list[Seq] = []
        e = self.block_size
        one = self.config.reserve_one_per_pass
        while self.reservations and not (one and done):
            s = self.reservations[0]
            if (
                len(self.running) + len(self.waiting) + len(self.reserved)
                >= self.config.max_num_seqs
            ):
                break
            hits = self.lookup(s, s.prompt // e)
            need = -(-s.prompt // e) - len(hits)
            if not self.kv.allocate(s.blocks, hits, need):
                break
            self.reservations.popleft()
            s.nkeyed = len(hits)
            s.state = RESERVED
            self.reserved[s.rid] = s
            self.record(
                now_ns,
                EventKind.RESERVED,
                s,
                (
                    ("reused_tokens", len(hits) * e),
                    ("hit_blocks", len(hits)),
                    ("missing_blocks", need),
                ),
            )
            done.append(s)
        return done

    def activate(self, rid: str, now_ns: int, detail: tuple[tuple[str, object], ...]) -> Seq:
        """Decode role: the transfer of ``rid`` ended; its prompt KV is resident (§6.4)."""
        s = self.reserved.pop(rid)
        s.num_computed = s.prompt - 1
        self.cache_full(s, s.prompt)
        s.state = WAITING
        self.waiting.append(s)
        self.refresh(s)
        self.record(now_ns, EventKind.TRANSFER_DONE, s, detail)
        return s

    def cancel_reservation(self, rid: str) -> Seq:
        """Decode role: drop a queued or reserved request, freeing any blocks it holds."""
        s = self.seqs[rid]
        if s.state == RESERVING:
            self.reservations.remove(s)
        elif s.state == RESERVED:
            del self.reserved[rid]
            self.kv.release(s.blocks)
            s.blocks = []
        else:
            raise InternalError(f"request {rid!r} has no reservation")
        self._drop(s)
        del self.seqs[rid]
        s.state = DONE
        return s

    def cancel(self, rid: str) -> Seq | None:
        """Drop ``rid`` wherever it is on this engine and free its blocks (they stay cached).

        A request in the pass being timed is skipped when that pass commits. The caller
        records the terminal event.

        Returns:
            The dropped sequence, or None if ``rid`` is not on this engine.
        """
        s = self.seqs.get(rid)
        if s is None:
            return None
        if s.state == RESERVING or s.state == RESERVED:
            return self.cancel_reservation(rid)
        if s.state == WAITING:
            self.waiting.remove(s)
        elif s.state == RUNNING:
            self.running.remove(s)
            self._cancelled_in_pass = True
        elif s.state == HELD:
            del self.held[rid]
        self.kv.release(s.blocks)
        s.blocks = []
        self._drop(s)
        del self.seqs[rid]
        s.state = DONE
        # Never caught up again, so the commit of a pass in flight skips it.
        s.num_computed = -1
        return s

    def has_work(self) -> bool:
        """Whether anything is running, waiting, or waiting for a reservation or transfer."""
        return bool(self.running or self.waiting or self.reservations or self.reserved)
