"""Column-wise reading of sessions, ``mooncake-delta`` sessions and agentic traces equals
the record-by-record reading (differential tests, same workload and interner state)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadgen
from loadgen import ArrivalRule, ContentInterner, Dep, TraceFormatError, _intern
from loadgen._agentic import read_agentic_records
from loadgen._agentic_fast import read_agentic_fast
from loadgen._columns import after_completions, roots
from loadgen._intern import _first_seen
from loadgen._mooncake import read_records
from loadgen._mooncake_fast import read_mooncake_fast

from .conftest import MOONCAKE

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same_interner(a: ContentInterner, b: ContentInterner, scope: str) -> None:
    assert a.next_id == b.next_id
    assert a.scope_size(scope) == b.scope_size(scope)
    assert a._table(scope) == b._table(scope)


def _jsonl(rows: list[dict[str, Any]]) -> Path:
    """The rows written one per line to a new file ``m.jsonl``."""
    path = Path(tempfile.mkdtemp(prefix="fast")) / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _sessions_file(folder: Path, agentic: bool) -> Path:
    """The shared trace given sessions of ten turns (as bench/read.py builds it)."""
    out = folder / ("agentic.jsonl" if agentic else "sessions.jsonl")
    with loadgen.open_binary(MOONCAKE) as src, open(out, "w", encoding="utf-8") as dst:
        for index, raw in enumerate(src):
            row = json.loads(raw)
            row["session_id"] = f"s{index // 10}"
            if agentic:
                row["request_id"] = f"r{index}"
            if index % 10:
                row["delay"] = 1000
                if agentic:
                    row["wait_for"] = [f"r{index - 1}"]
                else:
                    row.pop("timestamp")
            dst.write(json.dumps(row) + "\n")
    return out


@pytest.mark.parametrize("delta", [False, True])
def test_the_shared_trace_given_sessions_reads_the_same_both_ways(
    tmp_path: Path, delta: bool
) -> None:
    path = _sessions_file(tmp_path, agentic=False)
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    read = loadgen.read_mooncake_delta if delta else loadgen.read_mooncake
    fast = read(path, interner=fast_ids)
    slow = read_records(str(path), "sessions", 512, False, slow_ids, delta=delta)
    assert fast == slow
    assert fast.requests[1].input_length > fast.requests[0].input_length  # merged (delta)
    _same_interner(fast_ids, slow_ids, "global:sessions")
    taken = read_mooncake_fast(
        str(path), path.read_bytes(), "sessions", 512, False, ContentInterner(), delta=delta
    )
    assert taken == slow


def test_the_shared_trace_as_an_agentic_dag_reads_the_same_both_ways(tmp_path: Path) -> None:
    path = _sessions_file(tmp_path, agentic=True)
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    fast = loadgen.read_agentic(path, interner=fast_ids)
    slow = read_agentic_records(str(path), "agentic", 512, slow_ids)
    assert fast == slow
    assert len(fast.plays) == 1204
    assert fast_ids.next_id == slow_ids.next_id
    assert read_agentic_fast(str(path), path.read_bytes(), "agentic", 512, ContentInterner())


def test_a_delta_read_into_a_used_scope_continues_it(tmp_path: Path) -> None:
    rows = [
        {
            "timestamp": 0,
            "input_length": 12,
            "output_length": 3,
            "hash_ids": [5, 9],
            "session_id": 1,
        },
        {"input_length": 20, "output_length": 2, "hash_ids": [9, 4, 7], "session_id": 1},
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    for _ in range(2):  # the second read finds the first one's windows in the scope
        fast = loadgen.read_mooncake_delta(path, block_size=8, interner=fast_ids)
        slow = read_records(str(path), "m", 8, False, slow_ids, delta=True)
        assert fast == slow
    assert fast_ids.intern("global:m", 4) == slow_ids.intern("global:m", 4)
    _same_interner(fast_ids, slow_ids, "global:m")


@st.composite
def mixed_session_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows with and without sessions in one file, timestamps sometimes missing (for
    closed-loop reading), later turns with a delay, a timestamp gap, both or neither."""
    rows: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 12))):
        ids = draw(st.lists(st.integers(0, 9), min_size=1, max_size=3))
        row: dict[str, Any] = {
            "input_length": len(ids) * 8,
            "output_length": draw(st.integers(0, 4)),
            "hash_ids": ids,
        }
        if draw(st.integers(0, 3)):
            row["timestamp"] = draw(st.sampled_from([0, 1.5, 7, 3, -0.0]))
        if draw(st.booleans()):
            row["delay"] = draw(st.sampled_from([0, 2.5, -0.0]))
        session = draw(st.sampled_from([None, "a", "b", 7]))
        if session is not None:
            row["session_id"] = session
        rows.append(row)
    return rows


