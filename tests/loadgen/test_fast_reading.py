"""The column-wise readers equal the record-by-record readers (differential tests).

``read_mooncake`` / ``read_mooncake_delta`` and the CSV readers try a column-wise path
first (``bench/read.py`` measures it) and fall back to reading record by record; both must
give the same workload, and the same interner state after it, on any file.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadgen
from loadgen import ContentInterner, Request, TraceFormatError, _csvformats
from loadgen._csvfast import read_csv_fast
from loadgen._intern import Run, reblock
from loadgen._mooncake import read_records
from loadgen._mooncake_fast import read_mooncake_fast
from loadgen._request import requests_from_columns

from .conftest import AZURE, MOONCAKE

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _records(path: Path, *, delta: bool, block: int = 512, ids: ContentInterner | None = None):
    src = path.name.split(".", 1)[0]
    return read_records(str(path), src, block, False, ids or ContentInterner(), delta=delta)


def _same_interner(a: ContentInterner, b: ContentInterner, scope: str) -> None:
    assert a.next_id == b.next_id
    assert a.scope_size(scope) == b.scope_size(scope)
    assert a._table(scope) == b._table(scope)


@pytest.mark.parametrize("delta", [False, True])
def test_the_shared_mooncake_trace_reads_the_same_both_ways(delta: bool) -> None:
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    read = loadgen.read_mooncake_delta if delta else loadgen.read_mooncake
    fast = read(MOONCAKE, interner=fast_ids)
    slow = _records(MOONCAKE, delta=delta, ids=slow_ids)
    assert fast == slow
    assert len(fast) == 12_031
    _same_interner(fast_ids, slow_ids, "global:conversation_trace")


@st.composite
def mooncake_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid rows: sessions or not, delays or timestamp gaps, tails and surplus ids."""
    rows: list[dict[str, Any]] = []
    sessions = draw(st.booleans())
    stamp = 0.0
    seen: set[str] = set()
    for _ in range(draw(st.integers(1, 12))):
        ids = draw(st.lists(st.integers(0, 30), min_size=1, max_size=5))
        full = len(ids) * 8
        row: dict[str, Any] = {
            "input_length": draw(st.integers(max(1, full - 8 - 7), full + 8)),
            "output_length": draw(st.integers(0, 20)),
            "hash_ids": ids,
        }
        row["input_length"] = max(1, min(row["input_length"], full + 7))  # tails too
        session = draw(st.sampled_from(["a", "b", 7])) if sessions else None
        stamp += draw(st.sampled_from([0.0, 1.0, 2.5]))
        if session is None or str(session) not in seen:
            row["timestamp"] = draw(st.sampled_from([stamp, int(stamp)]))
        elif draw(st.booleans()):
            row["delay"] = draw(st.sampled_from([0, 1.5, 100]))
        elif draw(st.booleans()):
            row["timestamp"] = stamp + 100
        if session is not None:
            row["session_id"] = session
            seen.add(str(session))
        rows.append(row)
    return rows


@SETTINGS
@given(mooncake_rows(), st.booleans(), st.sampled_from([8, 16]))
def test_generated_mooncake_files_read_the_same_both_ways(
    rows: list[dict[str, Any]], delta: bool, block: int
) -> None:
    path = Path(tempfile.mkdtemp(prefix="fast")) / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    read = loadgen.read_mooncake_delta if delta else loadgen.read_mooncake
    try:
        slow = _records(path, delta=delta, block=block, ids=slow_ids)
    except TraceFormatError as error:
        with pytest.raises(TraceFormatError) as info:
            read(path, block_size=block, interner=fast_ids)
        assert str(info.value) == str(error)
        return
    assert read(path, block_size=block, interner=fast_ids) == slow
    _same_interner(fast_ids, slow_ids, "global:m")
    # The column-wise path took the file: it declines only what it cannot take for
    # certain valid, and these rows are valid.
    taken = read_mooncake_fast(
        str(path), path.read_bytes(), "m", block, False, ContentInterner(), delta=delta
    )
    assert taken is not None


