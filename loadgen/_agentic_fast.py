"""The column-wise reading of a well-formed agentic trace (``bench/read.py`` measures it).

As for Mooncake (:mod:`loadgen._mooncake_fast`): every line is parsed once, each field
becomes a column validated as a whole, the dependency graph is checked and split into
plays on integer row numbers, and every play's content ids are interned in one
vectorized call. Anything this path does not take for certain valid (a failed check, an
alias spelling, an unknown or repeated request id, a cycle) makes it return None: the
caller then reads the file record by record, which names the first bad record exactly.
Both paths give the same workload; a differential test compares them.
"""

from __future__ import annotations

from itertools import chain
from typing import NamedTuple, cast

import numpy as np
import numpy.typing as npt

from ._columns import after_completions, gather, linked_requests, placed, roots
from ._fields import collector_paused
from ._intern import ContentInterner
from ._limits import MAX_INSTANT_MS
from ._lineage import derive_lineage
from ._request import ArrivalRule, Lineage
from ._rows import cells, id_column, number_column, row_columns
from ._workload import Play, Tolerated, Workload

__all__ = ("read_agentic_fast",)

Ids = npt.NDArray[np.int64]

_NONE = type(None)


def read_agentic_fast(
    file: str, data: bytes, src: str, block: int, ids: ContentInterner
) -> Workload | None:
    """Read an agentic trace held in ``data`` if it is certainly valid, else return None.

    Args:
        file: the file name.
        data: the file's bytes.
        src: the source label.
        block: the block size ``T``.
        ids: the run's interner; untouched when None is returned.

    Returns:
        The workload, equal to what the record-by-record reader returns, or None.
    """
    del file  # only the record-by-record reading names it
    with collector_paused():
        return _read(data, src, block, ids)


def _waits(values: list[dict[str, object]], present: set[str]) -> npt.NDArray[np.float64] | None:
    """Each row's ``delay + tool_wait_ms`` (absent ones 0.0, added as a row adds them),
    if every cell is a number and every sum in range."""
    count = len(values)
    added: list[npt.NDArray[np.float64]] = []
    for key in ("delay", "tool_wait_ms"):
        if key not in present:
            added.append(np.zeros(count, dtype=np.float64))
            continue
        column = number_column(cells(values, key), float("inf"))
        if column is None:
            return None
        added.append(column.values)
    waits = added[0] + added[1]
    return None if float(waits.max()) > MAX_INSTANT_MS else waits


