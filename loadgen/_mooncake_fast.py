"""The vectorized reading of a well-formed Mooncake trace (``bench/read.py`` measures it).

Reading record by record with a validating accessor per field costs about 40 µs a row;
here every line is parsed once, each field becomes a column, the columns are validated
as a whole (types by set, ranges with numpy), the length rule of §1.4.2 is applied to all
rows at once and all content ids are interned in one vectorized call. Anything this path
does not take for certain valid (any failed check, an alias spelling, a session in
``mooncake-delta``) makes it return None: the caller then reads the file record by
record, which names the first bad record exactly. Both paths give the same workload; a
differential test compares them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ._columns import gather, linked_requests, roots
from ._delta_fast import delta_content
from ._fields import collector_paused
from ._intern import ContentInterner
from ._limits import MAX_INSTANT_MS
from ._request import ArrivalRule, Identity, requests_from_columns
from ._rows import Numbers, cells, id_column, number_column, row_columns
from ._workload import Tolerated, Workload

__all__ = ("read_mooncake_fast",)

Ids = npt.NDArray[np.int64]

_NO_IDENTITY = Identity()
#: The key of an absent timestamp among the bits of present ones (which are finite).
_ABSENT = int(np.array(np.nan).view(np.int64))


def read_mooncake_fast(
    file: str,
    data: bytes,
    src: str,
    block: int,
    closed_loop: bool,
    ids: ContentInterner,
    *,
    delta: bool,
) -> Workload | None:
    """Read a Mooncake trace held in ``data`` if it is certainly valid, else return None.

    Args:
        file: the file name.
        data: the file's bytes.
        src: the source label.
        block: the block size ``T``.
        closed_loop: timestamps of roots are optional.
        ids: the run's interner; untouched when None is returned.
        delta: read as ``mooncake-delta`` (only files without sessions are taken).

    Returns:
        The workload, equal to what the record-by-record reader returns, or None.
    """
    with collector_paused():
        return _read(file, data, src, block, closed_loop, ids, delta=delta)


def _read(
    file: str,
    data: bytes,
    src: str,
    block: int,
    closed_loop: bool,
    ids: ContentInterner,
    *,
    delta: bool,
) -> Workload | None:
    rows = row_columns(data)
    if rows is None:
        return None
    values, lines, present, prompts, outputs, stamps, counts, raw = rows
    del rows
    count = len(values)
    delays = (
        number_column(cells(values, "delay"), MAX_INSTANT_MS)
        if "delay" in present
        else _absent(count)
    )
    sessions: list[str | None] | None = (
        id_column(cells(values, "session_id")) if "session_id" in present else [None] * count
    )
    del values  # what is left is columns
    if delays is None or sessions is None:
        return None
    merging = delta and sessions.count(None) != count
    need = -(-prompts // block)
    if not ((counts >= need) | (counts == prompts // block)).all():
        return None
    request_ids = [f"{src}:{line}" for line in lines]
    arrivals = (
        _standalone(stamps, delays, closed_loop)
        if sessions.count(None) == count
        else _links(request_ids, stamps, delays, sessions, src, closed_loop)
    )
    if arrivals is None:
        return None
    keep = np.minimum(counts, need)
    tail = counts < need
    scope = f"global:{src}"
    lengths = prompts
    if merging:
        merged = delta_content(
            ids, scope, request_ids, sessions, raw, counts, keep, tail, prompts, outputs, block
        )
        if merged is None:
            return None
        content, row_ends, lengths = merged
        ends = row_ends.tolist()
    else:
        content = _content(ids, scope, raw, counts, keep, tail)
        ends = np.cumsum(keep + tail).tolist()
    starts = [0, *ends[:-1]]
    slices = [content[start:end] for start, end in zip(starts, ends, strict=True)]
    if isinstance(arrivals, _Links):
        requests = linked_requests(
            request_ids,
            lengths.tolist(),
            outputs.tolist(),
            block,
            slices,
            arrivals.rules,
            arrivals.waited,
            arrivals.delays,
            arrivals.conversations,
            arrivals.turns,
        )
        ignored = arrivals.ignored
    else:
        rules, identities = arrivals
        requests = requests_from_columns(
            request_ids, lengths.tolist(), outputs.tolist(), block, slices, rules, identities
        )
        ignored = 0
    return Workload(
        requests=requests,
        source=src,
        format="mooncake-delta" if delta else "mooncake",
        tolerated=Tolerated(
            surplus_ids=int(np.maximum(counts - need, 0).sum()),
            private_tail_ids=int(tail.sum()),
            ignored_timestamps=ignored,
        ),
    )


def _absent(count: int) -> Numbers:
    """A column of ``count`` absent numbers."""
    return Numbers(np.zeros(count, dtype=np.float64), np.zeros(count, dtype=np.bool_))


class _Links(NamedTuple):
    """Each row's arrival and identity as :func:`~loadgen._columns.linked_requests`
    takes them (file order)."""

    rules: list[ArrivalRule | None]
    """A root's rule; None for a row that waits for ``waited``."""
    waited: list[str | None]
    delays: list[float]
    conversations: list[str | None]
    turns: list[int]
    ignored: int
    """Timestamps of rows that wait (not used)."""


