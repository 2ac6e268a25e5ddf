"""The agentic reader (REFERENCE-workloads §2.3) and worked example §8 (b)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loadgen
from loadgen import ArrivalRule, Dep, Lineage, TraceFormatError

from .conftest import WriteLines


def _row(rid: str, session: str | None = None, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"request_id": rid, "output_length": 5, "hash_ids": [1, 2]}
    if session is not None:
        row["session_id"] = session
    row.update(extra)
    return row


EXAMPLE_B = (
    _row("A", "main", timestamp=2000),
    _row("B", "main", wait_for=["A"], delay=100),
    _row("C", "tool", wait_for=["A"], delay=10, tool_wait_ms=40),
    _row("D", "main", wait_for=["B", "C"], delay=5, tool_wait_ms=15),
    _row("E", "other", timestamp=2100),
)


def _error(path: Path) -> str:
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_agentic(path)
    return str(info.value).removeprefix(f"{path.parent}/")


def test_worked_example_b_plays_and_arrivals(write_lines: WriteLines) -> None:
    workload = loadgen.read_agentic(write_lines("ex.jsonl", *EXAMPLE_B))
    r = {x.id: x for x in workload.requests}
    assert list(r) == ["ex:A/A", "ex:A/B", "ex:A/C", "ex:A/D", "ex:E/E"]
    assert [p.id for p in workload.plays] == ["ex:A", "ex:E"]
    assert workload.plays[0].request_indices == (0, 1, 2, 3)
    assert r["ex:A/A"].arrival == ArrivalRule(not_before_ms=0.0)
    assert r["ex:E/E"].arrival == ArrivalRule(not_before_ms=100.0)
    assert r["ex:A/B"].arrival.after == (Dep("ex:A/A", "completion", 100.0),)
    assert r["ex:A/C"].arrival.after == (Dep("ex:A/A", "completion", 50.0),)
    assert r["ex:A/D"].arrival.after == (
        Dep("ex:A/B", "completion", 20.0),
        Dep("ex:A/C", "completion", 20.0),
    )


def test_worked_example_b_lineage_spawn_is_not_a_join(write_lines: WriteLines) -> None:
    r = {x.id: x for x in loadgen.read_agentic(write_lines("ex.jsonl", *EXAMPLE_B)).requests}
    assert r["ex:A/C"].identity.conversation_id == "ex:A/tool"
    assert r["ex:A/C"].identity.lineage == Lineage("ex:A/main", "ex:A/main")
    assert r["ex:A/D"].identity.lineage == Lineage("ex:A/main")
    assert r["ex:E/E"].identity.lineage == Lineage("ex:E/other")
    assert r["ex:A/D"].identity.turn_index == 2


def test_each_play_is_its_own_content_scope(write_lines: WriteLines) -> None:
    workload = loadgen.read_agentic(write_lines("ex.jsonl", *EXAMPLE_B))
    ids = {r.id: r.hash_ids.tolist() for r in workload.requests}
    assert ids["ex:A/A"] == ids["ex:A/D"] == [0, 1]
    assert ids["ex:E/E"] == [2, 3]


def test_dependent_timestamps_are_ignored_and_counted(write_lines: WriteLines) -> None:
    path = write_lines("t.jsonl", _row("A", timestamp=0), _row("B", wait_for=["A"], timestamp=9))
    workload = loadgen.read_agentic(path)
    assert workload.tolerated.ignored_timestamps == 1
    assert workload.requests[1].identity.conversation_id == "t:A/main"


def test_unknown_dependency_is_named(write_lines: WriteLines) -> None:
    rows = list(EXAMPLE_B)
    rows[1] = _row("B", "main", wait_for=["Z"])
    assert _error(write_lines("ex.jsonl", *rows)) == "ex.jsonl:2: wait_for: unknown request_id 'Z'"


def test_cycle_is_named_from_the_smallest_unresolved_line(write_lines: WriteLines) -> None:
    rows = list(EXAMPLE_B)
    rows[1] = _row("B", "main", wait_for=["A", "D"])
    assert _error(write_lines("ex.jsonl", *rows)) == (
        "ex.jsonl:2: wait_for: dependency cycle B -> D -> B"
    )


def test_cycle_reached_from_outside_is_reported_at_its_first_id(write_lines: WriteLines) -> None:
    path = write_lines(
        "c.jsonl",
        _row("X", wait_for=["Y"]),
        _row("Y", wait_for=["Z"]),
        _row("Z", wait_for=["Y"]),
    )
    assert _error(path) == "c.jsonl:2: wait_for: dependency cycle Y -> Z -> Y"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ((_row("A"), _row("A")), "t.jsonl:2: request_id: duplicate of line 1 ('A')"),
        ((_row("A", wait_for=["A"]),), "t.jsonl:1: wait_for: request 'A' depends on itself"),
        ((_row("A#1"),), "t.jsonl:1: request_id: '#' is reserved for play instances, got \"A#1\""),
        (
            (_row("A", "s#1"),),
            "t.jsonl:1: session_id: '#' is reserved for play instances, got \"s#1\"",
        ),
        ((_row("A", wait_for="B"),), 't.jsonl:1: wait_for: must be a list of request ids, got "B"'),
        ((_row("A", tool_wait_ms=-1),), "t.jsonl:1: tool_wait_ms: must be a number >= 0, got -1"),
        (({"output_length": 1, "hash_ids": [1]},), "t.jsonl:1: request_id: required"),
    ],
)
def test_bad_rows_raise_file_line_field_problem(
    write_lines: WriteLines, rows: tuple[object, ...], message: str
) -> None:
    assert _error(write_lines("t.jsonl", *rows)) == message