def _read(data: bytes, src: str, block: int, ids: ContentInterner) -> Workload | None:
    rows = row_columns(data)
    if rows is None:
        return None
    values, lines, present, prompts, outputs, stamps, counts, raw = rows
    del rows
    if "slo" in present:
        return None  # requests with SLOs of their own: read record by record
    count = len(values)
    waits = _waits(values, present)
    sessions = id_column(cells(values, "session_id")) if "session_id" in present else [None] * count
    names = id_column(cells(values, "request_id"))
    if waits is None or sessions is None or names is None or None in names:
        return None
    request_names = cast(list[str], names)
    session_names: list[str] = (
        ["main" if s is None else s for s in sessions]
        if None in sessions
        else cast(list[str], sessions)
    )
    if "#" in "\n".join(request_names) or "#" in "\n".join(session_names):
        return None
    row_of = dict(zip(request_names, range(count), strict=True))
    if len(row_of) != count:
        return None  # a duplicate request id
    graph = _graph(cells(values, "wait_for"), row_of)
    del values  # what is left is columns
    if graph is None:
        return None
    owners, targets, dep_counts = graph
    need = -(-prompts // block)
    if not ((counts >= need) | (counts == prompts // block)).all():
        return None
    is_root = dep_counts == 0
    root_rows = np.flatnonzero(is_root)
    root_stamps = stamps.values[root_rows]  # 0.0 where absent
    # A DAG without a cycle has a root; the first smallest, as min() picks it (-0.0 or 0.0).
    origin = min(root_stamps.tolist())
    if float(root_stamps.max()) - origin > MAX_INSTANT_MS:
        return None
    play, play_roots = _plays(count, owners, targets, dep_counts, root_rows, root_stamps, lines)
    play_count = len(play_roots)
    play_names = [f"{src}:{request_names[row]}" for row in play_roots]
    row_play = gather(play_names, play)
    full_ids = [f"{p}/{r}" for p, r in zip(row_play, request_names, strict=True)]
    talks = _conversations(play, session_names, row_play, owners, targets)
    rules, waited = _rules(
        root_rows, root_stamps - origin, owners, targets, dep_counts, full_ids, waits, count
    )
    # Content: each play is its own scope, interned in play order (plays in order, each
    # play's rows in file order), a private id after a row's kept ids when its last
    # block is partial.
    keep = np.minimum(counts, need)
    tail = counts < need
    content, sizes = _content(ids, raw, counts, keep, tail, play, play_count)
    starts_of_play = ids.next_id - int(sizes.sum()) + np.concatenate(([0], np.cumsum(sizes)))
    ends = np.cumsum(keep + tail).tolist()
    starts = [0, *ends[:-1]]
    requests = linked_requests(
        full_ids,
        prompts.tolist(),
        outputs.tolist(),
        block,
        [content[a:b] for a, b in zip(starts, ends, strict=True)],
        rules,
        waited,
        waits.tolist(),
        talks.names,
        talks.turns,
        row_play,
        talks.lineages,
    )
    order = np.argsort(play, kind="stable")
    bounds = np.searchsorted(play[order], np.arange(play_count + 1)).tolist()
    rows_in_order = order.tolist()
    ranges = starts_of_play.tolist()
    plays = tuple(
        Play(
            id=play_names[p],
            request_indices=tuple(rows_in_order[bounds[p] : bounds[p + 1]]),
            conversations=talks.of_play[p],
            content_ids=(ranges[p], ranges[p + 1]),
        )
        for p in range(play_count)
    )
    return Workload(
        requests=requests,
        source=src,
        format="agentic",
        tolerated=Tolerated(
            surplus_ids=int(np.maximum(counts - need, 0).sum()),
            private_tail_ids=int(tail.sum()),
            ignored_timestamps=int((stamps.given & ~is_root).sum()),
        ),
        plays=plays,
    )


def _plays(
    count: int,
    owners: Ids,
    targets: Ids,
    dep_counts: Ids,
    root_rows: Ids,
    root_stamps: npt.NDArray[np.float64],
    lines: list[int],
) -> tuple[Ids, list[int]]:
    """Each row's play and each play's root row, plays in order.

    A play is a weakly connected component, named by its earliest root (smallest
    timestamp, then line); plays are in that order.
    """
    component = _components(count, owners, targets, dep_counts)
    line_numbers = np.asarray(lines, dtype=np.int64)
    by_root = np.lexsort((line_numbers[root_rows], root_stamps, component[root_rows]))
    sorted_components = component[root_rows][by_root]
    first = np.ones(by_root.size, dtype=np.bool_)
    first[1:] = sorted_components[1:] != sorted_components[:-1]
    earliest = root_rows[by_root[first]]  # per component (ascending component label)
    earliest_keys = np.lexsort((line_numbers[earliest], root_stamps[by_root[first]]))
    play_of_component = np.empty(int(component.max()) + 1, dtype=np.int64)
    play_of_component[sorted_components[first][earliest_keys]] = np.arange(
        earliest.size, dtype=np.int64
    )
    return play_of_component[component], earliest[earliest_keys].tolist()


class _Conversations(NamedTuple):
    """Each row's conversation, turn and lineage, and each play's conversations."""

    names: list[str]
    turns: list[int]
    lineages: list[Lineage | None]
    of_play: list[tuple[str, ...]]


def _conversations(
    play: Ids, session_names: list[str], row_play: list[str], owners: Ids, targets: Ids
) -> _Conversations:
    """The conversations (``<play>/<session>``): a row's turn is its place among its
    conversation's rows in file order; a play lists its conversations in order of first
    appearance."""
    count = play.size
    sessions = dict.fromkeys(session_names)
    number = dict(zip(sessions, range(len(sessions)), strict=True))
    session_code = np.fromiter(map(number.__getitem__, session_names), np.int64, count)
    keys = play * len(sessions) + session_code
    _, first_rows, code = np.unique(keys, return_index=True, return_inverse=True)
    code = code.reshape(-1)
    # Conversations numbered in order of first appearance, so the names are made once.
    by_first = np.argsort(first_rows, kind="stable")
    renumber = np.empty(by_first.size, dtype=np.int64)
    renumber[by_first] = np.arange(by_first.size, dtype=np.int64)
    code = renumber[code]
    firsts = first_rows[by_first].tolist()
    unique = [f"{row_play[r]}/{session_names[r]}" for r in firsts]
    order = np.argsort(code, kind="stable")
    in_order = code[order]
    starts = np.flatnonzero(np.concatenate(([True], in_order[1:] != in_order[:-1])))
    turn = np.empty(count, dtype=np.int64)
    turn[order] = np.arange(count, dtype=np.int64) - np.repeat(
        starts, np.diff(starts, append=count)
    )
    lineage = _lineages(unique, code, owners, targets)
    firsts_play = play[first_rows[by_first]]
    by_play = np.argsort(firsts_play, kind="stable")
    bounds = np.searchsorted(firsts_play[by_play], np.arange(int(play.max()) + 2)).tolist()
    listed = by_play.tolist()
    of_play = [
        tuple(unique[c] for c in listed[bounds[p] : bounds[p + 1]]) for p in range(len(bounds) - 1)
    ]
    return _Conversations(gather(unique, code), turn.tolist(), gather(lineage, code), of_play)


def _graph(column: list[object], row_of: dict[str, int]) -> tuple[Ids, Ids, Ids] | None:
    """Every dependency edge (owner row, target row) in order, deduplicated per row, and
    each row's dependency count; None for a bad list, an unknown or self dependency, or
    a cycle."""
    kinds = set(map(type, column))
    if not kinds <= {list, _NONE}:
        return None
    lists: list[list[object]] = [v or [] for v in column]  # type: ignore[misc]
    flat = list(chain.from_iterable(lists))
    item_kinds = set(map(type, flat))
    if not item_kinds <= {str, int} or "" in flat:
        return None
    if int in item_kinds:
        flat = [v if type(v) is str else str(v) for v in flat]
    try:
        targets_list = list(map(row_of.__getitem__, flat))  # type: ignore[arg-type]
    except KeyError:
        return None
    sizes = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    owners = np.repeat(np.arange(len(lists), dtype=np.int64), sizes)
    targets = np.asarray(targets_list, dtype=np.int64)
    if targets.size and bool((targets == owners).any()):
        return None
    if bool((sizes > 1).any()):  # a row may list an id twice: keep its first mention
        pairs = dict.fromkeys(zip(owners.tolist(), targets.tolist(), strict=True))
        if len(pairs) != targets.size:
            owners = np.fromiter((a for a, _ in pairs), dtype=np.int64, count=len(pairs))
            targets = np.fromiter((b for _, b in pairs), dtype=np.int64, count=len(pairs))
            sizes = np.bincount(owners, minlength=len(lists)).astype(np.int64)
    if not bool((targets < owners).all()) and _has_cycle(len(lists), owners, targets):
        return None
    return owners, targets, sizes


def _has_cycle(count: int, owners: Ids, targets: Ids) -> bool:
    """Whether the dependency graph has a cycle (Kahn's algorithm)."""
    pending = np.bincount(owners, minlength=count).tolist()
    waiters: list[list[int]] = [[] for _ in range(count)]
    for owner, target in zip(owners.tolist(), targets.tolist(), strict=True):
        waiters[target].append(owner)
    ready = [row for row in range(count) if not pending[row]]
    done = 0
    while ready:
        row = ready.pop()
        done += 1
        for waiter in waiters[row]:
            pending[waiter] -= 1
            if not pending[waiter]:
                ready.append(waiter)
    return done != count


def _components(count: int, owners: Ids, targets: Ids, dep_counts: Ids) -> Ids:
    """A label per row, equal for rows of one weakly connected component."""
    if not bool((dep_counts > 1).any()):
        # A forest (one dependency at most): follow parent links by pointer jumping.
        parent = np.arange(count, dtype=np.int64)
        parent[owners] = targets
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                return parent
            parent = jumped
    link = list(range(count))
    for a, b in zip(owners.tolist(), targets.tolist(), strict=True):
        while link[a] != a:
            link[a] = link[link[a]]
            a = link[a]
        while link[b] != b:
            link[b] = link[link[b]]
            b = link[b]
        if a != b:
            link[a] = b
    for row in range(count):
        top = row
        while link[top] != top:
            top = link[top]
        link[row] = top
    return np.asarray(link, dtype=np.int64)


def _lineages(
    conversations: list[str], code: Ids, owners: Ids, targets: Ids
) -> list[Lineage | None]:
    """Each conversation's lineage (§6): a conversation's candidate parents are the other
    conversations its entry requests (those without a dependency inside it) wait for.

    ``code`` is each row's conversation (an index into ``conversations``). Candidates of
    different plays never meet, so all plays are derived in one call; the order of
    candidates does not change the outcome (one parent, or none). Without a dependency
    across conversations every conversation is a root.
    """
    inside = np.zeros(code.size, dtype=np.bool_)
    inside[owners[code[owners] == code[targets]]] = True
    crossing = np.flatnonzero(~inside[owners])
    if not crossing.size:
        return [Lineage(root_conversation_id=c) for c in conversations]
    candidates: dict[str, list[str]] = {c: [] for c in conversations}
    for owner, target in zip(
        code[owners[crossing]].tolist(), code[targets[crossing]].tolist(), strict=True
    ):
        found = candidates[conversations[owner]]
        other = conversations[target]
        if other not in found:
            found.append(other)
    derived = derive_lineage(candidates).lineages
    return [derived[c] for c in conversations]


def _rules(
    root_rows: Ids,
    root_shifted: npt.NDArray[np.float64],
    owners: Ids,
    targets: Ids,
    dep_counts: Ids,
    full_ids: list[str],
    waits: npt.NDArray[np.float64],
    count: int,
) -> tuple[list[ArrivalRule | None], list[str | None]]:
    """Each row's arrival as :func:`~loadgen._columns.linked_requests` takes it: roots at
    their shifted timestamp and rows that wait for several requests have their rule; a
    row that waits for one has None, and that request's id (the others None)."""
    parts: list[tuple[Ids, list[ArrivalRule | None]]] = [
        (root_rows, list(roots(root_shifted.tolist())))
    ]
    waited_row = np.full(count, count, dtype=np.int64)  # ``count`` stands for none
    single = np.flatnonzero(dep_counts == 1)
    if single.size:
        waited_row[single] = targets[np.searchsorted(owners, single)]
        parts.append((single, [None] * single.size))
    several = np.flatnonzero(dep_counts > 1)
    if several.size:
        edge = np.searchsorted(owners, several).tolist()
        sizes = dep_counts[several].tolist()
        target_list = targets.tolist()
        groups = [
            [full_ids[t] for t in target_list[e : e + n]] for e, n in zip(edge, sizes, strict=True)
        ]
        parts.append((several, list(after_completions(groups, waits[several].tolist()))))
    return placed(count, *parts), gather([*full_ids, None], waited_row)


def _content(
    ids: ContentInterner,
    raw: Ids,
    counts: Ids,
    keep: Ids,
    tail: npt.NDArray[np.bool_],
    play: Ids,
    play_count: int,
) -> tuple[Ids, Ids]:
    """All rows' content ids in file order, read-only, and each play's fresh-id count.

    Row ``i`` contributes its first ``keep[i]`` raw ids, then one private id if
    ``tail[i]``; ids are interned per play, in play order.
    """
    rows = counts.size
    sizes = keep + tail
    if not tail.any() and bool((keep == counts).all()):
        stream = raw  # nothing to cut or add: the ids as read
    else:
        row_of = np.repeat(np.arange(rows, dtype=np.int64), counts)
        starts_in = np.cumsum(counts) - counts
        starts_out = np.cumsum(sizes) - sizes
        position = np.arange(raw.size, dtype=np.int64) - starts_in[row_of]
        kept = position < keep[row_of]
        stream = np.empty(int(sizes.sum()), dtype=np.int64)
        stream[(starts_out[row_of] + position)[kept]] = raw[kept]
        tails = np.flatnonzero(tail)
        stream[starts_out[tails] + keep[tails]] = -1 - tails  # one distinct private per row
    if rows < 2 or bool((play[1:] >= play[:-1]).all()):  # plays lie in file order
        if bool((sizes > 0).all()):
            # Each id's play: the play steps up where its row starts, summed up (cheaper
            # than numpy's repeat per row; needs every row to hold an id).
            element_play = np.zeros(stream.size, dtype=np.int64)
            element_play[np.cumsum(sizes[:-1])] = np.diff(play)
            element_play[0] = play[0]
            np.cumsum(element_play, out=element_play)
        else:
            element_play = np.repeat(play, sizes)
        interned, fresh = ids.intern_local_streams(stream, element_play, play_count)
        interned.flags.writeable = False
        return interned, fresh
    # The stream in play order: rows sorted by play (stable keeps file order).
    starts_out = np.cumsum(sizes) - sizes
    order = np.argsort(play, kind="stable")
    sizes_in_order = sizes[order]
    starts_in_order = np.cumsum(sizes_in_order) - sizes_in_order
    element_row = np.repeat(order, sizes_in_order)
    within = np.arange(stream.size, dtype=np.int64) - np.repeat(starts_in_order, sizes_in_order)
    source = starts_out[element_row] + within  # where each play-order element lives
    interned, fresh = ids.intern_local_streams(stream[source], play[element_row], play_count)
    out = np.empty(stream.size, dtype=np.int64)
    out[source] = interned
    out.flags.writeable = False
    return out, fresh
