"""Reader for agentic-Mooncake JSONL: one DAG node per line (REFERENCE-workloads §2.3)."""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import numpy as np
import numpy.typing as npt

from ._agentic_fast import read_agentic_fast
from ._compressed import open_binary
from ._exceptions import TraceFormatError
from ._fields import Located, collector_paused, fit_ids, iter_json_lines, render, source_label
from ._intern import ContentInterner
from ._limits import MAX_INSTANT_MS, instant_problem
from ._lineage import derive_lineage
from ._mooncake import check_block_size, check_instants, no_requests, request_fields
from ._request import ArrivalRule, Dep, Identity, Request
from ._slo import SLO
from ._workload import Play, Tolerated, Workload, check_source

__all__ = ("read_agentic",)


@attrs.define(eq=False)
class _Node:
    line: int
    request_id: str
    session: str
    timestamp_ms: float
    input_length: int
    output_length: int
    raw_ids: npt.NDArray[np.int64]
    tail: bool
    wait_for: tuple[str, ...]
    delay_ms: float
    slo: SLO | None


def read_agentic(
    path: str | Path,
    *,
    source: str | None = None,
    block_size: int = 512,
    interner: ContentInterner | None = None,
) -> Workload:
    """Read an agentic-Mooncake JSONL trace: one DAG node per line (§2.3).

    Rows carry the mooncake fields plus ``request_id`` and ``wait_for``; a row waits
    for the completion of every id it lists plus ``delay + tool_wait_ms``. A row may carry
    its own SLO, ``"slo": {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": 20000}`` (any subset).
    A play is a weakly connected component, named by its earliest root; each play is its own content
    scope. Root timestamps are shifted so the earliest is 0.

    Args:
        path: the JSONL file.
        source: the source label (default: the file name up to its first dot).
        block_size: tokens per content id ``T``.
        interner: the run's content interner (default: a fresh one).

    Returns:
        The workload in file order, with its plays (ordered by earliest root) and lineage.

    Raises:
        TraceFormatError: a bad record, an unknown or self dependency, a duplicate id or
            a dependency cycle, with the ids named.
        WorkloadConfigError: a bad source label or block size.
    """
    src = check_source(source if source is not None else source_label(path))
    block = check_block_size(block_size)
    ids = interner if interner is not None else ContentInterner()
    file = str(path)
    with open_binary(path) as stream:
        data = stream.read()
    fast = read_agentic_fast(file, data, src, block, ids)
    if fast is not None:
        return fast
    return read_agentic_records(file, src, block, ids)


def read_agentic_records(file: str, src: str, block: int, ids: ContentInterner) -> Workload:
    """Read an agentic trace record by record, validating each field as it comes.

    The reference reading: :func:`read_agentic_fast` must return what this returns, and
    any file it declines comes here, which names the first bad record.
    """
    nodes: list[_Node] = []
    by_id: dict[str, _Node] = {}
    surplus = ignored = 0
    with open_binary(file) as stream, collector_paused():
        for line, value in iter_json_lines(stream, file):
            loc = Located(file, line, value)
            timestamp, given, output, raw = request_fields(loc, block)
            session = loc.id_string("session_id", required=False) or "main"
            _no_hash(loc, "session_id", session)
            delay_key = loc.alias("delay", "delay_ms")
            delay = loc.number(delay_key) if delay_key else 0.0
            tool_wait = loc.number("tool_wait_ms", default=0.0)
            if delay + tool_wait > MAX_INSTANT_MS:
                key = (delay_key or "delay") if delay >= tool_wait else "tool_wait_ms"
                raise loc.error(key, instant_problem(delay + tool_wait, " of waiting"))
            request_id = loc.required_id("request_id")
            _no_hash(loc, "request_id", request_id)
            wait_for = _wait_for(loc, request_id)
            kept, extra, tail = fit_ids(raw, given, block, loc)
            surplus += extra
            earlier = by_id.get(request_id)
            if earlier is not None:
                raise loc.error("request_id", f"duplicate of line {earlier.line} ({request_id!r})")
            if wait_for and timestamp is not None:
                ignored += 1
            node = _Node(
                line=line,
                request_id=request_id,
                session=session,
                timestamp_ms=timestamp if timestamp is not None else 0.0,
                input_length=given,
                output_length=output,
                raw_ids=kept,
                tail=tail,
                wait_for=wait_for,
                delay_ms=delay + tool_wait,
                slo=own_slo(loc),
            )
            nodes.append(node)
            by_id[request_id] = node
    if not nodes:
        raise no_requests(file)
    _check_graph(file, nodes, by_id)
    check_instants(
        file,
        [(n.line, "timestamp", n.timestamp_ms) for n in nodes if not n.wait_for],
        min((n.timestamp_ms for n in nodes if not n.wait_for), default=None),
    )
    with collector_paused():
        return _build(src, file, block, ids, nodes, by_id, surplus, ignored)