def _links(
    request_ids: list[str],
    stamps: Numbers,
    delays: Numbers,
    sessions: list[str | None],
    src: str,
    closed_loop: bool,
) -> _Links | None:
    """Each row's arrival and identity (the session rules of §2.1), or None.

    A session's first row is a root at its timestamp; each later row waits for the
    completion of the row before it plus its ``delay``, else the gap from the session's
    latest timestamp used, else nothing. Worked out per column: rows sorted by session
    (stably, so each session's rows keep file order), the results put back in file order.
    """
    count = len(sessions)
    codes = dict.fromkeys(sessions)
    number = dict(zip(codes, range(len(codes)), strict=True))
    code = np.fromiter(map(number.__getitem__, sessions), dtype=np.int64, count=count)
    order = np.argsort(code, kind="stable")
    in_order = code[order]
    first = np.ones(count, dtype=np.bool_)  # in session order: a session's first row
    first[1:] = in_order[1:] != in_order[:-1]
    starts = np.flatnonzero(first)
    turn = np.arange(count, dtype=np.int64) - np.repeat(starts, np.diff(starts, append=count))
    named = in_order != number.get(None, -1)  # rows without a session are roots alone
    root = first | ~named
    root_rows = order[root]
    if bool(delays.values[root_rows].any()):
        return None  # a first turn waits for nothing
    if not closed_loop and not bool(stamps.given[root_rows].all()):
        return None
    # A later row's gap runs from the latest timestamp its session used: the first row's,
    # or a later row's given without a delay.
    later = ~root
    has_stamp, has_delay = stamps.given[order], delays.given[order]
    gap = ~has_delay & has_stamp & later
    used = np.where(root | gap, np.arange(count, dtype=np.int64), 0)
    latest = np.maximum.accumulate(used)  # in session order, never before its session
    gap_at = np.flatnonzero(gap)
    since = order[latest[gap_at - 1]]
    if not bool(stamps.given[since].all()):
        return None  # a gap from a first row without a timestamp
    think = delays.values[order]
    think[gap_at] = stamps.values[order[gap_at]] - stamps.values[since]
    if not bool(((think[gap_at] >= 0) & (think[gap_at] <= MAX_INSTANT_MS)).all()):
        return None
    ignored = int((has_delay & has_stamp & later).sum())
    given = stamps.values[root_rows][stamps.given[root_rows]]
    origin = float(given.min()) if given.size else None
    if origin is not None and float(given.max()) - origin > MAX_INSTANT_MS:
        return None
    # In file order: a root's rule (None for the others), the row waited for (the row
    # before in the session; ``count`` stands for none), the delay, the turn.
    made, which = _shared_roots(stamps.values[root_rows], stamps.given[root_rows], origin)
    rule_at = np.full(count, len(made), dtype=np.int64)
    rule_at[root_rows] = which
    waits = np.flatnonzero(later)
    waiting = order[waits]
    waited_row = np.full(count, count, dtype=np.int64)
    waited_row[waiting] = order[waits - 1]
    wait = np.zeros(count, dtype=np.float64)
    wait[waiting] = think[waits]
    turns = np.empty(count, dtype=np.int64)
    turns[order] = turn
    # Each session's conversation id, by session code (None for rows without a session).
    conversations = [None if key is None else f"{src}/{key}" for key in codes]
    return _Links(
        gather([*made, None], rule_at),
        gather([*request_ids, None], waited_row),
        wait.tolist(),
        gather(conversations, code),
        turns.tolist(),
        ignored,
    )


