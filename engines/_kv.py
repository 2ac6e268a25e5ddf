"""The KV block manager with prefix caching (REFERENCE-engine §4).

Blocks are the integers ``0 .. num_blocks-1``; their state lives in plain parallel lists
(reference count, key, free-queue links), with no per-block objects. Free blocks
(``ref_cnt == 0``), cached or not, sit in one doubly linked queue: released blocks go to the
tail, allocation takes the head, so cached blocks are evicted least recently released first.
"""

from __future__ import annotations

from collections.abc import Iterable

from simclock import InternalError

__all__ = ("KVCache",)

NO_KEY = 0


class KVCache:
    """A fixed pool of KV blocks, their reference counts, the free queue and the prefix cache.

    State machine of a block: *free* (``ref 0``, in the queue, keyed or not) ->
    *referenced* (``ref >= 1``, out of the queue) by :meth:`allocate`, back to *free* when
    :meth:`release` drops its count to 0. Taking a keyed block from the queue head for fresh
    use removes its key from the cache (eviction).

    Key transitions (a key gaining its first cached copy, or losing its last) are appended to
    ``transitions`` as ``(stored, key)`` pairs for the owner to publish; the owner clears it.

    Attributes:
        num_blocks: usable blocks.
        block_size: token slots per block.
        ref: reference count per block.
        key: key per block (``0`` = none).
        free_count: blocks in the free queue.
        cache: key -> cached copies, earliest-registered first.
        transitions: key transitions not yet published.
    """

    __slots__ = (
        "_next",
        "_prev",
        "block_size",
        "cache",
        "free_count",
        "key",
        "num_blocks",
        "ref",
        "transitions",
    )

    def __init__(self, num_blocks: int, block_size: int) -> None:
        """Create ``num_blocks`` free, unkeyed blocks queued in index order."""
        n = num_blocks
        self.num_blocks = n
        self.block_size = block_size
        self.ref = [0] * n
        self.key = [NO_KEY] * n
        # Index ``n`` is the sentinel: next[n] is the head, prev[n] the tail.
        self._next = [*range(1, n + 1), 0]
        self._prev = [n, *range(n)]
        self.free_count = n
        self.cache: dict[int, list[int]] = {}
        self.transitions: list[tuple[bool, int]] = []

    # -- queries ---------------------------------------------------------------------------

    def free_blocks(self) -> list[int]:
        """The free queue, head (next to be taken) first."""
        out = []
        nxt = self._next
        b = nxt[self.num_blocks]
        while b != self.num_blocks:
            out.append(b)
            b = nxt[b]
        return out

    def lookup(self, keys: Iterable[int]) -> list[int]:
        """Return the blocks caching the longest cached prefix of ``keys``.

        Walks ``keys`` in order and stops at the first key without a cached copy; each hit
        is the key's earliest-registered copy. The caller bounds ``keys`` (§4.3 cap).
        """
        cache = self.cache
        out: list[int] = []
        for k in keys:
            copies = cache.get(k)
            if copies is None:
                break
            out.append(copies[0])
        return out

    def can_allocate(self, hits: list[int], need: int, reserve: int = 0) -> bool:
        """Whether :meth:`allocate` would succeed (no side effects)."""
        evictable = list(map(self.ref.__getitem__, hits)).count(0)
        return need + evictable + reserve <= self.free_count

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
            refs = list(map(ref.__getitem__, hits))
            evictable = refs.count(0)
            if need + evictable + reserve > self.free_count:
                return False
            if evictable:
                nxt = self._next
                prv = self._prev
                for b, r in zip(hits, refs, strict=True):
                    if r == 0:
                        p = prv[b]
                        q = nxt[b]
                        nxt[p] = q
                        prv[q] = p
                    ref[b] = r + 1
                self.free_count -= evictable
            else:
                for b, r in zip(hits, refs, strict=True):
                    ref[b] = r + 1
            blocks.extend(hits)
        elif need + reserve > self.free_count:
            return False
        if need:
            self._take(blocks, need)
        return True

    def _take(self, blocks: list[int], need: int) -> None:
        nxt = self._next
        prv = self._prev
        ref = self.ref
        key = self.key
        s = self.num_blocks
        for _ in range(need):
            b = nxt[s]
            q = nxt[b]
            nxt[s] = q
            prv[q] = s
            if key[b] != NO_KEY:
                self._evict(b)
            ref[b] = 1
            blocks.append(b)
        self.free_count -= need

    def _evict(self, b: int) -> None:
        k = self.key[b]
        copies = self.cache[k]
        if len(copies) == 1:
            del self.cache[k]
            self.transitions.append((False, k))
        else:
            copies.remove(b)
        self.key[b] = NO_KEY

    def register(self, block: int, key: int) -> None:
        """Give a referenced, unkeyed ``block`` its ``key`` and cache it (a twin if needed)."""
        self.key[block] = key
        copies = self.cache.get(key)
        if copies is None:
            self.cache[key] = [block]
            self.transitions.append((True, key))
        else:
            copies.append(block)

    def release(self, blocks: list[int]) -> None:
        """Drop one reference to each of ``blocks``, last first (§4.5).

        Blocks reaching zero references go to the queue tail with their keys kept, so within
        one release the sequence's tail block is evicted first and its root block last.

        Raises:
            InternalError: a reference count would go negative.
        """
        ref = self.ref
        nxt = self._next
        prv = self._prev
        s = self.num_blocks
        tail = prv[s]
        freed = 0
        try:
            for b in reversed(blocks):
                r = ref[b]
                if r > 1:
                    ref[b] = r - 1
                    continue
                if r < 1:
                    raise InternalError(f"block {b} released with reference count 0")
                ref[b] = 0
                nxt[tail] = b
                prv[b] = tail
                tail = b
                freed += 1
        finally:
            nxt[tail] = s
            prv[s] = tail
            self.free_count += freed

    def check(self) -> None:
        """Verify every invariant; raise :class:`~simclock.InternalError` on the first break.

        Invariants: the queue holds exactly the blocks with ``ref == 0``, each once, linked
        consistently both ways; no count is negative; ``cache`` maps each key to distinct
        blocks carrying that key, and every keyed block is cached.
        """
        n = self.num_blocks
        queued = self.free_blocks()
        if len(queued) != self.free_count or len(set(queued)) != len(queued):
            raise InternalError("free queue length or membership is inconsistent")
        back = []
        b = self._prev[n]
        while b != n:
            back.append(b)
            b = self._prev[b]
        if back[::-1] != queued:
            raise InternalError("free queue links disagree")
        in_queue = set(queued)
        for b in range(n):
            if self.ref[b] < 0:
                raise InternalError(f"block {b} has a negative reference count")
            if (self.ref[b] == 0) != (b in in_queue):
                raise InternalError(f"block {b} is both free and referenced, or neither")
        seen = 0
        for k, copies in self.cache.items():
            if not copies or len(set(copies)) != len(copies):
                raise InternalError(f"key {k} has an empty or repeated copy list")
            for b in copies:
                if self.key[b] != k:
                    raise InternalError(f"block {b} is cached under {k} but keyed otherwise")
            seen += len(copies)
        if seen != sum(1 for b in range(n) if self.key[b] != NO_KEY):
            raise InternalError("a keyed block is missing from the cache")