def own_slo(loc: Located) -> SLO | None:
    """A row's own SLO: ``"slo": {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": 20000}``.

    Any subset of the three bounds, milliseconds, each a finite number ``>= 0``; an empty
    object or ``null`` is no SLO.
    """
    value = loc.obj.get("slo")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise loc.error("slo", f'must be an object such as {{"ttft_ms": 500}}, got {render(value)}')
    bounds: dict[str, float] = {}
    for key, bound in value.items():
        if key not in _SLO_BOUNDS:
            raise loc.error(f"slo.{key}", "unknown bound (expected ttft_ms, tpot_ms, e2e_ms)")
        if (
            isinstance(bound, bool)
            or not isinstance(bound, int | float)
            or not math.isfinite(bound)
            or bound < 0
        ):
            raise loc.error(f"slo.{key}", f"must be a finite number >= 0 (ms), got {render(bound)}")
        bounds[key] = float(bound)
    return SLO(**bounds) if bounds else None


_SLO_BOUNDS = ("ttft_ms", "tpot_ms", "e2e_ms")


def _no_hash(loc: Located, key: str, value: str) -> None:
    if "#" in value:
        raise loc.error(key, f"'#' is reserved for play instances, got {render(value)}")


def _wait_for(loc: Located, request_id: str) -> tuple[str, ...]:
    value = loc.obj.get("wait_for")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise loc.error("wait_for", f"must be a list of request ids, got {render(value)}")
    out: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, int) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str) or not item:
            raise loc.error(f"wait_for[{index}]", f"must be a non-empty string, got {render(item)}")
        if item == request_id:
            raise loc.error("wait_for", f"request {request_id!r} depends on itself")
        if item not in out:
            out.append(item)
    return tuple(out)


def _check_graph(file: str, nodes: list[_Node], by_id: dict[str, _Node]) -> None:
    for node in nodes:
        for dep in node.wait_for:
            if dep not in by_id:
                raise TraceFormatError(file, node.line, "wait_for", f"unknown request_id {dep!r}")
    # Kahn's algorithm in file order; what stays unresolved lies on or behind a cycle.
    pending = {n.request_id: len(n.wait_for) for n in nodes}
    waiters: dict[str, list[str]] = {}
    for node in nodes:
        for dep in node.wait_for:
            waiters.setdefault(dep, []).append(node.request_id)
    ready = [n.request_id for n in nodes if not n.wait_for]
    while ready:
        done = ready.pop()
        for waiter in waiters.get(done, ()):
            pending[waiter] -= 1
            if pending[waiter] == 0:
                ready.append(waiter)
    unresolved = [n for n in nodes if pending[n.request_id] > 0]
    if not unresolved:
        return
    path: list[str] = []
    seen: dict[str, int] = {}
    current = unresolved[0]
    while current.request_id not in seen:
        seen[current.request_id] = len(path)
        path.append(current.request_id)
        current = next(by_id[d] for d in current.wait_for if pending[d] > 0)
    cycle = [*path[seen[current.request_id] :], current.request_id]
    raise TraceFormatError(file, current.line, "wait_for", "dependency cycle " + " -> ".join(cycle))


