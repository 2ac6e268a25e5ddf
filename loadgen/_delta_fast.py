"""The content of ``mooncake-delta`` sessions, computed for all rows at once (§2.2, §1.4.4).

A later turn's prompt is the previous prompt, its output and the new blocks; it is cut
into windows of ``T`` tokens and each window not exactly one whole trace block is named
by the interned tuple of the pieces it overlaps (:func:`loadgen._intern.reblock`). Read
record by record that is a Python loop per piece (1.6 µs a content id on the shared
trace given sessions). Here every session is laid out as one line of runs (trace blocks
and outputs), every window of every turn is cut from it with a few array operations,
equal windows are found by a hash that is then checked exactly, and all keys (raw ids,
private tails, windows) are interned in one call, in the order the record reader meets
them. The tuples themselves are only built if the scope's dictionary is ever needed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

import attrs
import numpy as np
import numpy.typing as npt

from ._intern import ContentInterner
from ._limits import MAX_IDS, MAX_TOKENS

__all__ = ("delta_content",)

Ids = npt.NDArray[np.int64]
Flags = npt.NDArray[np.bool_]


def _ranges(starts: Ids, sizes: Ids) -> Ids:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, sizes)])``, vectorized."""
    total = int(sizes.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(sizes) - sizes
    out = np.ones(total, dtype=np.int64)
    nonzero = sizes > 0
    heads = offsets[nonzero]
    out[heads] = starts[nonzero]
    out[heads[1:]] -= (starts[nonzero] + sizes[nonzero] - 1)[:-1]
    return np.cumsum(out)


def _mix(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit finaliser (murmur3's): equal inputs, equal outputs; others spread."""
    x = values ^ (values >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return np.asarray(x ^ (x >> np.uint64(33)), dtype=np.uint64)


def delta_content(
    ids: ContentInterner,
    scope: str,
    request_ids: list[str],
    sessions: list[str | None],
    raw: Ids,
    counts: Ids,
    keep: Ids,
    tail: Flags,
    prompts: Ids,
    outputs: Ids,
    block: int,
) -> tuple[Ids, Ids, Ids] | None:
    """Every row's content ids and merged prompt length, as ``mooncake-delta`` reads them.

    Args:
        ids: the run's interner; ``scope`` must be new to it (else None is returned).
        scope: the content scope.
        request_ids: each row's request id.
        sessions: each row's session key, or None.
        raw: every row's raw ids, concatenated; row ``i`` has ``counts[i]``.
        counts: raw ids per row.
        keep: how many of them the row keeps (the rest are surplus).
        tail: whether the row's last block is partial and gets a private id.
        prompts: each row's own input length ``D``.
        outputs: each row's output length ``N``.
        block: the block size ``T``.

    Returns:
        ``(content, ends, merged prompts)``: all rows' content concatenated (read-only),
        where each row's part ends, and each row's prompt length; or None when the scope
        is not new or a merged prompt is past the limits (the record reader names it).
    """
    if not ids.is_new_scope(scope):
        return None
    rows = len(sessions)
    T = block
    # --- sessions: turn order and the line of runs of each session -------------------
    codes: dict[str | None, int] = {}
    session = np.fromiter(
        (-1 - i if s is None else codes.setdefault(s, len(codes)) for i, s in enumerate(sessions)),
        dtype=np.int64,
        count=rows,
    )
    order = np.argsort(session, kind="stable")  # rows by session, turns in file order
    s_sorted = session[order]
    first = np.ones(rows, dtype=np.bool_)
    first[1:] = s_sorted[1:] != s_sorted[:-1]
    later = np.zeros(rows, dtype=np.bool_)
    later[order[~first]] = True  # rows that are not a session's first turn
    length = prompts + outputs  # each row adds its blocks and then its output
    in_order = length[order]
    run_total = np.cumsum(in_order)
    group_start = np.maximum.accumulate(np.where(first, np.arange(rows), 0))
    before = run_total - in_order  # global offset of each row's blocks
    line_start = np.empty(rows, dtype=np.int64)
    line_start[order] = before
    session_base = np.empty(rows, dtype=np.int64)
    session_base[order] = before[group_start]
    local = line_start - session_base  # where the row's blocks start in its session
    merged = local + prompts  # P_k = P_(k-1) + N_(k-1) + D_k
    if int(merged.max()) > MAX_TOKENS or int((-(-merged // T)).max()) > MAX_IDS:
        return None
    previous = np.full(rows, -1, dtype=np.int64)
    previous[order[1:]] = np.where(first[1:], -1, order[:-1])
    # --- runs: each row's blocks, then its output if any --------------------------------
    blocks = keep + tail
    has_out = outputs > 0
    per_row = blocks + has_out
    run_row = np.repeat(np.arange(rows, dtype=np.int64)[order], per_row[order])
    index_in_row = _ranges(np.zeros(rows, dtype=np.int64), per_row[order])
    is_out = index_in_row == blocks[run_row]
    run_start = line_start[run_row] + np.where(is_out, prompts[run_row], index_in_row * T)
    run_tokens = np.where(
        is_out, outputs[run_row], np.minimum(T, prompts[run_row] - index_in_row * T)
    )
    raw_start = np.cumsum(counts) - counts
    is_tail = ~is_out & (index_in_row == keep[run_row])
    raw_at = np.minimum(raw_start[run_row] + index_in_row, max(raw.size - 1, 0))
    run_code = np.where(
        is_out,
        -2 - 2 * run_row,
        np.where(is_tail, -1 - 2 * run_row, raw[raw_at] if raw.size else 0),
    )
    whole = ~is_out & (run_tokens == T)
    # --- windows of every later turn -------------------------------------------------------
    later_rows = np.flatnonzero(later)
    known = merged[previous[later_rows]] // T  # whole windows kept from the turn before
    windows_per = -(-merged[later_rows] // T) - known
    window_row = np.repeat(later_rows, windows_per)
    position = _ranges(known, windows_per)
    w_start = session_base[window_row] + position * T
    w_end = session_base[window_row] + np.minimum((position + 1) * T, merged[window_row])
    r0 = np.searchsorted(run_start, w_start, side="right") - 1
    r1 = np.searchsorted(run_start, w_end - 1, side="right") - 1
    pieces = r1 - r0 + 1
    piece_run = _ranges(r0, pieces)
    piece_window = np.repeat(np.arange(window_row.size, dtype=np.int64), pieces)
    piece_a = np.maximum(w_start[piece_window], run_start[piece_run]) - run_start[piece_run]
    piece_b = np.minimum(w_end[piece_window], run_start[piece_run] + run_tokens[piece_run])
    piece_b = piece_b - run_start[piece_run]
    aligned = (pieces == 1) & whole[r0] & (w_end - w_start == T) & (w_start == run_start[r0])
    # --- equal windows: a hash, checked exactly ----------------------------------------------
    piece_code = run_code[piece_run]
    first_piece = np.cumsum(pieces) - pieces
    within = np.arange(piece_run.size, dtype=np.int64) - first_piece[piece_window]
    window_class = _classes(piece_code, piece_a, piece_b, pieces, first_piece, within)
    if window_class is None:
        return None
    window_key = np.where(aligned, run_code[r0], -2 - 2 * window_class)
    # --- one stream in the record reader's order: each row's kept ids, its private tail,
    # then its windows ---------------------------------------------------------------------
    own = blocks + np.bincount(window_row, minlength=rows)  # keys per row
    key_start = np.cumsum(own) - own
    stream = np.empty(int(own.sum()), dtype=np.int64)
    row_of_raw = np.repeat(np.arange(rows, dtype=np.int64), counts)
    position_in_row = np.arange(raw.size, dtype=np.int64) - raw_start[row_of_raw]
    kept = position_in_row < keep[row_of_raw]
    stream[(key_start[row_of_raw] + position_in_row)[kept]] = raw[kept]
    tails = np.flatnonzero(tail)
    tail_at = key_start[tails] + keep[tails]
    stream[tail_at] = -1 - 2 * tails
    window_at = (
        key_start[window_row] + blocks[window_row] + position - np.repeat(known, windows_per)
    )
    stream[window_at] = window_key
    # The keys of the windows' codes, for the scope's dictionary if it is ever needed:
    # one window of each class (its pieces), its id, and the ids of private tails.
    named = np.flatnonzero(~aligned)
    chosen = named[np.unique(window_class[named], return_index=True)[1]]
    chosen_pieces = _ranges(first_piece[chosen], pieces[chosen])
    lazy = _Windows(
        sizes=pieces[chosen],
        codes=piece_code[chosen_pieces],
        starts=piece_a[chosen_pieces],
        ends=piece_b[chosen_pieces],
        request_ids=request_ids,
        private_codes=-1 - 2 * tails,
    )
    interned = ids.intern_coded(scope, stream, lazy.keys)
    lazy.ids = interned[window_at[chosen]]
    lazy.private_ids = interned[tail_at]
    # --- each row's content: the whole windows its session has so far, then its own
    # partial window -------------------------------------------------------------------------
    own_start = key_start + np.where(later, blocks, 0)
    own_size = own - np.where(later, blocks, 0)
    whole_windows = merged // T
    partial = merged % T != 0
    gained = whole_windows - np.where(later, whole_windows[np.maximum(previous, 0)], 0)
    line = interned[_ranges(own_start[order], gained[order])]
    line_pos = np.cumsum(gained[order]) - gained[order]
    line_base = np.empty(rows, dtype=np.int64)
    line_base[order] = line_pos[group_start]
    sizes = whole_windows + partial
    pick = _ranges(line_base, sizes)
    ends = np.cumsum(sizes)
    last = ends[partial] - 1
    pick[last] = line.size + (own_start + own_size - 1)[partial]
    content = np.concatenate((line, interned))[pick]
    content.flags.writeable = False
    return content, ends, merged


def _classes(
    code: Ids, start: Ids, end: Ids, pieces: Ids, first_piece: Ids, within: Ids
) -> Ids | None:
    """A class per window, equal for windows with equal pieces; None if two windows of
    one hash differ (then the caller reads record by record)."""
    windows = int(pieces.size)
    if windows == 0:
        return np.empty(0, dtype=np.int64)
    with np.errstate(over="ignore"):
        spread = (start + (end << 20) + (within << 42)).astype(np.uint64)
        mixed = _mix(code.astype(np.uint64) ^ _mix(spread))
        sums = np.asarray(np.add.reduceat(mixed, first_piece), dtype=np.uint64)
        digest = _mix(sums ^ pieces.astype(np.uint64))
    by_digest = np.argsort(digest)  # any member of a group may stand for it
    ordered = digest[by_digest]
    starts = np.ones(windows, dtype=np.bool_)
    starts[1:] = ordered[1:] != ordered[:-1]
    group = np.cumsum(starts) - 1
    representative = np.empty(windows, dtype=np.int64)
    representative[by_digest] = by_digest[starts][group]
    if not (pieces == pieces[representative]).all():
        return None
    piece_window = np.repeat(np.arange(windows, dtype=np.int64), pieces)
    same = first_piece[representative[piece_window]] + within
    if not ((code == code[same]).all() and (start == start[same]).all()):
        return None
    if not (end == end[same]).all():
        return None
    out = np.empty(windows, dtype=np.int64)
    out[by_digest] = group
    return out


@attrs.define(eq=False)
class _Windows:
    """The keys behind the window codes of one read, built when the scope's dictionary is
    first needed: ``("win", (key, start, end), ...)`` as :func:`reblock` names them.

    State: one window of each class, as its piece count and its pieces (code, start and
    end offsets) concatenated, with its id; the request ids (for outputs) and the ids of
    the private tails.
    """

    sizes: Ids
    codes: Ids
    starts: Ids
    ends: Ids
    request_ids: list[str]
    private_codes: Ids
    ids: Ids = attrs.field(factory=lambda: np.empty(0, dtype=np.int64))
    private_ids: Ids = attrs.field(factory=lambda: np.empty(0, dtype=np.int64))

    def keys(self, table: dict[Hashable, int]) -> Iterator[tuple[Hashable, int]]:
        """Each window's key and id; ``table`` holds the scope's raw ids."""
        codes, starts, ends = self.codes.tolist(), self.starts.tolist(), self.ends.tolist()
        privates = dict(zip(self.private_codes.tolist(), self.private_ids.tolist(), strict=True))
        first = 0
        for count, made in zip(self.sizes.tolist(), self.ids.tolist(), strict=True):
            parts: list[Hashable] = ["win"]
            for piece in range(first, first + count):
                code = codes[piece]
                if code >= 0:
                    key: Hashable = table[code]
                elif code % 2:
                    key = privates[code]
                else:
                    key = ("out", self.request_ids[(-2 - code) // 2])
                parts.append((key, starts[piece], ends[piece]))
            first += count
            yield tuple(parts), made