@SETTINGS
@given(mixed_session_rows(), st.booleans())
def test_files_mixing_sessions_and_lone_rows_read_the_same_both_ways(
    rows: list[dict[str, Any]], closed_loop: bool
) -> None:
    path = _jsonl(rows)
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    try:
        slow = read_records(str(path), "m", 8, closed_loop, slow_ids, delta=False)
    except TraceFormatError as error:
        with pytest.raises(TraceFormatError) as info:
            loadgen.read_mooncake(path, block_size=8, closed_loop=closed_loop, interner=fast_ids)
        assert str(info.value) == str(error)
        return
    fast = loadgen.read_mooncake(path, block_size=8, closed_loop=closed_loop, interner=fast_ids)
    assert fast == slow
    assert repr(fast) == repr(slow)  # -0.0 and 0.0 too
    _same_interner(fast_ids, slow_ids, "global:m")


@st.composite
def delta_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid ``mooncake-delta`` rows: sessions with outputs of any length (0 too),
    prompts that end inside a block or on its edge, surplus ids and private tails."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(draw(st.integers(1, 14))):
        ids = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
        row: dict[str, Any] = {
            "input_length": draw(st.integers(1, len(ids) * 8 + 7)),
            "output_length": draw(st.sampled_from([0, 1, 3, 8, 16, 21])),
            "hash_ids": ids,
        }
        if row["input_length"] > len(ids) * 8:  # a private tail needs exactly the whole ids
            row["input_length"] = len(ids) * 8 + draw(st.integers(1, 7))
        session = draw(st.sampled_from([None, "a", "b", "c"]))
        if session is None or session not in seen:
            row["timestamp"] = draw(st.integers(0, 5))
        else:
            row["delay"] = draw(st.sampled_from([0, 2.5]))
        if session is not None:
            row["session_id"] = session
            seen.add(session)
        rows.append(row)
    return rows


@SETTINGS
@given(delta_rows(), st.sampled_from([4, 8, 16]))
def test_generated_delta_sessions_read_the_same_both_ways(
    rows: list[dict[str, Any]], block: int
) -> None:
    path = _jsonl(rows)
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    try:
        slow = read_records(str(path), "m", block, False, slow_ids, delta=True)
    except TraceFormatError as error:
        with pytest.raises(TraceFormatError) as info:
            loadgen.read_mooncake_delta(path, block_size=block, interner=fast_ids)
        assert str(info.value) == str(error)
        return
    taken = read_mooncake_fast(
        str(path), path.read_bytes(), "m", block, False, fast_ids, delta=True
    )
    assert taken == slow
    _same_interner(fast_ids, slow_ids, "global:m")


