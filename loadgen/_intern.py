"""Content-id interning and block normalization (REFERENCE-workloads §1.4)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import pairwise

import attrs
import numpy as np
import numpy.typing as npt

__all__ = ("ContentInterner", "LocalScope", "Run", "reblock")

Ids = npt.NDArray[np.int64]

_TABLE_LIMIT = 1 << 24
#: Local scopes holding at least this many ids on average, one after the other in the
#: stream, are numbered scope by scope (see ContentInterner.intern_local_streams).
SCOPE_BY_SCOPE_FROM = 4096

KeyIds = Iterable[tuple[Hashable, int]]


def _first_seen(keys: Ids, start: int) -> tuple[Ids, Ids]:
    """Number a stream's distinct keys from ``start`` in order of first appearance.

    Returns:
        Each position's number, and the positions where a key first appears (ascending).
    """
    size = int(keys.size)
    if size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    low = int(keys.min())
    span = int(keys.max()) - low + 1
    if span <= 4 * size + 1024:
        return _first_seen_dense(keys - low, span, start)
    # Few temporaries of the stream's size alive at once, reused in place: each megabyte
    # of fresh pages costs about a millisecond of system time (bench/read.py, agentic).
    order = np.argsort(keys, kind="stable")  # equal keys keep their stream order
    ordered = keys[order]
    starts = np.empty(size, dtype=np.bool_)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    del ordered
    first = order[starts]  # each key's first position in the stream, in key order
    fresh = np.zeros(size, dtype=np.bool_)
    fresh[first] = True
    # Running counts in place on an int64 copy: np.cumsum(bools, dtype=np.int64) converts
    # into a fresh array, several times slower on this machine (bench/read.py, agentic).
    rank = fresh.astype(np.int64)
    np.cumsum(rank, out=rank)
    rank += start - 1
    key_rank = rank[first]  # each key's number, in key order
    del rank, first
    run = starts.astype(np.int64)  # each sorted position's key, from 0
    del starts
    np.cumsum(run, out=run)
    run -= 1
    np.take(key_rank, run, out=run)
    out = np.empty(size, dtype=np.int64)
    out[order] = run
    return out, np.flatnonzero(fresh)


def _first_seen_dense(keys: Ids, span: int, start: int) -> tuple[Ids, Ids]:
    """:func:`_first_seen` of keys in ``[0, span)`` with ``span`` about the stream's size:
    each key's first position from a table, no sort (bench/read.py, delta sessions)."""
    size = int(keys.size)
    first = np.full(span, size, dtype=np.int64)
    np.minimum.at(first, keys, np.arange(size, dtype=np.int64))
    fresh = np.zeros(size, dtype=np.bool_)
    fresh[first[first < size]] = True
    positions = np.flatnonzero(fresh)
    lookup = np.empty(span, dtype=np.int64)
    lookup[keys[positions]] = np.arange(start, start + positions.size, dtype=np.int64)
    return lookup[keys], positions