def test_a_shared_interner_continues_across_fast_reads(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [5, 9]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    fast_ids, slow_ids = ContentInterner(), ContentInterner()
    slow_ids.intern("global:m", 9)
    fast_ids.intern("global:m", 9)
    first = loadgen.read_mooncake(path, block_size=8, interner=fast_ids)
    again = loadgen.read_mooncake(path, block_size=8, interner=fast_ids)
    assert first == _records(path, delta=False, block=8, ids=slow_ids)
    assert again == _records(path, delta=False, block=8, ids=slow_ids)
    assert list(again.requests[0].hash_ids) == [1, 0]
    _same_interner(fast_ids, slow_ids, "global:m")


@SETTINGS
@given(
    st.lists(st.one_of(st.integers(0, 50), st.integers(-5, -1)), max_size=60, unique=False),
    st.lists(st.integers(0, 50), max_size=10),
)
def test_intern_stream_equals_interning_one_by_one(stream: list[int], known: list[int]) -> None:
    # Negative values are private placeholders and must each occur once.
    seen: set[int] = set()
    stream = [v for v in stream if v >= 0 or not (v in seen or seen.add(v))]  # type: ignore[func-returns-value]
    a, b = ContentInterner(), ContentInterner()
    a.intern_many("s", known)
    b.intern_many("s", known)
    expected = [a.private() if v < 0 else a.intern("s", v) for v in stream]
    got = b.intern_stream("s", np.array(stream, dtype=np.int64))
    assert got.tolist() == expected
    assert b.next_id == a.next_id
    assert b.intern("s", 1000) == a.intern("s", 1000)
    assert b._table("s") == a._table("s")


def test_requests_from_columns_equals_the_constructor() -> None:
    ids = np.arange(5, dtype=np.int64)
    ids.flags.writeable = False
    arrival = loadgen.ArrivalRule(not_before_ms=3.0)
    identity = loadgen.Identity(conversation_id="c", turn_index=1)
    built = requests_from_columns(["r:1"], [9], [2], 4, [ids[:3]], [arrival], [identity])
    expected = Request(
        id="r:1",
        input_length=9,
        output_length=2,
        block_size=4,
        hash_ids=[0, 1, 2],
        arrival=arrival,
        identity=identity,
    )
    assert built == (expected,)
    assert {f: getattr(built[0], f) is not None for f in ("model", "recorded_service_ms")} == {
        "model": False,
        "recorded_service_ms": False,
    }


# --- CSV --------------------------------------------------------------------------------


def _row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_csvformats, "read_csv_fast", lambda *args, **kwargs: None)


def test_the_shared_azure_trace_reads_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = loadgen.read_azure(AZURE)
    _row_by_row(monkeypatch)
    assert loadgen.read_azure(AZURE) == fast
    assert len(fast) == 19_366


stamp = st.builds(
    "{:04d}-{:02d}-{:02d} {:02d}:{:02d}:{:02d}{}".format,
    st.sampled_from([1970, 2023, 2024]),
    st.integers(1, 12),
    st.integers(1, 28),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.sampled_from(["", ".5", ".6805900", ".1234567"]),
)


@SETTINGS
@given(
    st.lists(st.tuples(stamp, st.integers(1, 5000), st.integers(0, 500)), min_size=1, max_size=8),
    st.sampled_from(["\n", "\r\n"]),
)
def test_generated_azure_files_read_the_same_both_ways(
    rows: list[tuple[str, int, int]], newline: str
) -> None:
    width = {len(r[0]) for r in rows}
    path = Path(tempfile.mkdtemp(prefix="fast")) / "a.csv"
    body = "".join(f"{t},{p},{o}{newline}" for t, p, o in rows)
    path.write_bytes(f"TIMESTAMP,ContextTokens,GeneratedTokens{newline}{body}".encode())
    fast = loadgen.read_azure(path)
    taken = read_csv_fast("azure", path.read_bytes(), "a", 64, ContentInterner())
    assert (taken is None) == (len(width) > 1)
    with pytest.MonkeyPatch.context() as patch:
        _row_by_row(patch)
        assert loadgen.read_azure(path) == fast
    assert len(fast) == len(rows) and width  # (mixed widths go row by row: still equal)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["0", "1.5", "2", "3.25e2", ".5", "7."]),
            st.sampled_from(["ChatGPT", "GPT-4"]),
            st.integers(1, 3000),
            st.integers(0, 300),
            st.sampled_from(["Conversation log", "API log"]),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["drop", "prefill_only"]),
    st.sampled_from([None, ["ChatGPT"]]),
    st.sampled_from([None, ["API log"]]),
)
def test_generated_burstgpt_files_read_the_same_both_ways(
    rows: list[tuple[str, str, int, int, str]],
    failures: str,
    models: list[str] | None,
    log_types: list[str] | None,
) -> None:
    path = Path(tempfile.mkdtemp(prefix="fast")) / "b.csv"
    header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    body = "".join(f"{t},{m},{p},{o},{p + o},{k}\n" for t, m, p, o, k in rows)
    path.write_text(header + body, encoding="utf-8")
    options: dict[str, Any] = {"failures": failures, "models": models, "log_types": log_types}

    def read() -> object:
        try:
            return loadgen.read_burstgpt(path, **options)
        except TraceFormatError as error:
            return str(error)

    fast = read()
    with pytest.MonkeyPatch.context() as patch:
        _row_by_row(patch)
        assert read() == fast


runs = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 40), st.booleans()), min_size=1, max_size=12
)


@SETTINGS
@given(runs, st.integers(1, 12), st.sampled_from([4, 8, 16]))
def test_reblock_after_known_windows_equals_reblocking_everything(
    spec: list[tuple[int, int, bool]], cut: int, block: int
) -> None:
    pieces = [
        Run(key, tokens, key if whole and tokens == block else None)
        for key, tokens, whole in spec
        if tokens > 0
    ]
    if not pieces:
        return
    prefix = pieces[: min(cut, len(pieces))]
    tokens = sum(r.tokens for r in prefix)
    a, b = ContentInterner(next_id=100), ContentInterner(next_id=100)
    a_first = reblock(prefix, block, a, "s")
    b_first = reblock(prefix, block, b, "s")
    everything = reblock(pieces, block, a, "s")
    again = reblock(pieces, block, b, "s", known=b_first[: tokens // block])
    assert a_first.tolist() == b_first.tolist()
    assert again.tolist() == everything.tolist()
    assert a.next_id == b.next_id
