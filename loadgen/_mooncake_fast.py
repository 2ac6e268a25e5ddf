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

import json
from collections.abc import Callable
from itertools import chain
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from ._columns import after_completion, identities, roots
from ._delta_fast import delta_content
from ._fields import collector_paused
from ._intern import ContentInterner
from ._limits import MAX_INSTANT_MS, MAX_TOKENS
from ._request import ArrivalRule, Identity, requests_from_columns
from ._workload import Tolerated, Workload

__all__ = (
    "id_column",
    "id_lists",
    "int_column",
    "number_column",
    "parse_objects",
    "read_mooncake_fast",
)

Ids = npt.NDArray[np.int64]

_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_FIELDS = frozenset(("timestamp", "input_length", "output_length", "hash_ids"))
#: Field aliases only the record reader resolves: a file using one is read record by record.
ALIASES = frozenset(("created_time", "input_tokens", "output_tokens", "delay_ms"))
_NONE = type(None)
_NO_IDENTITY = Identity()
_ROOT = ArrivalRule()


def parse_objects(data: bytes) -> tuple[list[dict[str, object]], list[int]] | None:
    """Every non-blank line's JSON object and line number, or None if any is not one."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    values: list[dict[str, object]] = []
    numbers: list[int] = []
    scan = _SCAN
    try:
        for number, raw in enumerate(text.split("\n"), start=1):
            # Only JSON whitespace is stripped: a line the record reader would see
            # differently fails the scan and sends the file to that reader.
            body = raw.strip(" \t\r")
            if not body:
                continue
            value, end = scan(body, 0)
            if end != len(body) or type(value) is not dict:
                return None
            values.append(value)
            numbers.append(number)
    except (StopIteration, ValueError, RecursionError):
        return None
    return values, numbers


class RowColumns(NamedTuple):
    """Every row of a Mooncake-style file as parsed, and the columns all such readers take."""

    values: list[dict[str, object]]
    lines: list[int]
    present: set[str]
    prompts: npt.NDArray[np.int64]
    outputs: npt.NDArray[np.int64]
    stamps: list[float | None]


def row_columns(data: bytes) -> RowColumns | None:
    """Parse every line and take the lengths and timestamps, or None when the record reader
    must read the file (a line that is not an object, a field alias, a cell out of range)."""
    parsed = parse_objects(data)
    if parsed is None or not parsed[0]:
        return None
    values, lines = parsed
    present: set[str] = set().union(*values)
    if present & ALIASES:
        return None
    prompts = int_column([v.get("input_length") for v in values], 1, MAX_TOKENS)
    outputs = int_column([v.get("output_length") for v in values], 0, MAX_TOKENS)
    stamps = number_column([v.get("timestamp") for v in values], float("inf"))
    if prompts is None or outputs is None or stamps is None:
        return None
    return RowColumns(values, lines, present, prompts, outputs, stamps)


def int_column(column: list[object], low: int, high: int) -> npt.NDArray[np.int64] | None:
    """The column as int64 if every cell is a JSON integer in ``[low, high]``."""
    if set(map(type, column)) != {int}:
        return None
    try:
        arr = np.array(column, dtype=np.int64)
    except OverflowError:
        return None
    if arr.size and (int(arr.min()) < low or int(arr.max()) > high):
        return None
    return arr


def id_lists(lists: list[list[object]]) -> Ids | None:
    """All lists' items as one int64 array if each is a JSON integer >= 0, else None."""
    flat = list(chain.from_iterable(lists))
    return int_column(flat, 0, 2**63 - 1) if flat else np.empty(0, dtype=np.int64)


def number_column(column: list[object], high: float) -> list[float | None] | None:
    """The column as floats (None kept) if every cell is a finite number in ``[0, high]``."""
    kinds = set(map(type, column))
    if not kinds <= {int, float, _NONE}:
        return None
    present = column if _NONE not in kinds else [v for v in column if v is not None]
    try:
        arr = np.array(present, dtype=np.float64)
    except OverflowError:
        return None
    if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0 and arr.max() <= high):
        return None
    if _NONE not in kinds:
        out: list[float | None] = arr.tolist()
        return out
    floats = iter(arr.tolist())
    return [None if v is None else next(floats) for v in column]


