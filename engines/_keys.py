"""Chained block keys from trace content ids (REFERENCE-engine §4.2).

The content of prompt position ``p`` is ``hash_ids[p // T]`` (``T`` = the trace's block
size). Engine block ``k`` covers positions ``[kE, (k+1)E)``; its content is the run-length
tuple of the ids of its positions, written as the bare id when the block holds one id only
(always the case when ``E`` divides ``T``). Output position ``P + i`` has content unique to
``(request id, i)``. Block keys chain: ``key_k = H(key_{k-1}, content_k)`` with ``H`` the
interning of ``(parent, content)`` pairs to consecutive integers, so a key names a whole
prefix and is collision-free. A block holding output positions belongs to one placement of
one request: its key is :func:`output_key` of the placement's number, not interned.

Forgetting. A key nobody holds any more is dropped from the table (see
:meth:`BlockKeyer.hold`): not cached by any engine, not held by a request placed on one, by
the memo or by a donor, and no ancestor of a key that is. Results cannot change: a prefix
hit needs every key of the chain cached, so the forgotten keys, and every key that will ever
chain from them, miss wherever they are looked up; should the prefix come back, it is
interned again, under a new number (numbers come from a counter and are never reused), and
misses the same way. Only the numbers differ from a keyer that never forgets: the number a
prefix gets after it was forgotten.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import compress, count, repeat
from operator import and_, lshift, ne, or_
from typing import Protocol

import attrs
import numpy as np
import numpy.typing as npt

from loadgen import Request

__all__ = (
    "ROOT_KEY",
    "BlockKeyer",
    "Content",
    "KeyHolder",
    "block_content",
    "prompt_contents",
)

#: The parent of block 0's key.
ROOT_KEY = 0

_MASK64 = (1 << 64) - 1

#: Requests whose prompt keys :meth:`BlockKeyer.block_keys` keeps (the newest ones asked
#: about): a policy asks, then the engine that takes the request; keys are recomputed, the
#: same, for a request asked about again after that.
MEMO_LIMIT = 4096

#: Donor tags :meth:`BlockKeyer.remember` keeps (the most recently remembered): donors only
#: save work, keys never depend on them.
DONOR_LIMIT = 65536

# Content-id runs up to this long are compared as lists in shared_prefix (numpy beyond).
_SMALL_COMPARE = 64

#: The keys a keyer holds before it first looks for keys to forget: below this many it never
#: does (a run that interns fewer pays nothing). After a look it waits until it holds twice
#: as many as it kept or estimated held.
FORGET_MIN = 1 << 16


class KeyHolder(Protocol):
    """Something that holds keys of a :class:`BlockKeyer` between its calls (an engine).

    See :meth:`BlockKeyer.hold`.
    """

    def held_keys_estimate(self) -> int:
        """About how many keys it holds (it only decides when to look at them)."""
        ...

    def held_keys(self) -> Iterable[Iterable[int]]:
        """Every key it holds, in any number of collections (non-keys, such as 0 or output
        keys, may be among them)."""
        ...


#: A block's content: a bare content id, or a run-length tuple of ``(id, count)`` prompt runs
#: and ``(request_id, first_output_index, count)`` output runs.
Content = int | tuple[tuple[object, ...], ...]


def block_content(
    hash_ids: Sequence[int],
    trace_block_size: int,
    prompt_length: int,
    request_id: str,
    index: int,
    block_size: int,
) -> Content:
    """Return the content of engine block ``index`` of a request (REFERENCE-engine §4.2).

    Args:
        hash_ids: the request's content ids, one per trace block.
        trace_block_size: ``T``, tokens per content id.
        prompt_length: ``P``.
        request_id: the request's id (names its output tokens).
        index: the engine block ``k``.
        block_size: ``E``.

    Returns:
        The bare id when the block lies in one prompt run of ``E`` equal ids, else the
        run-length tuple (adjacent equal ids merged).
    """
    lo = index * block_size
    hi = lo + block_size
    t = trace_block_size
    if hi <= prompt_length:
        j0 = lo // t
        j1 = (hi - 1) // t
        first = hash_ids[j0]
        if j0 == j1:
            return first
        if all(hash_ids[j] == first for j in range(j0 + 1, j1 + 1)):
            return first
    runs: list[tuple[object, ...]] = []
    if lo < prompt_length:
        end = min(hi, prompt_length)
        last_id: int | None = None
        count = 0
        for j in range(lo // t, (end - 1) // t + 1):
            a = max(lo, j * t)
            b = min(end, (j + 1) * t)
            cid = hash_ids[j]
            if cid == last_id:
                count += b - a
            else:
                if last_id is not None:
                    runs.append((last_id, count))
                last_id = cid
                count = b - a
        runs.append((last_id, count))
    if hi > prompt_length:
        start = max(lo, prompt_length)
        runs.append((request_id, start - prompt_length, hi - start))
    return tuple(runs)


#: Keys of blocks that hold output positions start here, above every interned key.
OUTPUT_KEY_BASE = 1 << 62


def output_key(serial: int, index: int) -> int:
    """The key of block ``index`` of the placement numbered ``serial`` (a block holding
    output positions: its content, and so its key, belongs to that request alone)."""
    return OUTPUT_KEY_BASE + (serial << 32) + index


def blocks_per_id(trace_block_size: int, block_size: int) -> int:
    """``T / E`` when every content id covers that many whole engine blocks, else 1."""
    return trace_block_size // block_size if trace_block_size % block_size == 0 else 1


def prompt_contents(
    hash_ids: Sequence[int], trace_block_size: int, prompt_length: int, block_size: int
) -> list[Content]:
    """Return the contents of the full prompt blocks of a request, block 0 first.

    The same values as :func:`block_content` for ``index`` in ``range(prompt_length //
    block_size)``, computed in one sweep when ``block_size`` divides ``trace_block_size``.
    """
    full = prompt_length // block_size
    if trace_block_size % block_size == 0:
        per_id = trace_block_size // block_size
        ids = hash_ids[: -(-full // per_id)]
        if per_id == 1:
            same: list[Content] = list(ids)
            return same
        repeated: list[Content] = np.repeat(np.asarray(ids, dtype=np.int64), per_id)[:full].tolist()
        return repeated
    return [
        block_content(hash_ids, trace_block_size, prompt_length, "", k, block_size)
        for k in range(full)
    ]


@attrs.define(eq=False)
class BlockKeyer:
    """Interns chained block keys; one per run, shared by every engine so keys compare.

    Keys are positive integers handed out in first-seen order, so they depend only on the
    order of the calls, never on ``hash()``. Once a holder of keys is registered
    (:meth:`hold`), the keyer forgets the keys nobody holds (see the module docstring) as the
    table grows.

    Args:
        forget: forget the keys nobody holds (once a holder is registered).
        forget_min: hold at least this many keys before looking for keys to forget.
    """

    # (parent, content) -> key; a bare int64 content id is packed with its parent into one
    # int (half the memory of a tuple, and most blocks have a bare id)
    _keys: dict[int | tuple[int, Content], int] = attrs.field(factory=dict, init=False, repr=False)
    # (request id, block size) -> (request, its full prompt blocks' keys), filled by block_keys
    _memo: dict[tuple[str, int], tuple[Request, tuple[int, ...]]] = attrs.field(
        factory=dict, init=False, repr=False
    )
    # (engine block size, donor tag) -> (trace block size, content ids, keys of leading full
    # prompt blocks) of the newest request remembered under that tag; see shared_prefix
    _donors: dict[tuple[int, tuple[str, object]], tuple[int, npt.NDArray[np.int64], list[int]]] = (
        attrs.field(factory=dict, init=False, repr=False)
    )
    # blocks per content id -> (packed parent and content id of the first block of a content
    # id's blocks) -> the keys of those blocks: the first of them when they are consecutive,
    # else all of them; filled by known's walks (see known)
    _spans: dict[int, dict[int, int | tuple[int, ...]]] = attrs.field(
        factory=dict, init=False, repr=False
    )

    # Whole content ids interned at once (see extend): the keys of their blocks are the
    # consecutive numbers start .. start + length - 1, and only the pair of the first block
    # is in ``_keys``; a pair (k, content id) with k one of the first length - 1 numbers is
    # interned as k + 1 (see _inner). Starts are ascending (new keys only grow).
    _span_starts: list[int] = attrs.field(factory=list, init=False, repr=False)
    # each span's length (blocks per content id) and content id
    _span_lengths: list[int] = attrs.field(factory=list, init=False, repr=False)
    _span_cids: list[int] = attrs.field(factory=list, init=False, repr=False)
    # the keys of the spans after their first (the keys held outside the table)
    _span_inner: int = attrs.field(default=0, init=False, repr=False)

    _serials: int = attrs.field(default=0, init=False, repr=False)
    forget: bool = attrs.field(default=True, kw_only=True)
    forget_min: int = attrs.field(default=FORGET_MIN, kw_only=True)
    # the last key interned: keys are numbered from a counter, never by the table's size
    _last: int = attrs.field(default=0, init=False, repr=False)
    _holders: list[KeyHolder] = attrs.field(factory=list, init=False, repr=False)
    # the table's size at which to look for keys to forget next
    _look_at: int = attrs.field(default=0, init=False, repr=False)
    _forgotten: int = attrs.field(default=0, init=False, repr=False)
    _forgetting: bool = attrs.field(default=False, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._look_at = self.forget_min

    def __len__(self) -> int:
        """The number of distinct keys interned so far (forgotten ones included)."""
        return self._last

    @property
    def held(self) -> int:
        """The number of keys the keyer holds now (interned and not forgotten)."""
        return len(self._keys) + self._span_inner

    def _inner(self, parent: int, content: Content) -> int | None:
        """The key of ``(parent, content)`` when it is a block after the first of a whole
        content id interned at once, else ``None``."""
        starts = self._span_starts
        if not starts or type(content) is not int:
            return None
        i = bisect_right(starts, parent) - 1
        if i < 0:
            return None
        if parent - starts[i] < self._span_lengths[i] - 1 and content == self._span_cids[i]:
            return parent + 1
        return None

    @property
    def forgotten(self) -> int:
        """The number of keys forgotten so far."""
        return self._forgotten

    def hold(self, holder: KeyHolder) -> None:
        """Register something that holds keys between calls (every engine does).

        A keyer forgets nothing until something is registered, and from then on keeps
        every key a holder reports, with their ancestors. Whatever keeps keys between calls
        to the keyer (a cache, a queue of placed requests) must be registered, or the keyer
        built with ``forget=False``; keys asked for by :meth:`block_keys` are kept for the
        requests asked about last (``MEMO_LIMIT``) and need no holder.
        """
        self._holders.append(holder)

    def new_serial(self) -> int:
        """Number a placement of a request on an engine (1, 2, ... in call order); the keys
        of its blocks that hold output positions derive from it (:func:`output_key`)."""
        self._serials += 1
        return self._serials

    def key(self, parent: int, content: Content) -> int:
        """Return the key of a block with ``content`` after the prefix keyed ``parent``.

        Args:
            parent: the key of the previous block (``ROOT_KEY`` = 0 for block 0).
            content: a bare content id (an int64) or a run-length tuple.
        """
        pair = (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
        key = self._keys.get(pair)
        if key is None:
            key = self._inner(parent, content)
        if key is None:
            self._last = key = self._last + 1
            self._keys[pair] = key
        return key

    def peek(self, parent: int, content: Content) -> int | None:
        """Return the key of ``(parent, content)`` if it is interned (and not forgotten),
        else ``None``."""
        pair = (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
        key = self._keys.get(pair)
        return self._inner(parent, content) if key is None else key

    def extend(
        self, keys: list[int], contents: Sequence[Content], stop: int, per_id: int = 1
    ) -> None:
        """Intern the chained keys of blocks ``len(keys) .. stop - 1`` and append them.

        Args:
            keys: the keys of blocks ``0 .. len(keys) - 1``, extended in place.
            contents: block contents, indexed by block (at least ``stop`` of them; those
                of blocks ``0 .. len(keys) - 1`` are not read).
            stop: the number of keys ``keys`` holds afterwards.
            per_id: as for :meth:`known`: the content ids whose blocks are all new are
                remembered for its walks.
        """
        # the blocks interned before, up to the first that never was
        self.known(keys, contents, stop, per_id)
        table = self._keys
        j = len(keys)
        if j >= stop:
            return
        if len(table) + self._span_inner >= self._look_at and self.forget and self._holders:
            self._forget_unheld(keys)
            table = self._keys
        # From the first key never interned on, every key is new: a new key has never been
        # anyone's parent. So they are the next ``stop - j`` numbers, interned in one step.
        first = self._last + 1
        self._last += stop - j
        fresh = range(first, first + stop - j)
        keys.extend(fresh)
        # Whole content ids among the new blocks (every block of the id in ``contents``,
        # all holding the bare id): only the pair of the first block goes in the table, the
        # others are interned as the span (see _inner).
        whole = range(-(-j // per_id) * per_id, stop - per_id + 1, per_id) if per_id > 1 else ()
        if whole:
            a0 = whole[0]
            heads = contents[a0 : whole[-1] + 1 : per_id]
            if (
                set(map(type, heads)) == {int}
                and heads == contents[a0 + per_id - 1 : whole[-1] + per_id : per_id]
            ):
                # every whole id holds the bare id in all its blocks (always, when E
                # divides T): the ids' first blocks, in bulk
                if a0 > j:
                    self._insert(table, keys, contents, j, a0)
                starts = range(first + a0 - j, first + whole[-1] - j + 1, per_id)
                befores = [keys[a0 - 1] if a0 else ROOT_KEY, *(k - 1 for k in starts[1:])]
                pairs = list(
                    map(or_, map(lshift, befores, repeat(64)), map(and_, heads, repeat(_MASK64)))
                )
                table.update(zip(pairs, starts, strict=True))
                self._spans.setdefault(per_id, {}).update(zip(pairs, starts, strict=True))
                self._span_starts.extend(starts)
                self._span_lengths.extend(repeat(per_id, len(heads)))
                self._span_cids.extend(heads)  # type: ignore[arg-type]
                self._span_inner += len(starts) * (per_id - 1)
                lo = whole[-1] + per_id
                if lo < stop:
                    self._insert(table, keys, contents, lo, stop)
                return
        self._insert(table, keys, contents, j, stop)

    def extend_prompt(self, keys: list[int], request: Request, block_size: int) -> None:
        """:meth:`extend` ``keys`` to the keys of every full prompt block of ``request``.

        Args:
            keys: the keys of its leading blocks (a shared prefix), extended in place.
            request: the request.
            block_size: the engine block size ``E``.
        """
        t = request.block_size
        per_id = blocks_per_id(t, block_size)
        if per_id > 1:  # E divides T: every block holds one bare id
            full = request.input_length // block_size
            ids = request.hash_ids[: -(-full // per_id)].tolist()
            self.extend_ids(keys, ids, min(full, len(ids) * per_id), per_id)
            return
        if t == block_size:
            # a block per content id: only the blocks after the shared prefix are read, so
            # only their ids are made Python ints (a long conversation's prompt is mostly
            # the prefix its previous turn shares)
            j = len(keys)
            full = min(request.input_length // block_size, len(request.hash_ids))
            contents: list[Content] = [0] * j
            contents += request.hash_ids[j:full].tolist()
        else:
            ids = request.hash_ids.tolist()
            contents = prompt_contents(ids, t, request.input_length, block_size)
        self.extend(keys, contents, len(contents), per_id)

    def extend_ids(self, keys: list[int], ids: Sequence[int], stop: int, per_id: int) -> None:
        """:meth:`extend` for blocks holding bare content ids, ``per_id`` blocks each.

        Block ``j`` holds ``ids[j // per_id]`` (``E`` divides ``T``). Interns and appends
        exactly what ``extend(keys, contents, stop, per_id)`` does with the contents spelled
        out block by block (the same keys, table, spans and numbers), walking the content
        ids instead of a list of every block's content.

        Args:
            keys: the keys of blocks ``0 .. len(keys) - 1``, extended in place.
            ids: the content ids, at least ``ceil(stop / per_id)`` of them.
            stop: the number of keys ``keys`` holds afterwards.
            per_id: engine blocks per content id (``T / E``, at least 2).
        """
        # the blocks interned before: whole content ids whose span is known, one step each,
        # then block by block from the first that is not (the walk of _walk_known)
        if not len(keys) % per_id:
            self._walk_spans(keys, ids, per_id, stop)
        self._walk_known(keys, ids, per_id, stop, per_id)
        j = len(keys)
        table = self._keys
        spans = self._spans.setdefault(per_id, {})
        if j >= stop:
            return
        if len(table) + self._span_inner >= self._look_at and self.forget and self._holders:
            self._forget_unheld(keys)
            table = self._keys
            spans = self._spans.setdefault(per_id, {})
        # every key from here on is new (see extend)
        first = self._last + 1
        self._last += stop - j
        keys.extend(range(first, first + stop - j))
        a0 = -(-j // per_id) * per_id  # the first whole content id's first block
        lo = stop // per_id * per_id  # the block after the last whole content id
        if a0 >= lo:  # no whole content id: the end of one, and the start of the next
            if a0 > j:
                self._insert_id(table, keys, ids[j // per_id], j, min(a0, stop))
            if a0 < stop:
                self._insert_id(table, keys, ids[a0 // per_id], a0, stop)
            return
        if a0 > j:
            self._insert_id(table, keys, ids[j // per_id], j, a0)
        heads = ids[a0 // per_id : lo // per_id]
        start = first + a0 - j
        starts = range(start, start + len(heads) * per_id, per_id)
        befores = [keys[a0 - 1] if a0 else ROOT_KEY, *range(start + per_id - 1, starts[-1], per_id)]
        # (content ids are int64: the mask leaves the non-negative ones as they are)
        lows = heads if min(heads) >= 0 else list(map(and_, heads, repeat(_MASK64)))
        pairs = list(map(or_, map(lshift, befores, repeat(64)), lows))
        table.update(zip(pairs, starts, strict=True))
        spans.update(zip(pairs, starts, strict=True))
        self._span_starts.extend(starts)
        self._span_lengths.extend(repeat(per_id, len(heads)))
        self._span_cids.extend(heads)
        self._span_inner += len(starts) * (per_id - 1)
        if lo < stop:
            self._insert_id(table, keys, ids[lo // per_id], lo, stop)

    @staticmethod
    def _insert_id(
        table: dict[int | tuple[int, Content], int],
        keys: list[int],
        content: int,
        lo: int,
        hi: int,
    ) -> None:
        """Put the pairs of blocks ``lo .. hi - 1`` (keys given), all holding the bare
        id ``content``, in the table."""
        low = content & _MASK64
        parents = keys[lo - 1 : hi - 1] if lo else [ROOT_KEY, *keys[: hi - 1]]
        table.update(zip([(p << 64) | low for p in parents], keys[lo:hi], strict=True))

    @staticmethod
    def _insert(
        table: dict[int | tuple[int, Content], int],
        keys: list[int],
        contents: Sequence[Content],
        lo: int,
        hi: int,
    ) -> None:
        """Put the pairs of blocks ``lo .. hi - 1`` (keys given) in the table."""
        part = contents[lo:hi]
        parents = keys[lo - 1 : hi - 1] if lo else [ROOT_KEY, *keys[: hi - 1]]
        if set(map(type, part)) == {int}:
            pairs: list[int | tuple[int, Content]] = list(
                map(or_, map(lshift, parents, repeat(64)), map(and_, part, repeat(_MASK64)))
            )
        else:
            pairs = [
                (p << 64) | (c & _MASK64) if type(c) is int else (p, c)
                for p, c in zip(parents, part, strict=True)
            ]
        table.update(zip(pairs, keys[lo:hi], strict=True))

    def known(
        self, keys: list[int], contents: Sequence[Content], stop: int, per_id: int = 1
    ) -> None:
        """Append the keys of blocks ``len(keys) ..`` while they were interned before.

        Like :meth:`extend` with :meth:`peek`: stops before block ``stop`` or at the first
        block whose key was never interned; interns nothing.

        Args:
            keys: the keys of blocks ``0 .. len(keys) - 1``, extended in place.
            contents: block contents, indexed by block (at least ``stop`` of them; those
                of blocks ``0 .. len(keys) - 1`` are not read).
            stop: the block to stop before.
            per_id: ``T / E`` when every content id covers that many whole blocks (blocks
                ``m * per_id ..`` all hold id ``m``); the walk then steps over a content
                id's blocks at once once it has walked them before.
        """
        table = self._keys
        parent = keys[-1] if keys else ROOT_KEY
        append = keys.append
        j = len(keys)
        if per_id > 1:
            self._walk_known(keys, contents, 1, stop, per_id)
            return
        for i in range(j, stop):
            content = contents[i]
            pair = (
                (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
            )
            key = table.get(pair)
            if key is None:
                key = self._inner(parent, content)
                if key is None:
                    return
            append(key)
            parent = key

    def _walk_spans(self, keys: list[int], ids: Sequence[int], per_id: int, stop: int) -> None:
        """Append the keys of whole content ids (blocks ``len(keys) ..``, a multiple of
        ``per_id``, up to ``stop``) while their span is known: the steps :meth:`_walk_known`
        takes over known spans, without its per-block work."""
        spans = self._spans.get(per_id)
        if not spans:
            return
        get = spans.get
        parent = keys[-1] if keys else ROOT_KEY
        extend = keys.extend
        m = len(keys) // per_id
        for content in ids[m : stop // per_id]:
            span = get((parent << 64) | (content & _MASK64))
            if span is None:
                return
            if type(span) is int:
                parent = span + per_id - 1
                extend(range(span, parent + 1))
            else:
                extend(span)  # type: ignore[arg-type]
                parent = span[-1]  # type: ignore[index]

    def _walk_known(
        self, keys: list[int], contents: Sequence[Content], stride: int, stop: int, per_id: int
    ) -> None:
        """:meth:`known`'s walk with ``per_id`` blocks per content id (at least 2): block
        ``j`` holds ``contents[j // stride]`` (``stride`` 1: a content per block; ``per_id``:
        a content id per id). Steps over a content id's blocks at once when its span is
        known, and remembers the span of an id it walked block by block."""
        table = self._keys
        spans = self._spans.setdefault(per_id, {})
        parent = keys[-1] if keys else ROOT_KEY
        append = keys.append
        j = len(keys)
        while j < stop:
            content = contents[j // stride]
            if j % per_id == 0 and type(content) is int:
                span = spans.get((parent << 64) | (content & _MASK64))
                if span is not None:
                    take = min(per_id, stop - j)
                    if type(span) is int:
                        keys.extend(range(span, span + take))
                    else:
                        keys.extend(span[:take])  # type: ignore[index]
                    parent = keys[-1]
                    j += take
                    continue
            pair = (
                (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
            )
            key = table.get(pair)
            if key is None:
                key = self._inner(parent, content)
                if key is None:
                    return
            append(key)
            parent = key
            j += 1
            if j % per_id == 0:
                # a content id's blocks walked: remember them as one step
                first = j - per_id
                head = contents[first // stride]
                if type(head) is int:
                    span_keys = keys[first:j]
                    before = keys[first - 1] if first else ROOT_KEY
                    k0 = span_keys[0]
                    consecutive = span_keys == list(range(k0, k0 + per_id))
                    spans[(before << 64) | (head & _MASK64)] = (
                        k0 if consecutive else tuple(span_keys)
                    )

    def _forget_unheld(self, keys: list[int]) -> None:
        """Drop the keys nobody holds (``keys`` is being extended: it is held too).

        Looks only when the table holds at least twice the keys the holders, the memo and the
        donors estimate they hold; then keeps what they hold and every ancestor of it, and
        waits for the table to double again.
        """
        if self._forgetting:
            return  # asked again while the holders were being read: once is enough
        memo = self._memo.values()
        donors = self._donors.values()
        estimate = sum(h.held_keys_estimate() for h in self._holders)
        estimate += sum(len(k) for _, k in memo) + sum(len(d[2]) for d in donors)
        if len(self._keys) + self._span_inner < 2 * estimate:
            self._look_at = max(self.forget_min, 2 * estimate)
            return
        self._forgetting = True
        try:
            live: set[int] = set(keys)
            for holder in self._holders:
                for held in holder.held_keys():  # may bring an engine up to date
                    live.update(held)
        finally:
            self._forgetting = False
        # read after the holders: whatever was interned or remembered meanwhile is seen
        for _, held in self._memo.values():
            live.update(held)
        for donor in self._donors.values():
            live.update(donor[2])
        table = self._keys
        starts = self._span_starts
        lengths = self._span_lengths
        # a live key inside a whole content id interned at once makes the id's first key live
        # (the keys before it in the span are its ancestors)
        for i, start in enumerate(starts):
            if start not in live and not live.isdisjoint(range(start + 1, start + lengths[i])):
                live.add(start)
        # Children are interned after their parents, and the table keeps interning order:
        # newest first, a live key's parent is reached after it. A parent inside a span
        # brings the span's first key along, which is older still.
        add = live.add
        for pair, key in reversed(table.items()):
            if key in live:
                parent = pair >> 64 if type(pair) is int else pair[0]  # type: ignore[index]
                add(parent)
                if starts:
                    i = bisect_right(starts, parent) - 1
                    if i >= 0 and 0 < parent - starts[i] < lengths[i]:
                        add(starts[i])
        # (the filters below run in C: an hour of traffic forgets millions of keys)
        kept = dict(compress(table.items(), map(live.__contains__, table.values())))
        self._forgotten += len(table) - len(kept)
        self._keys = kept
        whole = list(map(live.__contains__, starts))  # the spans kept
        kept_lengths = list(compress(lengths, whole))
        inner = sum(kept_lengths) - len(kept_lengths)
        self._forgotten += self._span_inner - inner
        self._span_inner = inner
        self._span_starts = list(compress(starts, whole))
        self._span_lengths = kept_lengths
        self._span_cids = list(compress(self._span_cids, whole))
        for per_id, spans in self._spans.items():
            # a span whose last key is kept is kept whole (its other keys are ancestors)
            self._spans[per_id] = {
                head: span
                for head, span in spans.items()
                if (span + per_id - 1 if type(span) is int else span[-1]) in live  # type: ignore[index]
            }
        self._look_at = max(self.forget_min, 2 * (len(kept) + inner))

    @staticmethod
    def _donor_tags(request: Request) -> tuple[tuple[str, object], ...]:
        first = ("first", int(request.hash_ids[0]))
        conversation = request.identity.conversation_id
        if conversation is None:
            return (first,)
        return (("conversation", conversation), first)

    def remember(self, request: Request, block_size: int, keys: Sequence[int]) -> None:
        """Offer ``keys`` (leading block keys of ``request``) to later requests' key lookups.

        The request becomes the newest *donor* of its conversation and of its first content
        id: a later request that shares a prefix of content ids with it takes the keys of the
        shared full prompt blocks from it (:meth:`shared_prefix`) instead of walking the chain
        block by block. Keys are a function of content, so results never depend on donors.

        Args:
            request: the request the keys belong to.
            block_size: the engine block size ``E`` the keys were made for.
            keys: interned keys of its blocks 0, 1, ... (any leading part).
        """
        full = min(request.input_length // block_size, len(keys))
        if full == 0 or not request.hash_ids.size:
            return
        held = keys[:full]
        donor = (request.block_size, request.hash_ids, held if type(held) is list else list(held))
        donors = self._donors
        for tag in self._donor_tags(request):
            donors.pop((block_size, tag), None)  # the newest donor goes last
            donors[(block_size, tag)] = donor
        while len(donors) > DONOR_LIMIT:  # the least recently remembered tags go first
            del donors[next(iter(donors))]

    def shared_prefix(self, request: Request, block_size: int) -> list[int]:
        """Return the keys of the leading full prompt blocks a remembered request shares.

        Compares ``request``'s content ids with those of the newest donor of its conversation
        and of its first content id (one vectorised comparison each) and returns the keys of
        the engine blocks that lie entirely inside both prompts and inside the common run of
        ids; the longer of the two, possibly empty. Every key returned is interned.

        Args:
            request: the request whose keys are wanted.
            block_size: the engine block size ``E``.
        """
        ids = request.hash_ids
        if not ids.size:
            return []
        t = request.block_size
        full = request.input_length // block_size
        best: list[int] = []
        for tag in self._donor_tags(request):
            donor = self._donors.get((block_size, tag))
            if donor is None or donor[0] != t:
                continue
            donor_ids, donor_keys = donor[1], donor[2]
            m = min(ids.size, donor_ids.size)
            if m <= _SMALL_COMPARE:
                # a few ids: plain lists compare faster than numpy's calls cost
                mine = ids[:m].tolist()
                theirs = donor_ids[:m].tolist()
                common = m if mine == theirs else next(compress(count(), map(ne, mine, theirs)))
            else:
                differ = np.flatnonzero(ids[:m] != donor_ids[:m])
                common = int(differ[0]) if differ.size else m
            n = min(full, len(donor_keys), common * t // block_size)
            if n > len(best):
                best = donor_keys[:n]
        return best

    def cached_block_keys(self, request: Request, block_size: int) -> tuple[int, ...] | None:
        """The keys :meth:`block_keys` returned for this very ``request`` object, or ``None``."""
        memo = self._memo.get((request.id, block_size))
        if memo is None or memo[0] is not request:
            return None
        return memo[1]

    def block_keys(self, request: Request, block_size: int) -> tuple[int, ...]:
        """Return the chained keys of the full prompt blocks of ``request``.

        The result is remembered per request id and block size (for the same request
        object), so asking again, from any engine or policy, costs one lookup.

        Args:
            request: the request (its ``hash_ids`` cover ``ceil(P / T)`` trace blocks).
            block_size: the engine block size ``E``.

        Returns:
            ``floor(P / E)`` keys, block 0 first.
        """
        memo = self._memo.get((request.id, block_size))
        if memo is not None and memo[0] is request:
            return memo[1]
        keys = self.shared_prefix(request, block_size)
        self.extend_prompt(keys, request, block_size)
        self.remember(request, block_size, keys)
        result = tuple(keys)
        kept = self._memo
        kept[(request.id, block_size)] = (request, result)
        if len(kept) > MEMO_LIMIT:  # the oldest request asked about goes first
            del kept[next(iter(kept))]
        return result
