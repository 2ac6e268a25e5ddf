"""Chained block keys from trace content ids (REFERENCE-engine §4.2).

The content of prompt position ``p`` is ``hash_ids[p // T]`` (``T`` = the trace's block
size). Engine block ``k`` covers positions ``[kE, (k+1)E)``; its content is the run-length
tuple of the ids of its positions, written as the bare id when the block holds one id only
(always the case when ``E`` divides ``T``). Output position ``P + i`` has content unique to
``(request id, i)``. Block keys chain: ``key_k = H(key_{k-1}, content_k)`` with ``H`` the
interning of ``(parent, content)`` pairs to consecutive integers, so a key names a whole
prefix and is collision-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import and_, lshift, or_

import attrs
import numpy as np
import numpy.typing as npt

from loadgen import Request

__all__ = ("ROOT_KEY", "BlockKeyer", "Content", "block_content", "prompt_contents")

#: The parent of block 0's key.
ROOT_KEY = 0

_MASK64 = (1 << 64) - 1

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
    order of the calls, never on ``hash()``.
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

    def __len__(self) -> int:
        """The number of distinct keys interned so far."""
        return len(self._keys)

    def key(self, parent: int, content: Content) -> int:
        """Return the key of a block with ``content`` after the prefix keyed ``parent``.

        Args:
            parent: the key of the previous block (``ROOT_KEY`` = 0 for block 0).
            content: a bare content id (an int64) or a run-length tuple.
        """
        pair = (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
        key = self._keys.get(pair)
        if key is None:
            key = len(self._keys) + 1
            self._keys[pair] = key
        return key

    def peek(self, parent: int, content: Content) -> int | None:
        """Return the key of ``(parent, content)`` if it was ever interned, else ``None``."""
        pair = (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
        return self._keys.get(pair)

    def extend(self, keys: list[int], contents: Sequence[Content], stop: int) -> None:
        """Intern the chained keys of blocks ``len(keys) .. stop - 1`` and append them.

        Args:
            keys: the keys of blocks ``0 .. len(keys) - 1``, extended in place.
            contents: block contents, indexed by block (at least ``stop`` of them).
            stop: the number of keys ``keys`` holds afterwards.
        """
        table = self._keys
        parent = keys[-1] if keys else ROOT_KEY
        append = keys.append
        j = len(keys)
        while j < stop:
            content = contents[j]
            pair = (
                (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
            )
            key = table.get(pair)
            if key is None:
                break
            append(key)
            parent = key
            j += 1
        if j >= stop:
            return
        # From the first key never interned on, every key is new: a new key has never been
        # anyone's parent. So they are the next ``stop - j`` numbers, interned in one step.
        first = len(table) + 1
        fresh = range(first, first + stop - j)
        part = contents[j:stop]
        parents = [parent, *fresh[:-1]]
        if all(type(c) is int for c in part):
            pairs: list[int | tuple[int, Content]] = list(
                map(or_, map(lshift, parents, repeat(64)), map(and_, part, repeat(_MASK64)))
            )
        else:
            pairs = [
                (p << 64) | (c & _MASK64) if type(c) is int else (p, c)
                for p, c in zip(parents, part, strict=True)
            ]
        table.update(zip(pairs, fresh, strict=True))
        keys.extend(fresh)

    def known(self, keys: list[int], contents: Sequence[Content], stop: int) -> None:
        """Append the keys of blocks ``len(keys) ..`` while they were interned before.

        Like :meth:`extend` with :meth:`peek`: stops before block ``stop`` or at the first
        block whose key was never interned; interns nothing.
        """
        table = self._keys
        parent = keys[-1] if keys else ROOT_KEY
        append = keys.append
        for j in range(len(keys), stop):
            content = contents[j]
            pair = (
                (parent << 64) | (content & _MASK64) if type(content) is int else (parent, content)
            )
            key = table.get(pair)
            if key is None:
                return
            append(key)
            parent = key

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
        donor = (request.block_size, request.hash_ids, list(keys[:full]))
        for tag in self._donor_tags(request):
            self._donors[(block_size, tag)] = donor

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
        contents = prompt_contents(
            request.hash_ids.tolist(), request.block_size, request.input_length, block_size
        )
        keys = self.shared_prefix(request, block_size)
        self.extend(keys, contents, len(contents))
        self.remember(request, block_size, keys)
        result = tuple(keys)
        self._memo[(request.id, block_size)] = (request, result)
        return result