@attrs.define(eq=False)
class ContentInterner:
    """Maps ``(scope, raw id)`` to run-unique ints in first-seen order (§1.4.1).

    One interner serves one run (all inputs of it); there is no global state. A
    *private* id is a fresh int that nothing else shares.

    State: ``next_id`` (the next int handed out) and one dictionary per scope, plus the
    ids :meth:`intern_stream` interned, as sorted arrays, until a dictionary needs them.
    """

    next_id: int = 0
    _scopes: dict[str, dict[Hashable, int]] = attrs.field(factory=dict, repr=False)
    _arrays: dict[str, tuple[Ids, Ids]] = attrs.field(factory=dict, repr=False)
    _lazy: dict[str, Callable[[dict[Hashable, int]], KeyIds]] = attrs.field(
        factory=dict, repr=False
    )

    def scope_size(self, scope: str) -> int:
        """Return how many distinct raw ids ``scope`` has interned so far."""
        return len(self._table(scope))

    def intern(self, scope: str, raw: Hashable) -> int:
        """Return the int of ``raw`` in ``scope``, assigning the next one if it is new."""
        table = (
            self._table(scope) if self._arrays or self._lazy else self._scopes.setdefault(scope, {})
        )
        found = table.get(raw)
        if found is None:
            found = table[raw] = self.next_id
            self.next_id += 1
        return found

    def intern_many(self, scope: str, raws: Sequence[Hashable]) -> list[int]:
        """Intern every raw id of ``raws`` in order and return their ints."""
        table = (
            self._table(scope) if self._arrays or self._lazy else self._scopes.setdefault(scope, {})
        )
        out: list[int] = []
        nxt = self.next_id
        for raw in raws:
            found = table.get(raw)
            if found is None:
                found = table[raw] = nxt
                nxt += 1
            out.append(found)
        self.next_id = nxt
        return out

    def intern_stream(self, scope: str, raws: Ids) -> Ids:
        """Intern a stream of raw ids into ``scope`` at once, negative ones as private ids.

        The result equals walking ``raws`` in order and calling :meth:`intern` for each
        non-negative value and :meth:`private` for each negative one, provided every
        negative value occurs once. It runs vectorized: the scope keeps what it learns as
        two sorted arrays, moved into its dictionary only when the per-id methods need it.

        Args:
            scope: the content scope of the non-negative ids.
            raws: the stream; each negative value stands for one private id.

        Returns:
            The interned ids, same shape as ``raws``.
        """
        if raws.size == 0:
            return np.empty(0, dtype=np.int64)
        table = self._table(scope) if scope in self._lazy else self._scopes.get(scope)
        low, top = int(raws.min()), int(raws.max())
        if not table and scope not in self._arrays and low >= 0 and top < 4 * raws.size + 1024:
            return self._intern_dense(scope, raws, top + 1)
        uniq, first, inverse = np.unique(raws, return_index=True, return_inverse=True)
        known = np.full(uniq.size, -1, dtype=np.int64)
        shared = uniq >= 0
        if table:
            values = uniq[shared].tolist()
            known[shared] = np.fromiter(
                (table.get(v, -1) for v in values), dtype=np.int64, count=len(values)
            )
        keys, ids = self._arrays.get(scope, (np.empty(0, np.int64), np.empty(0, np.int64)))
        if keys.size:
            at = np.minimum(np.searchsorted(keys, uniq), keys.size - 1)
            hit = shared & (keys[at] == uniq)
            known[hit] = ids[at[hit]]
        fresh = np.flatnonzero(known < 0)
        fresh = fresh[np.argsort(first[fresh], kind="stable")]
        known[fresh] = np.arange(self.next_id, self.next_id + fresh.size, dtype=np.int64)
        self.next_id += int(fresh.size)
        named = fresh[shared[fresh]]
        if named.size:
            if table:
                table.update(zip(uniq[named].tolist(), known[named].tolist(), strict=True))
            else:
                keys = np.concatenate((keys, uniq[named]))
                ids = np.concatenate((ids, known[named]))
                order = np.argsort(keys, kind="stable")
                self._arrays[scope] = (keys[order], ids[order])
        return known[inverse.reshape(-1)]

    def _intern_dense(self, scope: str, raws: Ids, size: int) -> Ids:
        """:meth:`intern_stream` into an empty scope of small non-negative ids, unsorted:
        each value's first position, then ranks by a running count (bench/read.py)."""
        count = raws.size
        first = np.full(size, count, dtype=np.int64)
        np.minimum.at(first, raws, np.arange(count, dtype=np.int64))
        starts = np.zeros(count, dtype=np.bool_)
        starts[first[first < count]] = True
        rank = np.cumsum(starts, dtype=np.int64) - 1 + self.next_id
        lookup = np.full(size, -1, dtype=np.int64)
        lookup[raws[starts]] = rank[starts]
        self.next_id += int(starts.sum())
        keys = np.flatnonzero(lookup >= 0).astype(np.int64)
        self._arrays[scope] = (keys, lookup[keys])
        return lookup[raws]

    def _table(self, scope: str) -> dict[Hashable, int]:
        """The scope's dictionary, with anything :meth:`intern_stream` learnt moved in."""
        table = self._scopes.setdefault(scope, {})
        pending = self._arrays.pop(scope, None)
        if pending is not None:
            keys, ids = pending
            order = np.argsort(ids, kind="stable")  # first-seen order, as intern() would
            table.update(zip(keys[order].tolist(), ids[order].tolist(), strict=True))
        name = self._lazy.pop(scope, None)
        if name is not None:
            table.update(name(table))
        return table

    def intern_array(self, raws: npt.NDArray[np.int64]) -> Ids:
        """Intern a whole scope's int ids at once, in first-seen order, as a fresh scope.

        Used for play-local scopes (Weka, agentic) that are read completely before any of
        their ids are needed: the result equals interning ``raws`` one by one into a
        scope nobody used before, but runs vectorized.

        Args:
            raws: every raw id of the scope, concatenated in reading order.

        Returns:
            The interned ids, same shape as ``raws``.
        """
        if raws.size == 0:
            return np.empty(0, dtype=np.int64)
        uniq, first, inverse = np.unique(raws, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(uniq.size, dtype=np.int64)
        rank[order] = np.arange(uniq.size, dtype=np.int64)
        out = (rank[inverse] + self.next_id).astype(np.int64)
        self.next_id += int(uniq.size)
        return out

    def intern_local_streams(self, raws: Ids, scopes: Ids, count: int) -> tuple[Ids, Ids]:
        """Intern a stream of ids that each belong to one of ``count`` fresh local scopes.

        The result equals opening ``count`` local scopes and walking ``raws`` in order,
        interning each non-negative value into its scope (``scopes[i]``) and taking a
        private id for each negative one (each negative value must occur once). It runs
        vectorized: one stable sort of the ``(scope, raw)`` pairs, then ranks by first
        appearance, as :meth:`_intern_dense` does; scopes of thousands of ids each that lie
        one after the other are numbered one by one, most often without a sort
        (:meth:`_intern_scope_by_scope`).

        Args:
            raws: the stream, in interning order.
            scopes: each value's scope, in ``[0, count)``.
            count: how many scopes.

        Returns:
            The interned ids (same shape as ``raws``) and how many fresh ids each scope
            took.
        """
        size = int(raws.size)
        if size == 0:
            return np.empty(0, dtype=np.int64), np.zeros(count, dtype=np.int64)
        if size >= SCOPE_BY_SCOPE_FROM * count and bool((scopes[1:] >= scopes[:-1]).all()):
            return self._intern_scope_by_scope(raws, scopes, count)
        top = int(raws.max())
        if count * (top + 2) < 2**62:
            keys = scopes * (top + 1) + raws
        else:  # large raw ids: rank them first, so the pairs fit in one int64
            _, codes = np.unique(raws, return_inverse=True)
            keys = scopes * (int(codes.max()) + 1) + codes.reshape(-1)
        if int(raws.min()) < 0:  # each private id its own (negative) key
            keys = np.where(raws < 0, -1 - np.arange(size, dtype=np.int64), keys)
        out, first = _first_seen(keys, self.next_id)
        self.next_id += int(first.size)
        return out, np.bincount(scopes[first], minlength=count).astype(np.int64)

    def _intern_scope_by_scope(self, raws: Ids, scopes: Ids, count: int) -> tuple[Ids, Ids]:
        """:meth:`intern_local_streams` of scopes that lie one after the other in the
        stream: each scope's ids numbered on their own, in stream order.

        The ``(scope, raw)`` pairs of all scopes span far more values than there are ids,
        so numbering them at once sorts the stream; a large scope's own ids most often span
        about as many values as it holds, and are numbered from a table instead.
        """
        bounds = np.searchsorted(scopes, np.arange(count + 1, dtype=np.int64)).tolist()
        out = np.empty(raws.size, dtype=np.int64)
        fresh = np.zeros(count, dtype=np.int64)
        start = self.next_id
        for scope, (a, b) in enumerate(pairwise(bounds)):
            if a == b:
                continue
            keys = raws[a:b]
            private = keys < 0
            if private.any():  # each private id its own key, above the scope's raw ids
                shared = keys[~private]
                above = int(shared.max()) + 1 if shared.size else 0
                keys = np.where(private, np.arange(above, above + b - a, dtype=np.int64), keys)
            out[a:b], first = _first_seen(keys, start)
            fresh[scope] = first.size
            start += int(first.size)
        self.next_id = start
        return out, fresh

    def is_new_scope(self, scope: str) -> bool:
        """Whether nothing was interned into ``scope`` yet."""
        return not self._scopes.get(scope) and scope not in self._arrays and scope not in self._lazy

    def intern_coded(
        self, scope: str, keys: Ids, name: Callable[[dict[Hashable, int]], KeyIds]
    ) -> Ids:
        """Intern a stream of coded keys into a new scope at once, in first-seen order.

        Non-negative values are the scope's raw int ids; a negative value is a code for a
        key only the caller knows (equal codes, equal keys; a code whose key is a private
        id must occur once). The raw ids are kept as :meth:`intern_stream` keeps them;
        ``name(table)``, given the scope's dictionary of raw ids, returns the other keys
        with their ids, and is called only when that dictionary is needed.

        Args:
            scope: a scope nothing was interned into (see :meth:`is_new_scope`).
            keys: the stream.
            name: the keys of the codes that are not private ids, with their ids.

        Returns:
            The interned ids, same shape as ``keys``.
        """
        if not self.is_new_scope(scope):
            raise ValueError(f"intern_coded: scope {scope!r} is not new")
        out, first = _first_seen(keys, self.next_id)
        self.next_id += int(first.size)
        named = first[keys[first] >= 0]
        raw, ids = keys[named], out[named]
        order = np.argsort(raw, kind="stable")
        self._arrays[scope] = (raw[order], ids[order])
        self._lazy[scope] = name
        return out

    def local_scope(self) -> LocalScope:
        """Open a scope used by one play only; its table is dropped with it.

        Ids come from this interner's counter, so a play read in one go owns a
        contiguous range of ids (its instances remap that range, §5.4).
        """
        return LocalScope(self)

    def private(self) -> int:
        """Return a fresh id shared with nothing."""
        value = self.next_id
        self.next_id += 1
        return value

    def privates(self, count: int) -> Ids:
        """Return ``count`` fresh ids as an int64 array."""
        out = np.arange(self.next_id, self.next_id + count, dtype=np.int64)
        self.next_id += count
        return out


@attrs.define(eq=False)
class LocalScope:
    """A content scope private to one play; draws ids from its run's interner.

    State: the parent interner and this scope's tables ``raw id -> int`` (a dictionary,
    and while only small non-negative ints were interned, an array indexed by them; the
    array moves into the dictionary the first time anything else comes), and how many
    raw ids were offered (the array never grows past 16 entries per id offered).
    """

    parent: ContentInterner
    table: dict[Hashable, int] = attrs.field(factory=dict, repr=False)
    lookup: Ids | None = attrs.field(default=None, repr=False)
    offered: int = 0

    def intern_many(self, raws: Sequence[Hashable]) -> list[int]:
        """Intern every raw id of ``raws`` in order and return their ints."""
        if self.lookup is not None:
            self._drop_lookup()
        table = self.table
        out: list[int] = []
        nxt = self.parent.next_id
        for raw in raws:
            found = table.get(raw)
            if found is None:
                found = table[raw] = nxt
                nxt += 1
            out.append(found)
        self.parent.next_id = nxt
        return out

    def intern(self, raw: Hashable) -> int:
        """Intern one raw id."""
        return self.intern_many((raw,))[0]

    def intern_ints(self, raws: Ids) -> Ids:
        """Intern an array of non-negative int ids, vectorized; same result as
        :meth:`intern_many` on ``raws.tolist()``.

        Ids below a bound go through a lookup table, larger ones through the dictionary.
        """
        if raws.size == 0:
            return np.empty(0, dtype=np.int64)
        top = int(raws.max())
        self.offered += int(raws.size)
        # The table is indexed by raw id: it may not outgrow the ids offered so far (a
        # single id of 16,000,000 would otherwise cost 128 MB).
        dense = top < 1024 + 16 * self.offered
        if self.lookup is None and not self.table and dense:
            self.lookup = np.full(max(1024, top + 1), -1, dtype=np.int64)
        if self.lookup is None or int(raws.min()) < 0 or top >= _TABLE_LIMIT or not dense:
            return np.asarray(self.intern_many(raws.tolist()), dtype=np.int64)
        if self.lookup.size <= top:
            grown = np.full(max(top + 1, 2 * self.lookup.size), -1, dtype=np.int64)
            grown[: self.lookup.size] = self.lookup
            self.lookup = grown
        found = self.lookup[raws]
        missing = found < 0
        if missing.any():
            fresh = raws[missing]
            unique, first = np.unique(fresh, return_index=True)
            rank = np.empty(unique.size, dtype=np.int64)
            rank[np.argsort(first, kind="stable")] = np.arange(unique.size, dtype=np.int64)
            start = self.parent.next_id
            self.lookup[unique] = rank + start
            self.parent.next_id = start + int(unique.size)
            found = self.lookup[raws]
        return found

    def _drop_lookup(self) -> None:
        """Move the lookup table's entries into the dictionary (first ids outside it)."""
        lookup = self.lookup
        self.lookup = None
        if lookup is not None:
            known = np.flatnonzero(lookup >= 0)
            self.table.update(zip(known.tolist(), lookup[known].tolist(), strict=True))

    def private(self) -> int:
        """Return a fresh id shared with nothing."""
        return self.parent.private()


@attrs.frozen
class Run:
    """A piece of a merged prompt (§1.4.4): trace blocks, or a whole earlier output.

    Attributes:
        key: the raw identity of the piece: a trace block's interned id, or
            ``("out", request_id)`` for an output.
        tokens: its length in tokens.
        block_id: the interned id of a whole trace block (``tokens == T``), else None; a
            window that covers exactly such a block keeps this id.
    """

    key: Hashable
    tokens: int
    block_id: int | None = None


def reblock(
    runs: Sequence[Run],
    block_size: int,
    interner: ContentInterner,
    scope: str,
    *,
    known: Ids | None = None,
) -> Ids:
    """Cut a merged prompt into windows of ``block_size`` tokens and name each (§1.4.4).

    A window that is exactly one whole trace block keeps that block's id
    (``run.block_id``); any other window gets the interned tuple of the
    ``(run key, start offset, end offset)`` pieces it overlaps, so identical prefixes
    keep identical ids.

    Args:
        runs: the prompt as runs, in order.
        block_size: tokens per window ``T``.
        interner: the run's interner.
        scope: the content scope of the raw tuples.
        known: the ids of the first whole windows, as an earlier ``reblock`` of runs these
            runs begin with named them; they are kept and the cutting starts after them
            (same result, since those windows cover the same pieces and were interned).
            A session's turn so costs its new tokens, not its whole context.

    Returns:
        ``ceil(total / T)`` ids.
    """
    out: list[int] = []
    pieces: list[tuple[int, int, int]] = []
    filled = 0
    skip = 0 if known is None else int(known.size) * block_size
    for index, run in enumerate(runs):
        if skip >= run.tokens:
            skip -= run.tokens
            continue
        offset, skip = skip, 0
        while offset < run.tokens:
            take = min(run.tokens - offset, block_size - filled)
            pieces.append((index, offset, offset + take))
            offset += take
            filled += take
            if filled == block_size:
                out.append(_window_id(pieces, runs, block_size, interner, scope))
                pieces = []
                filled = 0
    if pieces:
        out.append(_window_id(pieces, runs, block_size, interner, scope))
    made = np.asarray(out, dtype=np.int64)
    return made if known is None else np.concatenate((known.astype(np.int64), made))


def _window_id(
    pieces: list[tuple[int, int, int]],
    runs: Sequence[Run],
    block_size: int,
    interner: ContentInterner,
    scope: str,
) -> int:
    if len(pieces) == 1:
        index, start, end = pieces[0]
        run = runs[index]
        if run.block_id is not None and start == 0 and end == run.tokens == block_size:
            return run.block_id
    return interner.intern(scope, ("win", *((runs[i].key, a, b) for i, a, b in pieces)))