def _standalone(
    stamps: Numbers, delays: Numbers, closed_loop: bool
) -> tuple[list[ArrivalRule], list[Identity]] | None:
    """Each row's rule and identity when no row has a session: every row is a root."""
    if bool(delays.values.any()) or not (closed_loop or bool(stamps.given.all())):
        return None
    given = stamps.values[stamps.given]
    origin = float(given.min()) if given.size else None
    if origin is not None and float(given.max()) - origin > MAX_INSTANT_MS:
        return None
    rules = _root_rules(stamps.values, stamps.given, origin)
    return rules, [_NO_IDENTITY] * len(rules)


def _root_rules(
    values: npt.NDArray[np.float64], given: npt.NDArray[np.bool_], origin: float | None
) -> list[ArrivalRule]:
    """Each root's rule: at its timestamp, less ``origin`` unless that is 0 (None where
    it has none). Roots with the same timestamp share one (frozen) rule (12,031 rows,
    1,180 instants in the shared trace); same means the same bits, so -0.0 stays apart
    from 0.0 as it does when each row is read alone.
    """
    made, which = _shared_roots(values, given, origin)
    return gather(made, which)


def _shared_roots(
    values: npt.NDArray[np.float64], given: npt.NDArray[np.bool_], origin: float | None
) -> tuple[list[ArrivalRule], Ids]:
    """The distinct root rules of :func:`_root_rules` and each root's among them."""
    keys = np.where(given, values.view(np.int64), _ABSENT)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    stamps = [
        value if present else None
        for value, present in zip(values[first].tolist(), given[first].tolist(), strict=True)
    ]
    made = roots([v - origin if origin and v is not None else v for v in stamps])
    return made, inverse.reshape(-1)


def _content(
    ids: ContentInterner,
    scope: str,
    raw: Ids,
    counts: Ids,
    keep: Ids,
    tail: npt.NDArray[np.bool_],
) -> Ids:
    """All rows' interned content ids, concatenated, read-only.

    Row ``i`` contributes its first ``keep[i]`` raw ids, then one private id if
    ``tail[i]``; the order of first appearance is the order of the rows.
    """
    if not tail.any() and bool((keep == counts).all()):
        out = ids.intern_stream(scope, raw)  # nothing to cut or add: the ids as read
        out.flags.writeable = False
        return out
    rows = counts.size
    row_of = np.repeat(np.arange(rows, dtype=np.int64), counts)
    starts_in = np.cumsum(counts) - counts
    sizes = keep + tail
    starts_out = np.cumsum(sizes) - sizes
    position = np.arange(raw.size, dtype=np.int64) - starts_in[row_of]
    kept = position < keep[row_of]
    stream = np.empty(int(sizes.sum()), dtype=np.int64)
    stream[(starts_out[row_of] + position)[kept]] = raw[kept]
    tails = np.flatnonzero(tail)
    stream[starts_out[tails] + keep[tails]] = -1 - tails  # one distinct private per row
    out = ids.intern_stream(scope, stream)
    out.flags.writeable = False
    return out
