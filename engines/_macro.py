"""Macro-stepping: an engine jumps over a run of passes whose outcome is already determined.

When every running request of an engine is in a steady decode step (it has sampled, has
exactly its newest token to compute and no prompt work left), nothing waits and no
reservation is queued, the next passes are determined until an input reaches the engine:
each pass takes one decode step of every running request, requests leave when they reach
their target, and every block a step starts is taken from the free queue. :class:`MacroRun`
plans such a run in one step — the pass instants from the timing model in one call
(:func:`~engines._pass.decode_run_times_ms`), the few steps that start or fill a block — and
applies it lazily: :meth:`MacroRun.advance` brings the engine's state to exactly what the
per-pass engine holds at a given instant, whenever something looks at it.

The same holds with one running request that has prompt work left, last in running order:
each pass gives it what the decode steps leave of the token budget. While the rest of its
prompt exceeds that share nobody waiting can be admitted, and with nobody waiting the pass of
its last chunk is determined too (:meth:`MacroRun._plan_chunk`).

Same-instant rules this relies on (REFERENCE-engine §3.1, made explicit by
:class:`simclock.Deadline`): a pass that ends at ``t`` commits before anything else runs at
``t``; the next pass starts at the engine's instant-end turn at ``t``. So at ``t`` an observer
sees every pass ending at or before ``t`` committed, and the pass starting at ``t`` scheduled
only once the engine's instant-end turn has come (``include_start``).

A run ends early when an input reaches the engine (:meth:`MacroRun.truncate`): the input is
seen at the next pass start the per-pass engine would reach, so the run keeps the passes
already scheduled and the engine goes back to per-pass steps from there.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from operator import add, sub
from typing import TYPE_CHECKING

import numpy as np

from simclock import InternalError

from ._core import RUNNING, Pass
from ._exceptions import PassTimingError
from ._journal import NEVER_NS
from ._keys import OUTPUT_KEY_BASE
from ._pass import DecodeRun, decode_run_times_ms
from ._tokentimes import arithmetic_runs

if TYPE_CHECKING:
    from ._core import EngineCore, Seq

__all__ = ("MIN_RUN_PASSES", "PLAN_PASSES", "MacroRun")

#: A run shorter than this is left to per-pass steps (nothing to gain).
MIN_RUN_PASSES = 3

#: The fewest passes an engine plans at once. An engine plans at most twice the passes its
#: previous run went through (or this many), so planning costs what the runs use when inputs
#: keep cutting them short; a run that ends at its planned length is followed by another.
PLAN_PASSES = 64

_NO_HITS: list[int] = []


def _decode_block_steps(
    core: EngineCore, seqs: list[Seq], computed: list[int], steps: list[int]
) -> tuple[list[tuple[int, int]], list[int]]:
    """The decode steps of a run that start a block (allocation) or fill one (keying).

    Args:
        core: the engine.
        seqs: the requests taking decode steps, in running order.
        computed: their ``num_computed`` at the first pass.
        steps: how many steps each takes in the run.

    Returns:
        ``(pass, request index)`` of every such step, and the pass of every allocation.
    """
    e = core.block_size
    caching = core.caching
    events: list[tuple[int, int]] = []
    allocs: list[int] = []
    for j, r in enumerate(seqs):
        c = computed[j]
        limit = steps[j]
        held = len(r.blocks)
        i = held * e - c
        while i < limit:
            events.append((i, j))
            allocs.append(i)
            held += 1
            i = held * e - c
        if caching:
            keyed = r.nkeyed
            i = max(0, (keyed + 1) * e - c - 1)
            while i < limit:
                events.append((i, j))
                keyed = (c + i + 1) // e
                i = (keyed + 1) * e - c - 1
    return events, allocs


class MacroRun:
    """A planned run of steady decode passes of one engine (and, possibly, the chunks of one
    prompt), applied lazily.

    State: ``scheduled`` passes have had their schedule phase applied (KV blocks, keys,
    ``num_computed``, pass counters), ``committed`` passes their commit phase (tokens,
    finishes); always ``committed <= scheduled <= committed + 1`` after :meth:`advance`.
    The run is over when ``committed == passes``.

    Attributes:
        passes: the number of passes in the run (reduced by :meth:`truncate`).
        starts: pass start instants (ns).
        ends: pass end instants (ns).
        scheduled: passes whose schedule phase is applied.
        committed: passes whose commit phase is applied.
        observed: someone came to watch per-pass events while the run was in flight (the
            run was then cut after its pass in flight, :meth:`truncate`): each pass left
            commits as the per-pass engine commits it, with its events.
    """

    __slots__ = (
        "_advancing",
        "_batch",
        "_busy",
        "_c0",
        "_chunk",
        "_chunk_ends",
        "_core",
        "_events",
        "_finishes",
        "_next_event",
        "_next_finish",
        "_out0",
        "_publish",
        "_seqs",
        "_step",
        "committed",
        "ends",
        "observed",
        "passes",
        "scheduled",
        "starts",
    )

    def __init__(
        self,
        core: EngineCore,
        publish: Callable[[int], None],
        seqs: list[Seq],
        starts: Sequence[int],
        ends: Sequence[int],
        busy: Sequence[int],
        events: list[tuple[int, int]],
        finishes: list[int],
        chunk: Seq | None = None,
        chunk_ends: list[int] | None = None,
    ) -> None:
        self._core = core
        self._publish = publish
        self._advancing = False
        self._seqs = seqs
        self._c0 = [s.num_computed for s in seqs]
        self._out0 = [s.num_output for s in seqs]
        # the decode steps; a prompt chunk, when there is one, is the last of ``seqs``
        self._batch = list(range(len(seqs) - (chunk is not None)))
        self._chunk = chunk
        self._chunk_ends = chunk_ends
        self.starts = starts
        self.ends = ends
        self._busy = busy
        self._step: int | None = None
        self._events = events
        self._next_event = 0
        self._finishes = finishes
        self._next_finish = 0
        self.passes = len(starts)
        self.scheduled = 0
        self.committed = 0
        self.observed = False

    # -- planning ------------------------------------------------------------------------------

    @classmethod
    def plan(
        cls,
        core: EngineCore,
        now_ns: int,
        publish: Callable[[int], None],
        max_passes: int = PLAN_PASSES,
    ) -> MacroRun | None:
        """Plan a run starting at ``now_ns`` and schedule its first pass, or return ``None``.

        A run with a prompt chunk is planned by :meth:`_plan_chunk`. Otherwise a run needs no
        reservation queued, nothing waiting, every running request in a steady decode step,
        at least :data:`MIN_RUN_PASSES` passes of positive, finite duration, and free blocks
        for every block its steps start (frees by finishing requests are not counted on).
        It holds at most ``max_passes`` passes.
        """
        running = core.running
        k = len(running)
        if not k or k > core.max_tokens or core.reservations:
            return None
        if running[-1].pf and core.role != "decode":
            return cls._plan_chunk(core, now_ns, publish, max_passes)
        if core.waiting:
            return None
        e = core.block_size
        # the cheap checks first, with list operations: an engine in the middle of a prompt
        # asks at every pass
        out0 = [r.num_output for r in running]
        if 0 in out0 or [r.pf for r in running].count(0) != k:
            return None
        c0 = [r.num_computed for r in running]
        prompts = [r.prompt for r in running]
        if list(map(sub, map(add, prompts, out0), c0)).count(1) != k:
            return None
        remaining = [r.target - r.num_output for r in running]
        horizon = max(remaining)
        if horizon < MIN_RUN_PASSES:
            return None
        # Blocks the first MIN_RUN_PASSES passes start: when the free queue cannot cover them
        # no run is possible, and when it can, the run is at least that long (so the costly
        # listing below is only done for a run that will be taken).
        starting = 0
        for j, r in enumerate(running):
            first = len(r.blocks) * e - c0[j]
            if first < 0:
                return None
            span = min(MIN_RUN_PASSES, remaining[j])
            if first < span:
                starting += -(-(span - first) // e)
        if starting > core.kv.free_count:
            return None
        if horizon > max_passes:
            horizon = max_passes
            steps = [min(d, horizon) for d in remaining]
        else:
            steps = remaining
        events, allocs = _decode_block_steps(core, running, c0, steps)
        passes = horizon
        free = core.kv.free_count
        if len(allocs) > free:
            allocs.sort()
            passes = min(passes, allocs[free])
        if passes < MIN_RUN_PASSES:
            return None
        steady = core.steady_decode_ms
        if steady is not None:
            # the model prices every pass of such a run alike, whatever its batch (every
            # entry here has sampled and computed its whole prompt)
            first_ms = float(steady(core.role))
            ms = None
        else:
            run = DecodeRun(
                passes,
                np.array(c0, dtype=np.int64),
                np.array(prompts, dtype=np.int64),
                np.array(out0, dtype=np.int64),
                np.array(remaining, dtype=np.int64),
                core.role,
                core.kv_capacity,
            )
            ms = decode_run_times_ms(core.timing, run)
            first_ms = float(ms[0])
        starts: Sequence[int]
        ends: Sequence[int]
        busy: Sequence[int]
        if 0.0 < first_ms < math.inf and (ms is None or bool((ms == first_ms).all())):
            # every pass takes the same time: the instants are arithmetic, held as ranges
            # (``round`` rounds half to even, as ``np.rint`` does below)
            step = round(first_ms * 1_000_000)
            if step <= 0:
                return None
            starts = range(now_ns, now_ns + step * passes, step)
            ends = range(now_ns + step, now_ns + step * (passes + 1), step)
            busy = range(0, step * (passes + 1), step)
        elif ms is None:  # a zero or invalid uniform duration: left to the per-pass engine
            return None
        else:
            bad = ~((ms > 0.0) & (ms < math.inf))
            if bad.any():
                # a zero, invalid or infinite duration is left to the per-pass engine
                passes = int(np.argmax(bad))
                if passes < MIN_RUN_PASSES:
                    return None
                ms = ms[:passes]
            durations = np.rint(ms * 1_000_000).astype(np.int64)
            if not (durations > 0).all():
                return None
            step = 0
            ends = list(accumulate(durations.tolist(), initial=now_ns))
            starts = ends[:-1]
            del ends[0]
            busy = list(accumulate(durations.tolist(), initial=0))
        events.sort()
        if events and events[-1][0] >= passes:
            del events[bisect_left(events, (passes, -1)) :]
        finishes = sorted({d - 1 for d in remaining if d <= passes})
        plan = cls(core, publish, list(running), starts, ends, busy, events, finishes)
        if step:
            plan._step = step
        if not plan._owes_nothing():
            return None
        plan._schedule(1)
        return plan

    @classmethod
    def _plan_chunk(
        cls, core: EngineCore, now_ns: int, publish: Callable[[int], None], max_passes: int
    ) -> MacroRun | None:
        """Plan a run in which every running request but the last takes a decode step and the
        last one a chunk of its prompt work: the budget the decode steps leave.

        The run lasts while that chunk is all the budget left, so no waiting request can be
        admitted; with nothing waiting it also takes the pass of the last chunk (the request
        samples, or on a prefill engine hands off, at its end). Each pass is priced by the
        timing model on its own (a run holds one pass per budget's worth of prompt).
        """
        if core.journal.chunk_events_from_ns <= now_ns:  # recorded at every pass start
            return None
        running = core.running
        k = len(running)
        chunk = running[-1]
        budget = core.max_tokens
        rem = chunk.prompt + chunk.num_output - chunk.num_computed
        waiting = bool(core.waiting)
        # every share is at least budget - (k - 1): too little prompt work for a run
        if rem <= (MIN_RUN_PASSES - 1 + waiting) * (budget - k + 1):
            return None
        decodes = running[:-1]
        kd = k - 1
        out0 = [r.num_output for r in decodes]
        c0 = [r.num_computed for r in decodes]
        prompts = [r.prompt for r in decodes]
        if kd and (
            0 in out0
            or [r.pf for r in decodes].count(0) != kd
            or list(map(sub, map(add, prompts, out0), c0)).count(1) != kd
        ):
            return None
        remaining = [r.target - r.num_output for r in decodes]
        ordered = sorted(remaining)
        # the chunk of each pass: the budget left by the decode steps still in the batch
        shares: list[int] = []
        final = False
        i = 0
        while True:
            share = budget - (kd - bisect_right(ordered, i))
            if rem > share:
                shares.append(share)
                rem -= share
                i += 1
            else:
                if not waiting:
                    shares.append(rem)
                    final = True
                break
        if len(shares) > max_passes:
            del shares[max_passes:]
            final = False
        passes = len(shares)
        if passes < MIN_RUN_PASSES:
            return None
        e = core.block_size
        events, allocs = _decode_block_steps(core, decodes, c0, [min(d, passes) for d in remaining])
        chunk_ends = list(accumulate(shares, initial=chunk.num_computed))
        held = len(chunk.blocks)
        for i in range(passes):
            events.append((i, kd))
            need = -(-chunk_ends[i + 1] // e) - held
            if need > 0:
                allocs.extend([i] * need)
                held += need
        free = core.kv.free_count
        if len(allocs) > free:
            allocs.sort()
            passes = min(passes, allocs[free])
        # each pass priced as the per-pass engine prices it; a failure or a duration that
        # is not positive is left to the per-pass engine
        busy: list[int] = []
        sampling = core.role == "prefill" or chunk.target > 0
        for i in range(passes):
            live = [j for j in range(kd) if remaining[j] > i]
            entries = [decodes[j] for j in live]
            entries.append(chunk)
            sample = final and i == len(shares) - 1 and sampling
            plan = Pass(
                now_ns,
                entries,
                [*[1] * len(live), shares[i]],
                [*[c0[j] + i for j in live], chunk_ends[i]],
                [*[out0[j] + i for j in live], chunk.num_output],
            )
            try:
                duration = core.duration_ns(
                    plan, [*[prompts[j] for j in live], chunk.prompt], [*[True] * len(live), sample]
                )
            except PassTimingError:
                break
            if duration <= 0:
                break
            busy.append(duration)
        passes = len(busy)
        if passes < MIN_RUN_PASSES:
            return None
        ends = list(accumulate(busy, initial=now_ns))
        starts = ends[:-1]
        del ends[0]
        events.sort()
        if events[-1][0] >= passes:
            del events[bisect_left(events, (passes, -1)) :]
        marked = {d - 1 for d in remaining if d <= passes}
        if final and passes == len(shares):
            marked.add(passes - 1)
        run = cls(
            core,
            publish,
            [*decodes, chunk],
            starts,
            ends,
            list(accumulate(busy, initial=0)),
            events,
            sorted(marked),
            chunk,
            chunk_ends[1:],
        )
        if not run._owes_nothing():
            return None
        run._schedule(1)
        return run

    # -- queries -------------------------------------------------------------------------------

    def next_wake_ns(self) -> int:
        """When the engine must act next: the end of the next pass in which a request
        finishes, or the end of the run."""
        finishes = self._finishes
        i = self._next_finish
        while i < len(finishes) and finishes[i] < self.committed:
            i += 1
        self._next_finish = i
        if i < len(finishes) and finishes[i] < self.passes:
            return self.ends[finishes[i]]
        return self.ends[self.passes - 1]

    @property
    def done(self) -> bool:
        """Whether every pass of the run is committed."""
        return self.committed >= self.passes

    @property
    def in_pass(self) -> bool:
        """Whether a pass is in flight (scheduled, not committed)."""
        return self.scheduled > self.committed

    def pass_in_flight(self) -> Pass | None:
        """The pass in flight (scheduled, not committed) with its entries and columns, as the
        per-pass engine holds it (for views); ``None`` between passes."""
        if not self.in_pass:
            return None
        i = self.committed
        seqs = self._seqs
        entries: list[Seq] = []
        scheduled: list[int] = []
        computed: list[int] = []
        output_before: list[int] = []
        for j in self._batch:
            s = seqs[j]
            if s.state == RUNNING:
                entries.append(s)
                scheduled.append(1)
                computed.append(self._c0[j] + i)
                output_before.append(self._out0[j] + i)
        chunk = self._chunk
        ends = self._chunk_ends
        if chunk is not None and ends and i < len(ends) and chunk.state == RUNNING:
            before = ends[i - 1] if i else self._c0[-1]
            entries.append(chunk)
            scheduled.append(ends[i] - before)
            computed.append(before)
            output_before.append(chunk.num_output)
        plan = Pass(self.starts[i], entries, scheduled, computed, output_before)
        plan.end_ns = self.ends[i]
        return plan

    # -- applying the run ----------------------------------------------------------------------

    def advance(self, now_ns: int, *, include_end: bool, include_start: bool) -> None:
        """Bring the engine to its per-pass state at ``now_ns``.

        Commits every pass ending before ``now_ns`` — and the pass ending exactly then when
        ``include_end`` — and schedules every pass starting before it — and the pass starting
        exactly at ``now_ns`` when ``include_start`` (the engine's instant-end turn at
        ``now_ns`` has come).

        A call made while the run is being applied (a subscriber of an event the commit
        records, reading the engine) returns at once: the engine is then exactly where the
        per-pass engine is in the middle of that commit.
        """
        if self._advancing:
            return
        self._advancing = True
        try:
            self._advance(now_ns, include_end, include_start)
        finally:
            self._advancing = False

    def _advance(self, now_ns: int, include_end: bool, include_start: bool) -> None:
        ends = self.ends
        starts = self.starts
        while True:
            # ``passes`` may shrink while a commit runs (an input truncates the run)
            passes = self.passes
            target_commit = _count_before(ends, now_ns, passes, include_end)
            first = self.committed
            if first >= target_commit:
                break
            if self.observed:
                if self.scheduled <= first:
                    self._schedule(first + 1)
                self._commit_observed(first)
                self._publish(ends[first])
                continue
            finish = self._finish_at_or_after(first)
            silent_end = min(target_commit, finish)
            if first < silent_end:
                if self.scheduled < silent_end:
                    self._schedule(silent_end)
                self._commit_silent(silent_end)
                self._publish(ends[silent_end - 1])
                continue
            # ``first == finish``: a pass in which requests finish, committed exactly as the
            # per-pass engine commits it
            if self.scheduled <= finish:
                self._schedule(finish + 1)
            self._commit_finishing(finish)
            self._publish(ends[finish])
        passes = self.passes
        target_sched = _count_before(starts, now_ns, passes, include_start)
        if self.scheduled < target_sched:
            self._schedule(target_sched)

    def _owes_nothing(self) -> bool:
        """Before anything of the run is applied: cut it so that it owes no journal
        subscriber an event (:meth:`Journal.subscribe`'s ``passes_from_ns``). Its last pass
        that ends before the instant from which per-pass events are owed, and every later
        one, are left to the per-pass engine (when every planned pass ends before it, the
        last of them may be that pass). Return whether the run keeps at least
        :data:`MIN_RUN_PASSES` passes."""
        journal = self._core.journal
        owed = min(journal.token_events_from_ns, journal.chunk_events_from_ns)
        if owed >= NEVER_NS:
            return True
        keep = bisect_left(self.ends, owed, 0, self.passes) - 1
        if keep < MIN_RUN_PASSES:
            return False
        self.passes = keep
        return True

    def truncate(self) -> None:
        """An input reached the engine (after :meth:`advance` to now): end the run at the
        next pass start, keeping the pass in flight, and drop requests that left."""
        self.passes = max(self.scheduled, self.committed)
        seqs = self._seqs
        self._batch = [j for j in self._batch if seqs[j].state == RUNNING]

    def _finish_at_or_after(self, first: int) -> int:
        finishes = self._finishes
        i = bisect_left(finishes, first)
        return finishes[i] if i < len(finishes) else self.passes

    def _schedule(self, stop: int) -> None:
        """Apply the schedule phase of passes ``scheduled .. stop - 1`` (no finish among the
        passes committed meanwhile: the caller commits those first)."""
        core = self._core
        first = self.scheduled
        events = self._events
        n = self._next_event
        chunk_passes = 0
        if n < len(events) and events[n][0] < stop:
            kv = core.kv
            e = core.block_size
            caching = core.caching
            seqs = self._seqs
            c0 = self._c0
            chunk = self._chunk
            chunk_ends = self._chunk_ends or []
            while n < len(events):
                i, j = events[n]
                if i >= stop:
                    break
                n += 1
                s = seqs[j]
                if s.state != RUNNING:
                    continue
                if s is chunk:
                    # the prompt chunk: the per-pass engine's running loop, for its entry
                    chunk_passes += 1
                    end = chunk_ends[i]
                    blocks = s.blocks
                    if end > len(blocks) * e and not kv.allocate(
                        blocks, _NO_HITS, -(-end // e) - len(blocks)
                    ):
                        raise InternalError(f"macro-step could not allocate a chunk of {s.rid!r}")
                    if caching and end // e > s.nkeyed:
                        core.cache_full(s, end)
                    s.num_computed = end
                    core.refresh(s)
                    continue
                end = c0[j] + i + 1
                blocks = s.blocks
                if end > len(blocks) * e and not kv.take_one(blocks):
                    raise InternalError(f"macro-step could not allocate a block for {s.rid!r}")
                full = end // e
                if caching and full > s.nkeyed:
                    # the step's range ends at the request's newest position, so every block
                    # up to ``end`` is full: EngineCore.cache_full, inlined
                    k = s.nkeyed
                    keys = s.keys
                    have = len(keys)
                    if have == full - 1:
                        # the block just filled: output_key(s.serial, have), inlined
                        keys.append(OUTPUT_KEY_BASE + (s.serial << 32) + have)
                    elif have < full:
                        core.extend_keys(s, full)
                    if full - k == 1:
                        kv.register(blocks[k], keys[k])
                    else:
                        kv.register_chain(blocks[k:full], keys[k:full])
                    s.nkeyed = full
            self._next_event = n
        count = stop - first
        for j in self._batch:
            self._seqs[j].num_computed = self._c0[j] + stop
        core.passes += count
        core.busy_ns += self._busy[stop] - self._busy[first]
        core.entries += count * len(self._batch) + chunk_passes
        self.scheduled = stop

    def _commit_silent(self, stop: int) -> None:
        """Commit passes ``committed .. stop - 1``, in none of which a request finishes."""
        first = self.committed
        count = stop - first
        seqs = self._seqs
        out0 = self._out0
        if self._step is not None:  # every pass of the run takes the same time
            start = self.ends[first]
            step = self._step if count > 1 else 0
            for j in self._batch:
                s = seqs[j]
                s.times.extend_run(start, step, count)
                s.num_output = out0[j] + stop
                s.dec -= count
        else:
            runs = arithmetic_runs(self.ends[first:stop])
            for j in self._batch:
                s = seqs[j]
                s.times.extend_runs(runs)
                s.num_output = out0[j] + stop
                s.dec -= count
        core = self._core
        core.decode_outstanding -= len(self._batch) * count
        self.committed = stop

    def _commit_finishing(self, i: int) -> None:
        """Commit pass ``i``, in which some requests reach their target, as the per-pass
        engine commits a pass of steady decode steps."""
        core = self._core
        seqs = self._seqs
        entries = [seqs[j] for j in self._batch]
        chunk = self._chunk
        if chunk is None:
            core.commit_steady_pass(entries, self.ends[i])
        else:
            # a pass with a prompt chunk: the per-pass engine commits it with its general
            # loop (the chunk samples, or hands off, in the last pass of its prompt)
            if chunk.state == RUNNING:
                entries.append(chunk)
            plan = Pass(self.starts[i], entries, [], [], [])
            plan.end_ns = self.ends[i]
            core.commit(plan)
        self._batch = [j for j in self._batch if seqs[j].state == RUNNING]
        self.committed = i + 1

    def _commit_observed(self, i: int) -> None:
        """Commit pass ``i`` (the pass in flight) with the per-pass engine's commit, which
        records the events someone now watches (``TOKEN`` events)."""
        plan = self.pass_in_flight()
        if plan is None:
            raise InternalError(f"macro-step: pass {i} is not in flight at its commit")
        self._core.commit(plan)
        seqs = self._seqs
        self._batch = [j for j in self._batch if seqs[j].state == RUNNING]
        self.committed = i + 1


def _count_before(instants: Sequence[int], now_ns: int, hi: int, inclusive: bool) -> int:
    """How many of ``instants[:hi]`` (ascending) are before ``now_ns``, or at it when
    ``inclusive``: ``bisect_right`` / ``bisect_left``, worked out for a range of instants
    (a run whose passes all take the same time) instead of searched."""
    if type(instants) is not range:
        if inclusive:
            return bisect_right(instants, now_ns, 0, hi)
        return bisect_left(instants, now_ns, 0, hi)
    offset = now_ns - instants.start
    if offset < 0:
        return 0
    step = instants.step  # > 0: instants ascend
    n = offset // step + 1 if inclusive else -(-offset // step)
    return n if n < hi else hi