def id_column(column: list[object]) -> list[str | None] | None:
    """The column as strings (None kept) if every cell is a non-empty string or an integer."""
    kinds = set(map(type, column))
    if not kinds <= {str, int, _NONE} or "" in column:
        return None
    if int not in kinds:
        return column  # type: ignore[return-value]  # str or None, checked above
    return [v if v is None or type(v) is str else str(v) for v in column]


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
    values, lines, present, prompts, outputs, stamps = rows
    del rows
    count = len(values)
    delays: list[float | None] | None = (
        number_column([v.get("delay") for v in values], MAX_INSTANT_MS)
        if "delay" in present
        else [None] * count
    )
    sessions: list[str | None] | None = (
        id_column([v.get("session_id") for v in values])
        if "session_id" in present
        else [None] * count
    )
    if delays is None or sessions is None:
        return None
    merging = delta and any(s is not None for s in sessions)
    hash_lists = [v.get("hash_ids") for v in values]
    if set(map(type, hash_lists)) != {list}:
        return None
    lists = cast(list[list[object]], hash_lists)
    counts = np.fromiter(map(len, lists), dtype=np.int64, count=count)
    raw = id_lists(lists)
    del values, hash_lists, lists  # what is left is columns
    if raw is None:
        return None
    need = -(-prompts // block)
    if not ((counts >= need) | (counts == prompts // block)).all():
        return None
    request_ids = [f"{src}:{line}" for line in lines]
    arrivals = _arrivals(request_ids, stamps, delays, sessions, src, closed_loop)
    if arrivals is None:
        return None
    rules, identities, ignored = arrivals
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
    requests = requests_from_columns(
        request_ids,
        lengths.tolist(),
        outputs.tolist(),
        block,
        [content[start:end] for start, end in zip(starts, ends, strict=True)],
        rules,
        identities,
    )
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


def _arrivals(
    request_ids: list[str],
    stamps: list[float | None],
    delays: list[float | None],
    sessions: list[str | None],
    src: str,
    closed_loop: bool,
) -> tuple[list[ArrivalRule], list[Identity], int] | None:
    """Each row's arrival rule and identity (the session rules of §2.1), or None."""
    if sessions.count(None) == len(sessions):
        return _standalone(stamps, delays, closed_loop)
    count = len(sessions)
    root_rows: list[int] = []
    root_stamps: list[float | None] = []
    later_rows: list[int] = []  # rows after a session's first turn
    later_after: list[str] = []  # the request each waits for
    later_think: list[float] = []
    turn_rows: list[int] = []  # rows with a session
    turn_conversations: list[str] = []
    turn_indices: list[int] = []
    # Per session: [conversation id, last request id, turns so far, latest timestamp].
    state: dict[str, list[Any]] = {}
    ignored = 0
    for index, stamp, delay, key in zip(range(count), stamps, delays, sessions, strict=True):
        if key is None or (known := state.get(key)) is None:
            if delay or (stamp is None and not closed_loop):
                return None
            root_rows.append(index)
            root_stamps.append(stamp)
            if key is not None:
                conversation = f"{src}/{key}"
                turn_rows.append(index)
                turn_conversations.append(conversation)
                turn_indices.append(0)
                state[key] = [conversation, request_ids[index], 1, stamp]
            continue
        if delay is not None:
            think = delay
            ignored += stamp is not None
        elif stamp is not None:
            latest = known[3]
            if latest is None:
                return None
            think = stamp - latest
            if think < 0 or think > MAX_INSTANT_MS:
                return None
            known[3] = stamp
        else:
            think = 0.0
        later_rows.append(index)
        later_after.append(known[1])
        later_think.append(think)
        turn_rows.append(index)
        turn_conversations.append(known[0])
        turn_indices.append(known[2])
        known[1] = request_ids[index]
        known[2] += 1
    given = [stamp for stamp in root_stamps if stamp is not None]
    origin = min(given) if given else None
    if given and max(given) - origin > MAX_INSTANT_MS:  # type: ignore[operator]
        return None
    # Roots with the same timestamp share one (frozen) rule.
    unique = list(dict.fromkeys(root_stamps))
    shifted = [stamp - origin if origin and stamp is not None else stamp for stamp in unique]
    shared = dict(zip(unique, roots(shifted), strict=True))
    rules: list[ArrivalRule] = [_ROOT] * count
    for index, stamp in zip(root_rows, root_stamps, strict=True):
        rules[index] = shared[stamp]
    for index, rule in zip(later_rows, after_completion(later_after, later_think), strict=True):
        rules[index] = rule
    people: list[Identity] = [_NO_IDENTITY] * count
    for index, identity in zip(
        turn_rows, identities(turn_conversations, turn_indices), strict=True
    ):
        people[index] = identity
    return rules, people, ignored


def _standalone(
    stamps: list[float | None], delays: list[float | None], closed_loop: bool
) -> tuple[list[ArrivalRule], list[Identity], int] | None:
    """:func:`_arrivals` when no row has a session: every row is a root."""
    if any(delays) or (not closed_loop and None in stamps):
        return None
    given = [stamp for stamp in stamps if stamp is not None]
    origin = min(given) if given else None
    if given and max(given) - origin > MAX_INSTANT_MS:  # type: ignore[operator]
        return None
    # Rows with the same timestamp share one (frozen) rule: 12,031 rows, 1,180 instants.
    rules = {
        stamp: ArrivalRule(
            not_before_ms=stamp - origin if origin and stamp is not None else stamp, after=()
        )
        for stamp in set(stamps)
    }
    return [rules[stamp] for stamp in stamps], [_NO_IDENTITY] * len(stamps), 0


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
