"""The prefix cache of a KV pool: each cached key and the block holding its first copy.

Most keys are cached a request's prompt at a time: a chain of keys interned one after the
other (consecutive numbers) held by blocks taken from the pool one after the other
(consecutive numbers too). Such a chain is kept as one *span* — its first key, its first
block and its length — instead of one dictionary entry per key; every other key is an entry
of a plain dictionary. A lookup walks the dictionary's entries as before and steps over a
span in one slice comparison; removing a key from the middle of a span cuts it in two.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from itertools import compress, count, islice
from operator import itemgetter, ne, sub

from simclock import InternalError

__all__ = ("PrefixCache",)

#: The fewest keys of a chain in blocks not all consecutive that are split into spans.
_STRETCHES_FROM = 8


class PrefixCache(Mapping[int, int]):
    """Key -> the block holding its earliest-registered cached copy, read as a mapping.

    Keys are in a dictionary (:attr:`single`) or in spans: ``starts[i] + o`` is held by
    ``firsts[i] + o`` for ``0 <= o < lengths[i]``. Spans are ordered by key, never overlap
    and hold no key of the dictionary. Iteration gives the dictionary's keys in insertion
    order, then the spans' keys in key order.
    """

    __slots__ = ("firsts", "lengths", "single", "spanned", "starts")

    def __init__(self) -> None:
        self.single: dict[int, int] = {}
        self.starts: list[int] = []
        self.firsts: list[int] = []
        self.lengths: list[int] = []
        self.spanned = 0  # keys held in spans

    # -- reading ----------------------------------------------------------------------------

    def get(self, key: int, default: int | None = None) -> int | None:  # type: ignore[override]
        """The block caching ``key``, or ``default``."""
        block = self.single.get(key)
        if block is not None:
            return block
        starts = self.starts
        if starts and type(key) is int:
            i = bisect_right(starts, key) - 1
            if i >= 0:
                offset = key - starts[i]
                if offset < self.lengths[i]:
                    return self.firsts[i] + offset
        return default

    def __getitem__(self, key: int) -> int:
        block = self.get(key)
        if block is None:
            raise KeyError(key)
        return block

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.single) + self.spanned

    def __iter__(self) -> Iterator[int]:
        yield from self.single
        for start, length in zip(self.starts, self.lengths, strict=True):
            yield from range(start, start + length)

    def _span_of(self, key: int) -> int:
        """The index of the span holding ``key``, or -1."""
        starts = self.starts
        i = bisect_right(starts, key) - 1
        if i >= 0 and key - starts[i] < self.lengths[i]:
            return i
        return -1

    def lookup_prefix(self, keys: list[int], limit: int, *, chain: bool = False) -> list[int]:
        """The blocks caching the longest cached prefix of ``keys[:limit]``.

        Entries of the dictionary are probed a slice of keys at a time (16, then twice as
        many each time) until the slice holding the first key missing there; a key found in
        a span takes, in one slice comparison, the keys after it that go on one by one
        within the span (a chain cached at once), and probing starts again after them. At
        the start and after a span, the first key alone is probed first: when the keys go
        on in another span (as a conversation's turns do, each cached a chain at a time),
        one probe finds that out instead of a slice.

        With ``chain``, the caller vouches that ``keys`` increase, as the keys of a sequence's
        blocks do (a chained key is interned after its parent; output keys come after the
        prompt's, in block order). Within a span, keys that increase go on one by one up to
        a position exactly when the key there is the span's key for it, so how far they go
        on is found from the last key, or by bisection, instead of a slice comparison.
        """
        single = self.single
        spans = bool(self.starts)
        out: list[int] = []
        start = 0
        size = 16
        warm = False  # the slice before hit in the dictionary: this one likely does too
        while start < limit:
            if not warm and spans and keys[start] not in single:
                taken = self._take_span(keys, start, limit, out, chain)
                if not taken:
                    break
                start += taken
                continue
            stop = min(limit, start + size)
            if warm and stop - start > 1:
                try:
                    out += itemgetter(*keys[start:stop])(single)
                except KeyError:
                    pass  # a miss in this slice: find it below
                else:
                    start = stop
                    size *= 2
                    continue
            part = list(map(single.get, keys[start:stop]))
            if None not in part:
                out += part  # type: ignore[arg-type]
                start = stop
                size *= 2
                warm = True
                continue
            miss = part.index(None)
            out += part[:miss]  # type: ignore[arg-type]
            start += miss
            if not spans:
                break
            taken = self._take_span(keys, start, limit, out, chain)
            if not taken:
                break
            start += taken
            size = 16
            warm = False
        return out

    def _take_span(
        self, keys: list[int], j: int, limit: int, out: list[int], chain: bool = False
    ) -> int:
        """Append the blocks of ``keys[j:]`` that a span holds one after the other, from
        ``keys[j]`` on (at most ``limit - j``); return how many. With ``chain``, ``keys``
        increase (see :meth:`lookup_prefix`)."""
        key = keys[j]
        i = self._span_of(key)
        if i < 0:
            return 0
        offset = key - self.starts[i]
        avail = min(self.lengths[i] - offset, limit - j)
        if chain:
            if avail > 1 and keys[j + avail - 1] != key + avail - 1:
                # keys[j + m] == key + m holds for m = 0 and not at the end, and once it
                # fails it fails from there on: the last m where it holds, by bisection
                lo = 0
                hi = avail - 1
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if keys[j + mid] == key + mid:
                        lo = mid
                    else:
                        hi = mid
                avail = lo + 1
        else:
            want = range(key, key + avail)
            if keys[j : j + avail] != list(want):
                avail = 1
                for got, expected in zip(
                    islice(keys, j + 1, j + len(want)), want[1:], strict=False
                ):
                    if got != expected:
                        break
                    avail += 1
        first = self.firsts[i] + offset
        out += range(first, first + avail)
        return avail

    def meets(self, keys: list[int]) -> bool:
        """Whether any of ``keys`` (distinct) is cached."""
        if not self.single.keys().isdisjoint(keys):
            return True
        starts = self.starts
        if not starts:
            return False
        return any(self._span_of(k) >= 0 for k in keys)

    def meets_chain(self, keys: list[int]) -> bool:
        """:meth:`meets` of keys that increase (a chain): one search per stretch of
        consecutive keys."""
        if not self.single.keys().isdisjoint(keys):
            return True
        starts = self.starts
        if not starts or keys[-1] < starts[0] or keys[0] >= starts[-1] + self.lengths[-1]:
            return False
        lengths = self.lengths
        n = len(keys)
        j = 0
        while j < n:
            m = _stretch(keys, j)
            first = keys[j]
            i = bisect_right(starts, first + m - 1) - 1
            if i >= 0 and starts[i] + lengths[i] > first:
                return True
            j += m
        return False

    # -- changing ---------------------------------------------------------------------------

    def put_chain(self, keys: list[int], blocks: list[int]) -> bool:
        """Cache ``blocks[i]`` under ``keys[i]``: keys that increase, none cached.

        Consecutive keys in blocks that are not all consecutive (a prompt computed in
        chunks: each chunk's blocks are taken at once, but a chunk's first block may be the
        one the chunk before started, and other requests take blocks in between) are held
        as the spans of their stretches of consecutive blocks.

        Returns:
            Whether they were held as one span (consecutive keys in consecutive blocks).
        """
        n = len(keys)
        first = blocks[0]
        key = keys[0]
        if n > 1 and keys[-1] - key == n - 1:
            if blocks[-1] - first == n - 1 and blocks == list(range(first, first + n)):
                self._put_span(key, first, n)
                return True
            if n >= _STRETCHES_FROM and self._put_stretches(keys, blocks):
                return False
        self.single.update(zip(keys, blocks, strict=True))
        return False

    def _put_stretches(self, keys: list[int], blocks: list[int]) -> bool:
        """Cache consecutive ``keys`` in ``blocks`` as one span per stretch of consecutive
        blocks (a stretch of one block in the dictionary), when there are at most half as
        many stretches as keys; return whether they were."""
        # block - key is the same along a stretch, and changes where a stretch begins
        offsets = list(map(sub, blocks, keys))
        begins = [0, *compress(count(1), map(ne, islice(offsets, 1, None), offsets))]
        n = len(keys)
        if 2 * len(begins) > n:
            return False
        single = self.single
        for a, b in zip(begins, [*begins[1:], n], strict=True):
            if b - a > 1:
                self._put_span(keys[a], blocks[a], b - a)
            else:
                single[keys[a]] = blocks[a]
        return True

    def _put_span(self, key: int, first: int, n: int) -> None:
        starts = self.starts
        lengths = self.lengths
        firsts = self.firsts
        i = len(starts)
        if i and key < starts[-1]:
            i = bisect_right(starts, key)
        self.spanned += n
        if i:
            before = lengths[i - 1]
            if starts[i - 1] + before == key and firsts[i - 1] + before == first:
                lengths[i - 1] = before + n  # goes on from the span before it
                return
        starts.insert(i, key)
        firsts.insert(i, first)
        lengths.insert(i, n)

    def put_many(self, keys: list[int], blocks: list[int]) -> None:
        """Cache ``blocks[i]`` under ``keys[i]``: distinct keys, none cached."""
        self.single.update(zip(keys, blocks, strict=True))

    def put(self, key: int, block: int) -> None:
        """Cache ``block`` under ``key``, which is not cached."""
        self.single[key] = block

    def replace(self, key: int, block: int) -> None:
        """Make ``block`` the copy of the cached ``key`` that lookups hit."""
        if key not in self.single:
            self._cut(self._span_of(key), key)
        self.single[key] = block

    def remove(self, key: int) -> None:
        """Uncache ``key``, which is cached."""
        if self.single.pop(key, None) is None:
            self._cut(self._span_of(key), key)

    def remove_many(self, keys: Sequence[int]) -> None:
        """:meth:`remove` each of ``keys`` (distinct, every one cached).

        Keys held in spans are taken out a stretch at a time: keys one apart (going up or
        down, as a chain's blocks are freed last first) that lie in one span are cut out of
        it in one step.
        """
        single = self.single
        if single:
            pop = single.pop
            rest = [k for k in keys if pop(k, None) is None]
        else:
            rest = list(keys)
        n = len(rest)
        j = 0
        while j < n:
            first = rest[j]
            m = 1
            if j + 1 < n:
                step = rest[j + 1] - first
                if step == 1 or step == -1:
                    m = 2
                    while j + m < n and rest[j + m] - rest[j + m - 1] == step:
                        m += 1
            last = rest[j + m - 1]
            lo, hi = (first, last) if first <= last else (last, first)
            i = self._span_of(lo)
            if i >= 0 and hi - self.starts[i] < self.lengths[i]:
                self._cut(i, lo, hi)
            else:  # the stretch runs over more than one span
                for key in rest[j : j + m]:
                    self._cut(self._span_of(key), key)
            j += m

    def _cut(self, i: int, key: int, hi: int | None = None) -> None:
        """Take ``key`` (through ``hi``, when given: keys of span ``i``) out of span ``i``,
        leaving the keys before and after them."""
        if i < 0:
            raise InternalError(f"key {key} is not cached")
        if hi is None:
            hi = key
        starts = self.starts
        firsts = self.firsts
        lengths = self.lengths
        start = starts[i]
        offset = key - start  # keys kept before
        after = start + lengths[i] - 1 - hi  # keys kept after
        self.spanned -= hi - key + 1
        if offset and after:
            lengths[i] = offset
            starts.insert(i + 1, hi + 1)
            firsts.insert(i + 1, firsts[i] + hi + 1 - start)
            lengths.insert(i + 1, after)
        elif offset:
            lengths[i] = offset
        elif after:
            starts[i] = hi + 1
            firsts[i] += hi + 1 - start
            lengths[i] = after
        else:
            del starts[i], firsts[i], lengths[i]

    def check(self) -> None:
        """Verify the spans: ordered by key, apart, not empty, counted, and holding no key
        of the dictionary; raise :class:`~simclock.InternalError` on the first break."""
        starts = self.starts
        lengths = self.lengths
        if not (len(starts) == len(self.firsts) == len(lengths)):
            raise InternalError("the prefix cache's span lists differ in length")
        if any(n < 1 for n in lengths) or sum(lengths) != self.spanned:
            raise InternalError("a span is empty, or the spans' keys are miscounted")
        for i in range(1, len(starts)):
            if starts[i - 1] + lengths[i - 1] > starts[i]:
                raise InternalError("the prefix cache's spans overlap or are out of order")
        if any(self._span_of(k) >= 0 for k in self.single):
            raise InternalError("a key is cached both alone and in a span")


def _stretch(keys: list[int], j: int) -> int:
    """How many of ``keys[j:]`` (increasing) go on one by one from ``keys[j]``."""
    first = keys[j]
    hi = len(keys) - j  # keys[j + t] - first >= t, equal while they go on one by one
    if keys[j + hi - 1] - first == hi - 1:
        return hi
    lo = 1
    hi -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if keys[j + mid - 1] - first == mid - 1:
            lo = mid
        else:
            hi = mid - 1
    return lo