@st.composite
def agentic_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Agentic rows, mostly valid: dependencies on earlier or later rows (so cycles too),
    joins, spawns into other conversations, repeated and unknown ids, delays and tool
    waits, rows without timestamps, surplus ids and private tails."""
    count = draw(st.integers(1, 10))
    names = [draw(st.sampled_from([f"r{i}", str(i), i])) for i in range(count)]
    if draw(st.integers(0, 9)) == 0:
        names[-1] = names[0]  # a duplicate id
    rows: list[dict[str, Any]] = []
    for index in range(count):
        ids = draw(st.lists(st.integers(0, 9), min_size=1, max_size=4))
        row: dict[str, Any] = {
            "request_id": names[index],
            "input_length": draw(st.integers(1, len(ids) * 8)),
            "output_length": draw(st.integers(0, 9)),
            "hash_ids": ids,
        }
        if draw(st.booleans()):
            row["timestamp"] = draw(st.sampled_from([0, 1.5, 7, 3, -0.0, 0.0]))
        session = draw(st.sampled_from([None, "main", "tool", 4]))
        if session is not None:
            row["session_id"] = session
        ahead = draw(st.integers(0, 9)) == 0
        pool = [str(n) if isinstance(n, int) else n for n in (names if ahead else names[:index])]
        if pool and draw(st.integers(0, 3)):
            wait = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
            if draw(st.integers(0, 19)) == 0:
                wait.append("nobody")
            row["wait_for"] = wait
        for key in ("delay", "tool_wait_ms"):
            if draw(st.booleans()):
                row[key] = draw(st.sampled_from([0, 0.0, 5, 2.5, -0.0]))
        rows.append(row)
    return rows


@SETTINGS
@given(agentic_rows(), st.sampled_from([4, 8]))
def test_generated_agentic_files_read_the_same_both_ways(
    rows: list[dict[str, Any]], block: int
) -> None:
    path = Path(tempfile.mkdtemp(prefix="fast")) / "g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    fast_ids, slow_ids = ContentInterner(next_id=3), ContentInterner(next_id=3)
    try:
        slow = read_agentic_records(str(path), "g", block, slow_ids)
    except TraceFormatError as error:
        with pytest.raises(TraceFormatError) as info:
            loadgen.read_agentic(path, block_size=block, interner=fast_ids)
        assert str(info.value) == str(error)
        assert read_agentic_fast(str(path), path.read_bytes(), "g", block, fast_ids) is None
        return
    taken = read_agentic_fast(str(path), path.read_bytes(), "g", block, fast_ids)
    assert taken == slow
    assert repr(taken) == repr(slow)  # -0.0 and 0.0 delays too
    assert fast_ids.next_id == slow_ids.next_id


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 12)), max_size=40),
    st.integers(0, 50),
)
def test_intern_local_streams_equals_one_scope_per_play(
    stream: list[tuple[int, int]], start: int
) -> None:
    stream.sort(key=lambda item: item[0])  # plays one after another
    taken: set[int] = set()
    stream = [  # a private (negative) placeholder occurs once
        (play, -1 - i if raw < 0 else raw) for i, (play, raw) in enumerate(stream)
    ]
    a = ContentInterner(next_id=start)
    expected: list[int] = []
    fresh = [0] * 4
    scopes = {p: a.local_scope() for p in range(4)}
    for play, raw in stream:
        before = a.next_id
        expected.append(a.private() if raw < 0 else scopes[play].intern(raw))
        fresh[play] += a.next_id - before
        taken.add(play)
    raws = np.array([r for _, r in stream], dtype=np.int64)
    plays = np.array([p for p, _ in stream], dtype=np.int64)
    # all scopes' pairs at once (sorted), and scope by scope (as large scopes are)
    for scope_by_scope_from in (10**9, 0):
        b = ContentInterner(next_id=start)
        with patch.object(_intern, "SCOPE_BY_SCOPE_FROM", scope_by_scope_from):
            got, counts = b.intern_local_streams(raws, plays, 4)
        assert got.tolist() == expected
        assert counts.tolist() == fresh
        assert b.next_id == a.next_id


@SETTINGS
@given(
    st.lists(st.integers(-3, 6), max_size=50),
    st.sampled_from([1, 10**9]),
    st.integers(0, 50),
)
def test_first_seen_numbers_keys_in_order_of_first_appearance(
    keys: list[int], scale: int, start: int
) -> None:
    # scale 10**9 spreads the keys beyond a table the size of the stream: the sorting way.
    spread = [k * scale for k in keys]
    numbers: dict[int, int] = {}
    expected = [numbers.setdefault(k, start + len(numbers)) for k in spread]
    firsts = [i for i, k in enumerate(spread) if spread.index(k) == i]
    out, first = _first_seen(np.array(spread, dtype=np.int64), start)
    assert out.tolist() == expected
    assert first.tolist() == firsts


def test_the_column_builders_equal_the_constructors() -> None:
    assert roots([0.0, None]) == [ArrivalRule(not_before_ms=0.0), ArrivalRule(None)]
    assert after_completions([["x", "y"], ["z"]], [2.0, 0.0]) == [
        ArrivalRule(None, (Dep("x", "completion", 2.0), Dep("y", "completion", 2.0))),
        ArrivalRule(None, (Dep("z", "completion", 0.0),)),
    ]
    with pytest.raises(ValueError, match="different lengths"):
        after_completions([["x"]], [])


@pytest.mark.parametrize("first", [-0.0, 0.0])
def test_signed_zero_timestamps_read_as_record_by_record(tmp_path: Path, first: float) -> None:
    # The origin is the first smallest root timestamp, and rules are shared by equal
    # bits only: -0.0 - 0.0 is -0.0 while -0.0 - -0.0 is 0.0.
    rows: list[dict[str, Any]] = [
        {"timestamp": stamp, "input_length": 8, "output_length": 1, "hash_ids": [index]}
        for index, stamp in enumerate([first, -first, 0, 2.5, -0.0])
    ]
    plain = tmp_path / "m.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    slow = read_records(str(plain), "m", 8, False, ContentInterner(), delta=False)
    assert repr(loadgen.read_mooncake(plain, block_size=8)) == repr(slow)
    for index, row in enumerate(rows):
        row["session_id"] = f"s{index % 2}"
        row["request_id"] = f"r{index}"
    dag = tmp_path / "g.jsonl"
    dag.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    slow = read_records(str(dag), "g", 8, False, ContentInterner(), delta=False)
    assert repr(loadgen.read_mooncake(dag, block_size=8)) == repr(slow)
    slow = read_agentic_records(str(dag), "g", 8, ContentInterner())
    assert repr(loadgen.read_agentic(dag, block_size=8)) == repr(slow)
    assert read_agentic_fast(str(dag), dag.read_bytes(), "g", 8, ContentInterner()) is not None
