"""The KV block manager with prefix caching (REFERENCE-engine §4).

Blocks are the integers ``0 .. num_blocks-1``; their state lives in plain parallel lists
(reference count, key, free-queue links), with no per-block objects. Free blocks
(``ref_cnt == 0``), cached or not, sit in one doubly linked queue: released blocks go to the
tail, allocation takes the head, so cached blocks are evicted least recently released first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import itemgetter

from simclock import InternalError

from ._keys import OUTPUT_KEY_BASE
from ._prefix_cache import PrefixCache

__all__ = ("KVCache",)

NO_KEY = 0
UNLINKED = -2
"""The previous-block link of every block outside the linked part of the free queue."""


class KVCache:
    """A fixed pool of KV blocks, their reference counts, the free queue and the prefix cache.

    State machine of a block: *free* (``ref 0``, in the queue, keyed or not) ->
    *referenced* (``ref >= 1``, out of the queue) by :meth:`allocate`, back to *free* when
    :meth:`release` drops its count to 0. Taking a keyed block from the queue head for fresh
    use removes its key from the cache (eviction).

    Blocks are taken in index order the first time, so the blocks never touched are always
    ``touched .. num_blocks - 1``, all free and unkeyed, at the head of the free queue, before
    every released block: they cost nothing until they are taken (a pool of millions of blocks
    is built at once). The per-block lists ``ref`` and ``key`` cover the touched blocks and
    grow geometrically past them (the blocks beyond hold 0 and no key, as untouched blocks
    do), so taking fresh blocks writes their counts only; :meth:`ref_counts` and
    :meth:`block_keys` give every block.

    A release queues the blocks it frees as one *run* (a list, in queue order) behind the
    linked part of the queue, without linking them: the queue is the linked part, then the
    runs in release order. Hits that are the newest end of a run (a sequence's blocks taken
    back, in whole or in part, by the next request of its conversation) leave it in one slice
    deletion, and taking blocks from the head goes on into the runs; anything else that needs
    a queued block's links (taking a free hit out of the middle of the queue) links the
    runs first (:meth:`_link_runs`). With ``eager_links`` every release links its blocks at
    once instead (the plain free queue, the oracle of the runs).

    Key transitions (a key gaining its first cached copy, or losing its last) are appended to
    ``pending_kinds`` (``True`` = stored) and ``pending_keys``, side by side, for the owner to
    publish; the owner clears them (:meth:`clear_transitions`). ``transitions`` reads them as
    ``(stored, key)`` pairs.

    Attributes:
        num_blocks: usable blocks.
        block_size: token slots per block.
        touched: blocks ever taken (``0 .. touched - 1``).
        ref: reference count per block, for the touched blocks at least.
        key: key per block (``0`` = none), for the touched blocks at least.
        free_count: blocks in the free queue.
        min_free: the fewest blocks the free queue ever held (``num_blocks - min_free`` is the
            peak of blocks referenced at once).
        cache: key -> its earliest-registered cached copy (the one lookups hit), read as a
            mapping (:class:`engines._prefix_cache.PrefixCache`: a chain of keys cached at
            once in blocks taken at once is held as one span).
        twins: key -> its other cached copies, in registration order (rare: a block computed
            again while a copy is still cached).
        pending_kinds: per key transition not yet published, whether the key was stored.
        pending_keys: per key transition not yet published, its key.
        empty: with ``empty_first``, the released blocks that cache nothing, oldest first:
            they are taken before the queue (None otherwise).
        eager_links: whether a release links its blocks into the queue at once.
    """

    __slots__ = (
        "_first",
        "_head",
        "_next",
        "_prev",
        "_run_of",
        "_runs",
        "_serial",
        "_tail",
        "_top",
        "_top_output",
        "block_size",
        "cache",
        "eager_links",
        "empty",
        "free_count",
        "key",
        "min_free",
        "num_blocks",
        "pending_keys",
        "pending_kinds",
        "ref",
        "touched",
        "twins",
    )

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        empty_first: bool = False,
        eager_links: bool = False,
    ) -> None:
        """Create ``num_blocks`` free, unkeyed blocks queued in index order.

        Args:
            num_blocks: usable blocks.
            block_size: token slots per block.
            empty_first: take released blocks that cache nothing before any block of the
                queue (AISimulate's order: blocks never used, then blocks holding nothing,
                then cached blocks least recently released first); by default a released
                block joins the queue whatever it holds (vLLM's free queue).
            eager_links: link the blocks a release frees into the queue at once, one by
                one, instead of queueing them as a run (the same queue, built more slowly;
                kept as the reference the runs are tested against).
        """
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.touched = 0
        self.ref: list[int] = []
        self.key: list[int] = []
        # the released part of the free queue, a doubly linked list (-1 = none)
        self._next: list[int] = []
        self._prev: list[int] = []
        self._head = -1
        self._tail = -1
        # the runs queued behind the linked part, in queue order: serial -> blocks, and the
        # last block of each run (the first block of the sequence that released it) -> its
        # serial
        self._runs: dict[int, list[int]] = {}
        self._run_of: dict[int, int] = {}
        self._serial = 0
        self._first = 0  # no run has a smaller serial
        self.eager_links = eager_links
        self.free_count = num_blocks
        self.min_free = num_blocks
        self.cache = PrefixCache()
        self.twins: dict[int, list[int]] = {}
        self.pending_kinds: list[bool] = []
        self.pending_keys: list[int] = []
        # the largest prompt key and output key (engines._keys.output_key) ever registered
        # here: a key above them was never cached here
        self._top = 0
        self._top_output = 0
        self.empty: deque[int] | None = deque() if empty_first else None

    # -- queries ---------------------------------------------------------------------------

    @property
    def transitions(self) -> list[tuple[bool, int]]:
        """The key transitions not yet published, as ``(stored, key)`` pairs, oldest first."""
        return list(zip(self.pending_kinds, self.pending_keys, strict=True))

    def clear_transitions(self) -> None:
        """Forget the pending key transitions (they were published)."""
        self.pending_kinds.clear()
        self.pending_keys.clear()

    def free_blocks(self) -> list[int]:
        """The free blocks in the order they are taken: the blocks never used, then (with
        ``empty_first``) the released blocks that cache nothing, then the queue, head first."""
        out = list(range(self.touched, self.num_blocks))
        if self.empty:
            out.extend(self.empty)
        nxt = self._next
        b = self._head
        for _ in range(self.touched + 1):
            if b == -1:
                for run in self._runs.values():
                    out.extend(run)
                return out
            out.append(b)
            b = nxt[b]
        raise InternalError("the free queue's links form a cycle")

    def ref_counts(self) -> list[int]:
        """The reference count of every block."""
        return self.ref[: self.touched] + [0] * (self.num_blocks - self.touched)

    def block_keys(self) -> list[int]:
        """The key of every block (``0`` = none)."""
        return self.key[: self.touched] + [NO_KEY] * (self.num_blocks - self.touched)

    def lookup(self, keys: Iterable[int]) -> list[int]:
        """Return the blocks caching the longest cached prefix of ``keys``.

        Walks ``keys`` in order and stops at the first key without a cached copy; each hit
        is the key's earliest-registered copy. The caller bounds ``keys`` (§4.3 cap).
        """
        get = self.cache.get
        out: list[int] = []
        for k in keys:
            block = get(k)
            if block is None:
                break
            out.append(block)
        return out

    def lookup_prefix(self, keys: list[int], limit: int, *, chain: bool = False) -> list[int]:
        """:meth:`lookup` of ``keys[:limit]``, probing the cache in growing slices and
        stepping over chains cached at once (:meth:`PrefixCache.lookup_prefix`; ``chain``:
        the caller vouches that ``keys`` increase, as a sequence's block keys do)."""
        return self.cache.lookup_prefix(keys, limit, chain=chain)

    def can_allocate(self, hits: list[int], need: int, reserve: int = 0) -> bool:
        """Whether :meth:`allocate` would succeed (no side effects)."""
        return need + self._refs(hits).count(0) + reserve <= self.free_count

    def _refs(self, blocks: list[int]) -> Sequence[int]:
        """The reference counts of ``blocks``, in order (read in one call when several)."""
        ref = self.ref
        return itemgetter(*blocks)(ref) if len(blocks) > 1 else [ref[b] for b in blocks]

    # -- mutations -------------------------------------------------------------------------

    def allocate(self, blocks: list[int], hits: list[int], need: int, reserve: int = 0) -> bool:
        """Touch ``hits``, then take ``need`` fresh blocks from the queue head (§4.4).

        Fails with no side effects when ``need + evictable hits + reserve`` exceeds the free
        queue. On success the hit blocks, then the fresh ones, are appended to ``blocks``.

        Args:
            blocks: the owner's block list, extended in place.
            hits: cached blocks from :meth:`lookup` to share (reference count + 1).
            need: fresh blocks to take.
            reserve: blocks that must stay free afterwards (the watermark).

        Returns:
            Whether the allocation happened.
        """
        ref = self.ref
        if hits:
            # hits that are all among the last blocks of queued runs are all free (count
            # 0): their counts need not be read
            plan = self._run_plan(hits) if self._runs else None
            refs = None if plan is not None else self._refs(hits)
            evictable = len(hits) if refs is None else refs.count(0)
            if need + evictable + reserve > self.free_count:
                return False
            if refs is None or evictable == len(hits):
                if plan is not None:
                    self._take_plan(plan)
                else:
                    self._unqueue(hits, runs_tried=True)
                for b in hits:
                    ref[b] = 1
            else:
                if evictable:  # released blocks among them: out of the queue
                    self._unqueue([b for b, r in zip(hits, refs, strict=True) if not r])
                for b, r in zip(hits, refs, strict=True):
                    ref[b] = r + 1
            self.free_count -= evictable
            blocks.extend(hits)
        elif need + reserve > self.free_count:
            return False
        if need:
            self._take(blocks, need)
        if self.free_count < self.min_free:
            self.min_free = self.free_count
        return True

    def take_one(self, blocks: list[int]) -> bool:
        """:meth:`allocate` of one fresh block and no hits (a decode step starting a block).

        Returns:
            Whether the block was taken (``False``, with nothing changed, when none is free).
        """
        if not self.free_count:
            return False
        b = self.touched
        if b < self.num_blocks:
            if b == len(self.ref):
                self._grow(b + 1)
            self.ref[b] = 1
            self.touched = b + 1
            blocks.append(b)
            free = self.free_count - 1
            self.free_count = free
            if free < self.min_free:
                self.min_free = free
            return True
        self._take(blocks, 1)
        if self.free_count < self.min_free:
            self.min_free = self.free_count
        return True

    def _unqueue(self, free: list[int], *, runs_tried: bool = False) -> None:
        """Take the free blocks ``free`` out of the queue: in one step per queued run when
        they are runs' last blocks (:meth:`_unqueue_run`; ``runs_tried``: they are known not
        to be), else from the linked part, after linking the runs if some of them lie in
        one."""
        if self._runs and not runs_tried and self._unqueue_run(free):
            return
        self._cover_links()
        if self._runs and UNLINKED in map(self._prev.__getitem__, free):
            self._link_runs()
        if not (len(free) > 1 and self._unlink_run(free)):
            for b in free:
                self._unlink(b)

    def _unqueue_run(self, hits: list[int]) -> bool:
        """Take ``hits`` out of the queue in one step per queued run when they are the last
        blocks of queued runs, last first: a release queues a sequence's blocks last first,
        and a prefix the sequence shared with another is queued by the later release of the
        two, so the blocks a conversation's next request takes back are the ends of one run
        or of a few.

        Returns:
            Whether they were (nothing is changed otherwise).
        """
        plan = self._run_plan(hits)
        if plan is None:
            return False
        self._take_plan(plan)
        return True

    def _run_plan(self, hits: list[int]) -> list[tuple[int, int]] | None:
        """:meth:`_unqueue_run`'s plan: ``(serial, count)`` of each run whose last blocks
        ``hits`` are, in order, or None when they are not all such blocks."""
        runs = self._runs
        run_of = self._run_of
        plan: list[tuple[int, int]] = []
        p = 0
        h = len(hits)
        while p < h:
            serial = run_of.get(hits[p])
            if serial is None:
                return None
            run = runs[serial]
            m = min(len(run), h - p)
            if run[-1 : -m - 1 : -1] != hits[p : p + m]:
                # the hits go on in another run: the longest common start (at least the
                # run's last block, under which it was found)
                lo = 1
                hi = m - 1
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if run[-1 : -mid - 1 : -1] == hits[p : p + mid]:
                        lo = mid
                    else:
                        hi = mid - 1
                m = lo
            plan.append((serial, m))
            p += m
        return plan

    def _take_plan(self, plan: list[tuple[int, int]]) -> None:
        """Take the blocks of a :meth:`_run_plan` out of their runs."""
        runs = self._runs
        run_of = self._run_of
        for serial, m in plan:
            run = runs[serial]
            del run_of[run[-1]]
            if m == len(run):
                del runs[serial]
            else:
                del run[-m:]
                run_of[run[-1]] = serial

    def _link_runs(self) -> None:
        """Link the queued runs' blocks, in queue order, behind the linked part."""
        self._cover_links()
        nxt = self._next
        prv = self._prev
        tail = self._tail
        for run in self._runs.values():
            for b in run:
                prv[b] = tail
                if tail == -1:
                    self._head = b
                else:
                    nxt[tail] = b
                tail = b
        if tail != -1:
            nxt[tail] = -1
        self._tail = tail
        self._runs.clear()
        self._run_of.clear()
        self._first = self._serial

    def _unlink_run(self, hits: list[int]) -> bool:
        """Take ``hits`` out of the linked part of the queue in one step when they lie there
        as one stretch, last hit nearest the head (the order a release leaves a sequence's
        blocks in).

        Returns:
            Whether they did (nothing is changed otherwise).
        """
        prv = self._prev
        if list(map(prv.__getitem__, hits[:-1])) != hits[1:]:
            return False
        left = prv[hits[-1]]
        right = self._next[hits[0]]
        for b in hits:
            prv[b] = UNLINKED
        self._join(left, right)
        return True

    def _take(self, blocks: list[int], need: int) -> None:
        first = self.touched
        fresh = min(need, self.num_blocks - first)
        if fresh:
            stop = first + fresh
            if stop > len(self.ref):
                self._grow(stop)
            self.ref[first:stop] = [1] * fresh
            blocks.extend(range(first, stop))
            self.touched = stop
        rest = need - fresh
        empty = self.empty
        if rest and empty:
            ref = self.ref
            for _ in range(min(rest, len(empty))):
                b = empty.popleft()
                ref[b] = 1
                blocks.append(b)
                rest -= 1
        if rest and self._head != -1:
            nxt = self._next
            ref = self.ref
            key = self.key
            b = self._head
            prv = self._prev
            while rest and b != -1:
                q = nxt[b]
                if key[b] != NO_KEY:
                    self._evict(b)
                ref[b] = 1
                prv[b] = UNLINKED
                blocks.append(b)
                b = q
                rest -= 1
            self._head = b
            if b == -1:
                self._tail = -1
            else:
                prv[b] = -1
        if rest:
            self._take_runs(blocks, rest)
        self.free_count -= need

    def _take_runs(self, blocks: list[int], rest: int) -> None:
        """Take ``rest`` blocks from the queued runs, first run first (the linked part of the
        queue is empty)."""
        ref = self.ref
        key = self.key
        runs = self._runs
        serial = self._first
        while rest and runs:
            # the first run: serials are given in order, so the smallest left
            while serial not in runs:
                serial += 1
            self._first = serial
            run = runs[serial]
            k = min(rest, len(run))
            taken = run[:k]
            keys = itemgetter(*taken)(key) if k > 1 else (key[taken[0]],)
            twins = self.twins
            if twins and not twins.keys().isdisjoint(keys):
                for b in taken:
                    if key[b] != NO_KEY:
                        self._evict(b)
                    ref[b] = 1
            else:
                # no twin among them: each key leaves the cache, in the order taken
                self._uncache(keys)
                for b in taken:
                    key[b] = NO_KEY
                    ref[b] = 1
            blocks += taken
            if k == len(run):
                del runs[serial]
                del self._run_of[run[-1]]
            else:
                del run[:k]
            rest -= k
        if rest:
            raise InternalError("the free queue holds fewer blocks than its count")

    def _grow(self, stop: int) -> None:
        """Cover blocks ``.. stop - 1`` in the per-block lists, and as many again (at most
        every block): untouched blocks hold count 0, no key and no links."""
        size = len(self.ref)
        more = min(self.num_blocks, max(stop, 2 * size, 1024)) - size
        self.ref.extend([0] * more)
        self.key.extend([NO_KEY] * more)
        if self._prev:  # the links cover the per-block lists once a block was linked
            self._next.extend([-1] * more)
            self._prev.extend([UNLINKED] * more)

    def _cover_links(self) -> None:
        """Make the queue links cover the per-block lists (no block linked: ``-1`` and
        :data:`UNLINKED`). They are left empty until a block is first linked into the queue:
        a queue of released runs taken whole needs none."""
        more = len(self.ref) - len(self._prev)
        if more:
            self._next.extend([-1] * more)
            self._prev.extend([UNLINKED] * more)

    def _uncache(self, keys: Sequence[int]) -> None:
        """:meth:`_evict`'s cache removals and transitions for blocks holding ``keys`` (in
        that order; ``NO_KEY`` for a block caching nothing), none of them with a twin: the
        caller clears the blocks' keys."""
        held = keys if NO_KEY not in keys else [k for k in keys if k != NO_KEY]
        if not held:
            return
        self.cache.remove_many(held)
        self.pending_kinds.extend([False] * len(held))
        self.pending_keys.extend(held)

    def _evict(self, b: int) -> None:
        k = self.key[b]
        twins = self.twins.get(k)
        if twins is None:
            self.cache.remove(k)
            self.pending_kinds.append(False)
            self.pending_keys.append(k)
        else:
            if self.cache.get(k) == b:
                self.cache.replace(k, twins.pop(0))
            else:
                twins.remove(b)
            if not twins:
                del self.twins[k]
        self.key[b] = NO_KEY

    def register(self, block: int, key: int) -> None:
        """Give a referenced, unkeyed ``block`` its ``key`` and cache it (a twin if needed)."""
        if key >= OUTPUT_KEY_BASE:
            fresh = key > self._top_output
            if fresh:
                self._top_output = key
        else:
            fresh = key > self._top
            if fresh:
                self._top = key
        self.key[block] = key
        if fresh or self.cache.get(key) is None:  # a key above every key registered is new
            self.cache.put(key, block)
            self.pending_kinds.append(True)
            self.pending_keys.append(key)
        else:
            self.twins.setdefault(key, []).append(block)

    def register_many(self, blocks: list[int], keys: list[int]) -> None:
        """:meth:`register` each ``blocks[i]`` under ``keys[i]``, in order.

        ``keys`` are distinct, as the keys of one sequence's blocks always are (a chained key
        names a prefix of one length; an output block's key names one block of one placement).
        """
        if not self.cache.meets(keys):
            self._top_of(keys)
            self._store_new(blocks, keys, chain=False)
            return
        self._register_each(blocks, keys)

    def _register_each(self, blocks: list[int], keys: list[int]) -> None:
        register = self.register
        for b, k in zip(blocks, keys, strict=True):
            register(b, k)

    def register_chain(self, blocks: list[int], keys: list[int]) -> None:
        """:meth:`register_many` of consecutive blocks of one sequence, whose keys increase.

        A chained key is interned after its parent, so it is larger; the keys of the blocks
        holding output positions come after the prompt's and increase with the block
        (:func:`engines._keys.output_key`). Keys above every key of their kind this cache
        has registered were never cached here: they are stored without looking for them.
        """
        first = keys[0]
        last = keys[-1]
        if last < OUTPUT_KEY_BASE:
            fresh = first > self._top
            if fresh:
                self._top = last
        elif first >= OUTPUT_KEY_BASE:
            fresh = first > self._top_output
            if fresh:
                self._top_output = last
        else:
            fresh = False
        if fresh or not self.cache.meets_chain(keys):
            if not fresh:
                self._top_of(keys)
            self._store_new(blocks, keys, chain=True)
        else:
            self._register_each(blocks, keys)

    def _top_of(self, keys: list[int]) -> None:
        """Raise the largest keys registered to cover ``keys``."""
        prompt = [k for k in keys if k < OUTPUT_KEY_BASE]
        if prompt:
            self._top = max(self._top, *prompt)
        if len(prompt) < len(keys):
            self._top_output = max(self._top_output, *(k for k in keys if k >= OUTPUT_KEY_BASE))

    def _store_new(self, blocks: list[int], keys: list[int], *, chain: bool) -> None:
        """Cache ``blocks[i]`` under ``keys[i]``, none of which is cached (keys that
        increase when ``chain``): one bulk step per structure (what :meth:`register` of
        each does)."""
        cache = self.cache
        if chain and cache.put_chain(keys, blocks):
            first = blocks[0]  # blocks taken one after the other: their keys in one slice
            self.key[first : first + len(keys)] = keys
        else:
            key = self.key
            for b, k in zip(blocks, keys, strict=True):
                key[b] = k
            if not chain:
                cache.put_many(keys, blocks)
        self.pending_kinds.extend(repeat(True, len(keys)))
        self.pending_keys.extend(keys)

    def release(self, blocks: list[int]) -> None:
        """Drop one reference to each of ``blocks``, last first (§4.5).

        Blocks reaching zero references go to the queue tail with their keys kept, so within
        one release the sequence's tail block is evicted first and its root block last. They
        are queued as one run (unless ``eager_links``); when every count is 1, as when a
        request's blocks are its own, the counts drop in one plain loop.

        Raises:
            InternalError: a reference count would go negative.
        """
        if self.eager_links:
            self._release_linking(blocks)
            return
        ref = self.ref
        counts: Sequence[int]
        try:
            counts = self._refs(blocks)
        except IndexError:  # a block never taken: the loop below reports it
            counts = []
        freed: list[int] = []
        head = len(blocks)
        ones = counts.count(1)
        if ones and counts.index(1) == head - ones:
            # the sequence's own blocks (count 1) end it, after any it shares (a prefix
            # other sequences hold too): they are freed first (last first), in one plain
            # loop, as the loop below would free them
            head -= ones
            freed = blocks[head:]
            for b in freed:
                ref[b] = 0
            freed.reverse()
            if not head:
                self._queue(freed, True)
                return
        b = -1
        done = False
        try:
            for b in reversed(blocks[:head]):
                r = ref[b]
                if r == 1:
                    ref[b] = 0
                    freed.append(b)
                elif r > 1:
                    ref[b] = r - 1
                else:
                    raise InternalError(f"block {b} released with reference count {r}")
            done = True
        except IndexError:  # a block never taken is free: its count is 0
            raise InternalError(f"block {b} released with reference count 0") from None
        finally:
            self._queue(freed, done)

    def _queue(self, freed: list[int], whole: bool) -> None:
        """Queue ``freed`` (blocks a release freed, in the order it freed them) as one run
        at the tail; with ``empty_first`` and a ``whole`` release, those caching nothing go
        to :attr:`empty` instead, in that order."""
        if not freed:
            return
        self.free_count += len(freed)
        empty = self.empty
        if empty is not None and whole:
            key = self.key
            if NO_KEY in map(key.__getitem__, freed):
                keep: list[int] = []
                for b in freed:
                    if key[b] == NO_KEY:
                        empty.append(b)
                    else:
                        keep.append(b)
                freed = keep
                if not freed:
                    return
        serial = self._serial
        self._serial = serial + 1
        self._runs[serial] = freed
        self._run_of[freed[-1]] = serial

    def _release_linking(self, blocks: list[int]) -> None:
        """:meth:`release` linking each freed block into the queue at once."""
        # One plain loop: per element, a subscript assignment in the loop body is several
        # times cheaper than a bulk ``map(list.__setitem__, ...)``.
        self._cover_links()
        ref = self.ref
        nxt = self._next
        prv = self._prev
        tail = self._tail
        freed = 0
        b = -1
        try:
            for b in reversed(blocks):
                r = ref[b]
                if r == 1:
                    ref[b] = 0
                    prv[b] = tail
                    if tail == -1:
                        self._head = b
                    else:
                        nxt[tail] = b
                    tail = b
                    freed += 1
                elif r > 1:
                    ref[b] = r - 1
                else:
                    raise InternalError(f"block {b} released with reference count {r}")
        except IndexError:  # a block never taken is free: its count is 0
            raise InternalError(f"block {b} released with reference count 0") from None
        finally:
            if tail != -1:
                nxt[tail] = -1
            self._tail = tail
            self.free_count += freed
        if self.empty is not None and freed:
            self._move_empty(blocks, self.empty)

    def _move_empty(self, released: list[int], empty: deque[int]) -> None:
        """Move the blocks of ``released`` that are now free and cache nothing from the queue
        to the end of :attr:`empty`, in the order the release queued them (last first)."""
        ref = self.ref
        key = self.key
        for b in reversed(released):
            if ref[b] or key[b] != NO_KEY:
                continue
            self._unlink(b)
            empty.append(b)

    def _unlink(self, b: int) -> None:
        """Take block ``b`` out of the linked part of the queue."""
        prv = self._prev
        p = prv[b]
        prv[b] = UNLINKED
        self._join(p, self._next[b])

    def _join(self, left: int, right: int) -> None:
        """Link ``left`` to ``right`` in the queue (``-1``: the head or the tail), closing
        the gap of the blocks taken out between them."""
        if left == -1:
            self._head = right
        else:
            self._next[left] = right
        if right == -1:
            self._tail = left
        else:
            self._prev[right] = left

    def check(self) -> None:
        """Verify every invariant; raise :class:`~simclock.InternalError` on the first break.

        Invariants: the queue holds exactly the blocks with ``ref == 0``, each once, its
        linked part linked consistently both ways (and no other block linked) and each queued
        run indexed under its last block; no count is negative; ``cache`` maps each key to distinct
        blocks carrying that key, and every keyed block is cached.
        """
        n = self.num_blocks
        t = self.touched
        size = len(self.ref)
        if not (len(self.key) == size >= t and len(self._next) == len(self._prev)):
            raise InternalError("per-block lists do not cover the touched blocks")
        if len(self._prev) not in (0, size):
            raise InternalError("the queue links cover some of the per-block lists only")
        # links not made yet are those of blocks never linked
        nxt = self._next or [-1] * size
        prv = self._prev or [UNLINKED] * size
        beyond = range(t, size)
        if any(self.ref[b] or self.key[b] != NO_KEY or nxt[b] != -1 for b in beyond) or any(
            prv[b] != UNLINKED for b in beyond
        ):
            raise InternalError("a block never taken has a count, a key or links")
        queued = self.free_blocks()
        if len(queued) != self.free_count or len(set(queued)) != len(queued):
            raise InternalError("free queue length or membership is inconsistent")
        back: list[int] = []
        b = self._tail
        while b >= 0 and len(back) <= t:
            back.append(b)
            b = prv[b]
        empties = self.empty or ()
        runs = self._runs
        in_runs = sum(map(len, runs.values()))
        linked = queued[n - t + len(empties) : len(queued) - in_runs]
        if back[::-1] != linked:
            raise InternalError("free queue links disagree")
        if {b for b in range(t) if prv[b] != UNLINKED} != set(linked):
            raise InternalError("a block outside the linked part of the queue has links")
        if not all(runs.values()) or self._run_of != {r[-1]: s for s, r in runs.items()}:
            raise InternalError("a queued run is empty or indexed under another block")
        if runs and (self.eager_links or max(runs) >= self._serial or min(runs) < self._first):
            raise InternalError("a run is queued with eager links, or numbered ahead")
        if any(self.key[b] != NO_KEY for b in empties):
            raise InternalError("a block taken before the queue caches something")
        in_queue = set(queued)
        for b in range(t):
            if self.ref[b] < 0:
                raise InternalError(f"block {b} has a negative reference count")
            if (self.ref[b] == 0) != (b in in_queue):
                raise InternalError(f"block {b} is both free and referenced, or neither")
        self.cache.check()
        seen = 0
        for k, first in self.cache.items():
            copies = [first, *self.twins.get(k, ())]
            if len(set(copies)) != len(copies):
                raise InternalError(f"key {k} has an empty or repeated copy list")
            for b in copies:
                if self.key[b] != k:
                    raise InternalError(f"block {b} is cached under {k} but keyed otherwise")
            seen += len(copies)
        if any(k not in self.cache or not t for k, t in self.twins.items()):
            raise InternalError("a twin list is empty or has no cached first copy")
        if seen != sum(1 for b in range(t) if self.key[b] != NO_KEY):
            raise InternalError("a keyed block is missing from the cache")
        for k in self.cache:
            if k > (self._top_output if k >= OUTPUT_KEY_BASE else self._top):
                raise InternalError(f"key {k} is cached above the largest key registered")
