"""Hypothesis fuzzing of every reader: a malformed row always gives ``file:line: field: problem``.

Rows are drawn mostly valid with random junk mixed into their fields; a read either
succeeds and keeps every row (nothing skipped silently) or raises ``TraceFormatError``
naming a line of the file.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import loadgen
from loadgen import TraceFormatError

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=5),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the valid value, sometimes junk."""
    return st.one_of(valid, valid, valid, junk)


ids = st.lists(st.integers(0, 40), min_size=1, max_size=6)


@st.composite
def mooncake_row(draw: st.DrawFn) -> dict[str, Any]:
    row: dict[str, Any] = {}
    hash_ids = draw(ids)
    for key, valid in (
        ("timestamp", st.integers(0, 10_000)),
        ("input_length", st.integers(1, 512 * len(hash_ids))),
        ("output_length", st.integers(0, 50)),
        ("hash_ids", st.just(hash_ids)),
        ("session_id", st.sampled_from(["a", "b", 3])),
        ("delay", st.floats(0, 100)),
        ("request_id", st.sampled_from(["A", "B", "C", "D", "E"])),
        ("wait_for", st.lists(st.sampled_from(["A", "B", "C", "D", "Z"]), max_size=2)),
    ):
        if draw(st.booleans()) or key in ("output_length", "hash_ids"):
            row[key] = draw(maybe(valid))
    return row


lines = st.lists(
    st.one_of(
        mooncake_row().map(json.dumps),
        mooncake_row().map(json.dumps),
        st.text(max_size=8).filter(lambda t: "\n" not in t and "\r" not in t),
    ),
    min_size=1,
    max_size=6,
)


def _check(path: Path, error: TraceFormatError, line_count: int) -> None:
    text = str(error)
    match = re.fullmatch(re.escape(str(path)) + r"(?:![^:]+)?:(\d+): (.+?): (.+)", text, re.S)
    assert match is not None, text
    assert 1 <= int(match.group(1)) <= max(line_count, 1)
    assert error.field and error.problem


def _write(text: str, name: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="fuzz"))
    path = folder / name
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    return path


@SETTINGS
@given(lines)
def test_mooncake_reader_never_skips_or_crashes(rows: list[str]) -> None:
    path = _write("\n".join(rows) + "\n", "m.jsonl")
    expected = sum(1 for r in rows if r.strip())
    for read in (loadgen.read_mooncake, loadgen.read_mooncake_delta):
        try:
            workload = read(path)
        except TraceFormatError as error:
            _check(path, error, len(rows))
        else:
            assert len(workload.requests) == expected


@SETTINGS
@given(lines)
def test_agentic_reader_never_skips_or_crashes(rows: list[str]) -> None:
    path = _write("\n".join(rows) + "\n", "a.jsonl")
    try:
        workload = loadgen.read_agentic(path)
    except TraceFormatError as error:
        _check(path, error, len(rows))
    else:
        assert len(workload.requests) == sum(1 for r in rows if r.strip())
        assert sum(len(p.request_indices) for p in workload.plays) == len(workload.requests)


@st.composite
def weka_call(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    if depth < 2 and draw(st.integers(0, 5)) == 0:
        return {
            "t": draw(maybe(st.integers(0, 30))),
            "type": draw(maybe(st.just("subagent"))),
            "agent_id": draw(maybe(st.sampled_from(["a1", "a2", "x/y", "main"]))),
            "status": draw(maybe(st.sampled_from(["completed", "async_launched"]))),
            "requests": draw(st.lists(weka_call(depth + 1), max_size=3)),
        }
    size = draw(st.integers(1, 300))
    return {
        "t": draw(maybe(st.integers(0, 30))),
        "type": draw(maybe(st.sampled_from(["n", "s"]))),
        "model": draw(maybe(st.just("m"))),
        "in": draw(maybe(st.just(size))),
        "out": draw(maybe(st.integers(0, 9))),
        "hash_ids": draw(
            maybe(st.lists(st.integers(0, 9), min_size=size // 64, max_size=size // 64 + 1))
        ),
        "api_time": draw(maybe(st.floats(0, 5))),
    }


@st.composite
def weka_play(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": draw(maybe(st.sampled_from(["p1", "p2", "p3"]))),
        "block_size": draw(maybe(st.just(64))),
        "hash_id_scope": draw(maybe(st.just("local"))),
        "models": draw(maybe(st.just(["m"]))),
        "requests": draw(maybe(st.lists(weka_call(), max_size=5))),
    }


def _calls(value: Any) -> int:
    if not isinstance(value, list):
        return 0
    total = 0
    for entry in value:
        if isinstance(entry, dict) and entry.get("type") == "subagent":
            total += _calls(entry.get("requests"))
        else:
            total += 1
    return total


@SETTINGS
@given(st.lists(weka_play(), min_size=1, max_size=3), st.booleans())
def test_weka_reader_never_skips_or_crashes(plays: list[dict[str, Any]], pretty: bool) -> None:
    text = "".join(json.dumps(p) + "\n" for p in plays)
    path = _write(text, "w.jsonl")
    try:
        workload = loadgen.read_weka(path)
    except TraceFormatError as error:
        _check(path, error, len(plays))
    else:
        assert len(workload.requests) == sum(_calls(p["requests"]) for p in plays)
    single = _write(json.dumps(plays[0], indent=2 if pretty else None), "w.json")
    try:
        loadgen.read_weka(single)
    except TraceFormatError as error:
        _check(single, error, len(json.dumps(plays[0], indent=2 if pretty else None).split("\n")))


cell = st.one_of(
    st.integers(-2, 5000).map(str),
    st.floats(allow_nan=True).map(str),
    st.text(max_size=4).filter(lambda t: "\n" not in t and "\r" not in t),
    st.sampled_from(["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:50", "2023-02-30 1:1:1"]),
)


@SETTINGS
@given(st.lists(st.lists(cell, min_size=2, max_size=7), min_size=0, max_size=5))
def test_csv_readers_never_skip_or_crash(rows: list[list[str]]) -> None:
    headers = {
        loadgen.read_azure: "TIMESTAMP,ContextTokens,GeneratedTokens",
        loadgen.read_vidur: "arrived_at,num_prefill_tokens,num_decode_tokens",
        loadgen.read_burstgpt: (
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
        ),
    }
    for read, header in headers.items():
        body = "".join(",".join(r) + "\n" for r in rows)
        path = _write(header + "\n" + body, "c.csv")
        try:
            workload = read(path)
        except TraceFormatError as error:
            _check(path, error, len(rows) + 1)
        else:
            kept = len(workload.requests) + workload.tolerated.dropped_failures
            assert kept == sum(1 for r in rows if any(c.strip() for c in r))
