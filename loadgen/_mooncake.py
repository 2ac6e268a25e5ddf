"""Readers for Mooncake JSONL traces: ``mooncake`` and ``mooncake-delta`` (§2.1, §2.2)."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import numpy.typing as npt

from ._compressed import open_binary
from ._exceptions import WorkloadConfigError
from ._fields import Located, fit_ids, fmt_number, iter_json_lines, source_label
from ._intern import ContentInterner, Run, reblock
from ._request import ArrivalRule, Dep, Identity, Request
from ._workload import Tolerated, Workload, check_source

__all__ = ("read_mooncake", "read_mooncake_delta")


@attrs.define(eq=False)
class _Session:
    """The reading state of one session: its last turn and its latest timestamp."""

    conversation_id: str
    last_request_id: str
    turns: int
    latest_timestamp_ms: float | None
    runs: list[Run]
    last_input_length: int
    last_output_length: int


def read_mooncake(
    path: str | Path,
    *,
    source: str | None = None,
    block_size: int = 512,
    closed_loop: bool = False,
    interner: ContentInterner | None = None,
) -> Workload:
    """Read a Mooncake JSONL trace (§2.1): one request or session turn per line.

    The file is read line by line; rows with the same ``session_id`` form one
    conversation (turns in file order), later turns wait for the previous turn's
    completion plus their ``delay`` (or timestamp gap). Root timestamps are shifted so
    the earliest is 0.

    Args:
        path: the JSONL file.
        source: the source label ``<src>`` (default: the file name up to its first dot).
        block_size: tokens per content id ``T`` (512 in the published traces).
        closed_loop: timestamps become optional (closed-loop concurrency mode, §4.2).
        interner: the run's content interner, shared by all inputs of a run (default: a
            fresh one for this read).

    Returns:
        The workload, requests in file order, ids ``<src>:<line>``.

    Raises:
        TraceFormatError: a record breaks the format (``file:line: field: problem``).
        WorkloadConfigError: a bad source label or block size.
    """
    return _read(path, source, block_size, closed_loop, interner, delta=False)


def read_mooncake_delta(
    path: str | Path,
    *,
    source: str | None = None,
    block_size: int = 512,
    closed_loop: bool = False,
    interner: ContentInterner | None = None,
) -> Workload:
    """Read a Mooncake JSONL trace whose later turns carry only their new input (§2.2).

    Turn ``k``'s prompt is the previous prompt, the previous output and the new tokens:
    ``P_k = P_(k-1) + N_(k-1) + D_k``, re-blocked so identical prefixes keep their ids.
    Same schema, timing and arguments as :func:`read_mooncake`.

    Raises:
        TraceFormatError: a record breaks the format.
        WorkloadConfigError: a bad source label or block size.
    """
    return _read(path, source, block_size, closed_loop, interner, delta=True)


def request_fields(
    loc: Located, block: int
) -> tuple[float | None, int, int, npt.NDArray[np.int64]]:
    """The fields every mooncake-style row shares (§2.1), validated.

    Returns:
        ``(timestamp or None, input_length, output_length, raw hash ids)``; a missing
        ``input_length`` defaults to ``len(hash_ids) * block``.
    """
    ts_key = loc.alias("timestamp", "created_time")
    timestamp = loc.number(ts_key) if ts_key else None
    in_key = loc.alias("input_length", "input_tokens")
    out_key = loc.alias("output_length", "output_tokens")
    given = loc.integer(in_key, minimum=1) if in_key else None
    if out_key is None:
        raise loc.error("output_length", "required")
    output = loc.integer(out_key, minimum=0)
    raw = loc.id_list("hash_ids", minimum=0)
    if given is None:
        given = int(raw.size) * block
        if given == 0:
            raise loc.error("input_length", "required when hash_ids is empty")
    return timestamp, given, output, raw


def check_block_size(block_size: int) -> int:
    """Validate a block-size option."""
    if type(block_size) is not int or block_size < 1:
        raise WorkloadConfigError(f"block_size: must be an integer >= 1, got {block_size!r}")
    return block_size


def _read(
    path: str | Path,
    source: str | None,
    block_size: int,
    closed_loop: bool,
    interner: ContentInterner | None,
    *,
    delta: bool,
) -> Workload:
    src = check_source(source if source is not None else source_label(path))
    block = check_block_size(block_size)
    ids = interner if interner is not None else ContentInterner()
    scope = f"global:{src}"
    file = str(path)
    requests: list[Request] = []
    sessions: dict[str, _Session] = {}
    surplus = tails = ignored = 0
    min_root: float | None = None
    with open_binary(path) as stream:
        for line, value in iter_json_lines(stream, file):
            loc = Located(file, line, value)
            timestamp, given_input, output, raw = request_fields(loc, block)
            ts_key = loc.alias("timestamp", "created_time")  # the spelling errors should name
            session_key = loc.id_string("session_id", required=False)
            delay_key = loc.alias("delay", "delay_ms")
            delay = loc.number(delay_key) if delay_key else None

            kept, extra, tail = fit_ids(raw, given_input, block, loc)
            surplus += extra
            interned = ids.intern_many(scope, kept.tolist())
            if tail:
                interned.append(ids.private())
                tails += 1
            request_id = f"{src}:{line}"

            if session_key is None or (session := sessions.get(session_key)) is None:
                # A first turn or a standalone request: a root at its timestamp.
                if delay:
                    where = (
                        f"the first turn of session {session_key!r}"
                        if session_key is not None
                        else "a standalone request"
                    )
                    raise loc.error(delay_key or "delay", f"must be absent or 0 on {where}")
                if timestamp is None and not closed_loop:
                    what = (
                        "the first turn of a session"
                        if session_key is not None
                        else "a standalone request"
                    )
                    raise loc.error("timestamp", f"required on {what}")
                if timestamp is not None:
                    min_root = timestamp if min_root is None else min(min_root, timestamp)
                arrival = ArrivalRule(not_before_ms=timestamp, after=())
                prompt = given_input
                content = np.asarray(interned, dtype=np.int64)
                runs = _block_runs(interned, given_input, block) if delta else []
                if session_key is None:
                    identity = Identity()
                else:
                    conversation = f"{src}/{session_key}"
                    identity = Identity(conversation_id=conversation, turn_index=0)
                    sessions[session_key] = _Session(
                        conversation_id=conversation,
                        last_request_id=request_id,
                        turns=1,
                        latest_timestamp_ms=timestamp,
                        runs=runs,
                        last_input_length=given_input,
                        last_output_length=output,
                    )
            else:
                if delay is not None:
                    think = delay
                    if timestamp is not None:
                        ignored += 1
                elif timestamp is not None:
                    latest = session.latest_timestamp_ms
                    if latest is None:
                        raise loc.error(
                            ts_key or "timestamp",
                            f"no earlier timestamp in session {session_key!r}",
                        )
                    think = timestamp - latest
                    if think < 0:
                        raise loc.error(
                            ts_key or "timestamp",
                            f"goes back {fmt_number(-think)} ms from the previous turn "
                            f"of session {session_key!r}",
                        )
                    session.latest_timestamp_ms = timestamp
                else:
                    think = 0.0
                arrival = ArrivalRule(
                    not_before_ms=None,
                    after=(Dep(session.last_request_id, "completion", think),),
                )
                identity = Identity(
                    conversation_id=session.conversation_id, turn_index=session.turns
                )
                if delta:
                    new_runs = [
                        *session.runs,
                        Run(("out", session.last_request_id), session.last_output_length),
                        *_block_runs(interned, given_input, block),
                    ]
                    new_runs = [r for r in new_runs if r.tokens > 0]
                    prompt = session.last_input_length + session.last_output_length + given_input
                    content = reblock(new_runs, block, ids, scope)
                    session.runs = new_runs
                else:
                    prompt = given_input
                    content = np.asarray(interned, dtype=np.int64)
                session.last_request_id = request_id
                session.turns += 1
                session.last_input_length = prompt
                session.last_output_length = output
            requests.append(
                Request(
                    id=request_id,
                    input_length=prompt,
                    output_length=output,
                    block_size=block,
                    hash_ids=content,
                    arrival=arrival,
                    identity=identity,
                )
            )
    if min_root:
        requests = [_shift(r, min_root) for r in requests]
    return Workload(
        requests=tuple(requests),
        source=src,
        format="mooncake-delta" if delta else "mooncake",
        tolerated=Tolerated(
            surplus_ids=surplus, private_tail_ids=tails, ignored_timestamps=ignored
        ),
    )


def _block_runs(interned: list[int], tokens: int, block: int) -> list[Run]:
    runs: list[Run] = []
    for index, content_id in enumerate(interned):
        size = min(block, tokens - index * block)
        runs.append(Run(content_id, size, content_id if size == block else None))
    return runs


def _shift(request: Request, origin_ms: float) -> Request:
    nb = request.arrival.not_before_ms
    if nb is None:
        return request
    arrival = attrs.evolve(request.arrival, not_before_ms=nb - origin_ms)
    return attrs.evolve(request, arrival=arrival)
