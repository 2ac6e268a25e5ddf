"""Readers for Mooncake JSONL traces: ``mooncake`` and ``mooncake-delta`` (§2.1, §2.2)."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import numpy.typing as npt

from ._compressed import open_binary
from ._exceptions import TraceFormatError, WorkloadConfigError
from ._fields import Located, fit_ids, fmt_number, iter_json_lines, source_label
from ._intern import ContentInterner, Run, reblock
from ._limits import (
    MAX_IDS,
    MAX_INSTANT_MS,
    MAX_TOKENS,
    ids_problem,
    instant_problem,
    tokens_problem,
)
from ._mooncake_fast import read_mooncake_fast
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
    last_content: npt.NDArray[np.int64]


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
    if given is not None and given > MAX_TOKENS:
        raise loc.error(in_key or "input_length", tokens_problem(given))
    if out_key is None:
        raise loc.error("output_length", "required")
    output = loc.integer(out_key, minimum=0)
    if output > MAX_TOKENS:
        raise loc.error(out_key, tokens_problem(output))
    raw = loc.id_list("hash_ids", minimum=0)
    if given is None:
        given = int(raw.size) * block
        if given == 0:
            raise loc.error("input_length", "required when hash_ids is empty")
        if given > MAX_TOKENS:
            problem = f"{raw.size} ids at block_size {block} make a prompt that "
            raise loc.error("hash_ids", problem + tokens_problem(given))
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
    file = str(path)
    with open_binary(path) as stream:
        data = stream.read()
    fast = read_mooncake_fast(file, data, src, block, closed_loop, ids, delta=delta)
    if fast is not None:
        return fast
    return read_records(file, src, block, closed_loop, ids, delta=delta)


def read_records(
    file: str,
    src: str,
    block: int,
    closed_loop: bool,
    ids: ContentInterner,
    *,
    delta: bool,
) -> Workload:
    """Read a Mooncake trace record by record, validating each field as it comes.

    The reference reading: :func:`read_mooncake_fast` must return what this returns, and
    any file it declines comes here, which names the first bad record.
    """
    scope = f"global:{src}"
    requests: list[Request] = []
    sessions: dict[str, _Session] = {}
    surplus = tails = ignored = 0
    min_root: float | None = None
    roots: list[tuple[int, str, float]] = []  # (line, timestamp key, timestamp) of roots
    with open_binary(file) as stream:
        for line, value in iter_json_lines(stream, file):
            loc = Located(file, line, value)
            timestamp, given_input, output, raw = request_fields(loc, block)
            ts_key = loc.alias("timestamp", "created_time")  # the spelling errors should name
            session_key = loc.id_string("session_id", required=False)
            delay_key = loc.alias("delay", "delay_ms")
            delay = loc.number(delay_key) if delay_key else None
            if delay is not None and delay > MAX_INSTANT_MS:
                raise loc.error(delay_key or "delay", instant_problem(delay))

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
                    roots.append((line, ts_key or "timestamp", timestamp))
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
                        last_content=content,
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
                    if think > MAX_INSTANT_MS:
                        raise loc.error(
                            ts_key or "timestamp",
                            instant_problem(think, " after the previous turn"),
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
                    if -(-prompt // block) > MAX_IDS:
                        what = f"the merged prompt of turn {session.turns}: "
                        raise loc.error("input_length", what + ids_problem(prompt, block))
                    if prompt > MAX_TOKENS:
                        raise loc.error(
                            "input_length",
                            f"the merged prompt of turn {session.turns} " + tokens_problem(prompt),
                        )
                    whole = session.last_content[: session.last_input_length // block]
                    content = reblock(new_runs, block, ids, scope, known=whole)
                    session.runs = new_runs
                else:
                    prompt = given_input
                    content = np.asarray(interned, dtype=np.int64)
                session.last_request_id = request_id
                session.turns += 1
                session.last_input_length = prompt
                session.last_output_length = output
                session.last_content = content
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
    if not requests:
        raise no_requests(file)
    check_instants(file, roots, min_root)
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


def no_requests(file: str) -> TraceFormatError:
    """The error for a JSONL trace without a single record."""
    return TraceFormatError(file, 1, "-", "no requests (the file is empty or blank)")


def check_instants(file: str, roots: list[tuple[int, str, float]], origin: float | None) -> None:
    """Raise for the first root whose shifted timestamp is past the clock's range."""
    shift = origin or 0.0
    for line, key, timestamp in roots:
        if timestamp - shift > MAX_INSTANT_MS:
            problem = instant_problem(timestamp - shift, " after the trace's first arrival")
            raise TraceFormatError(file, line, key, problem)


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