def _build(
    src: str,
    file: str,
    block: int,
    ids: ContentInterner,
    nodes: list[_Node],
    by_id: dict[str, _Node],
    surplus: int,
    ignored: int,
) -> Workload:
    del file
    # Weakly connected components with union-find (iterative path halving).
    parent = {n.request_id: n.request_id for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for node in nodes:
        for dep in node.wait_for:
            a, b = find(node.request_id), find(dep)
            if a != b:
                parent[a] = b
    members: dict[str, list[_Node]] = {}
    for node in nodes:
        members.setdefault(find(node.request_id), []).append(node)
    # Each component is named by its earliest root, smallest (timestamp, line).
    groups = sorted(
        members.values(),
        key=lambda g: min((n.timestamp_ms, n.line) for n in g if not n.wait_for),
    )
    roots = [n.timestamp_ms for n in nodes if not n.wait_for]
    origin = min(roots) if roots else 0.0
    index_of = {n.request_id: i for i, n in enumerate(nodes)}
    built: list[Request | None] = [None] * len(nodes)
    plays: list[Play] = []
    tails = 0
    for group in groups:
        earliest = min((n for n in group if not n.wait_for), key=lambda n: (n.timestamp_ms, n.line))
        play_id = f"{src}:{earliest.request_id}"
        scope = ids.local_scope()
        first_id = ids.next_id
        full_id = {n.request_id: f"{play_id}/{n.request_id}" for n in group}
        conversation = {n.request_id: f"{play_id}/{n.session}" for n in group}
        turns: dict[str, int] = {}
        candidates: dict[str, list[str]] = {}
        for node in group:
            conv = conversation[node.request_id]
            candidates.setdefault(conv, [])
        for node in group:
            conv = conversation[node.request_id]
            deps = [conversation[d] for d in node.wait_for]
            if conv not in deps:  # an entry request: no dependency inside its conversation
                for other in deps:
                    if other not in candidates[conv]:
                        candidates[conv].append(other)
        lineage = derive_lineage(candidates).lineages
        for node in group:
            conv = conversation[node.request_id]
            turn = turns.get(conv, 0)
            turns[conv] = turn + 1
            content = scope.intern_ints(node.raw_ids)
            if node.tail:
                content = np.append(content, ids.private())
                tails += 1
            if node.wait_for:
                arrival = ArrivalRule(
                    not_before_ms=None,
                    after=tuple(
                        Dep(full_id[d], "completion", node.delay_ms) for d in node.wait_for
                    ),
                )
            else:
                arrival = ArrivalRule(not_before_ms=node.timestamp_ms - origin)
            built[index_of[node.request_id]] = Request(
                id=full_id[node.request_id],
                input_length=node.input_length,
                output_length=node.output_length,
                block_size=block,
                hash_ids=np.asarray(content, dtype=np.int64),
                arrival=arrival,
                identity=Identity(
                    conversation_id=conv,
                    turn_index=turn,
                    play_id=play_id,
                    lineage=lineage[conv],
                ),
                slo=node.slo,
            )
        plays.append(
            Play(
                id=play_id,
                request_indices=tuple(index_of[n.request_id] for n in group),
                conversations=tuple(dict.fromkeys(conversation[n.request_id] for n in group)),
                content_ids=(first_id, ids.next_id),
            )
        )
    requests = tuple(r for r in built if r is not None)
    return Workload(
        requests=requests,
        source=src,
        format="agentic",
        tolerated=Tolerated(
            surplus_ids=surplus, private_tail_ids=tails, ignored_timestamps=ignored
        ),
        plays=tuple(plays),
    )
