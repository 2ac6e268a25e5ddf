"""The mooncake reader (REFERENCE-workloads §2.1) and its worked example §8 (a)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import loadgen
from loadgen import ArrivalRule, Dep, Identity, TraceFormatError

from .conftest import MOONCAKE, WriteLines

EXAMPLE_A = (
    '{"session_id":"s1","timestamp":1000,"input_length":600,"output_length":3,"hash_ids":[1,2]}',
    '{"session_id":"s1","delay":500,"input_length":900,"output_length":2,"hash_ids":[1,2]}',
    '{"timestamp":1200,"input_length":300,"output_length":4,"hash_ids":[7]}',
)


def _error(path: Path, **options: object) -> str:
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_mooncake(path, **options)  # type: ignore[arg-type]
    text = str(info.value)
    assert text.startswith(f"{path}:")
    return text.removeprefix(f"{path.parent}/")


def test_worked_example_a_records(write_lines: WriteLines) -> None:
    workload = loadgen.read_mooncake(write_lines("ex.jsonl", *EXAMPLE_A))
    first, second, third = workload.requests
    assert [r.id for r in workload.requests] == ["ex:1", "ex:2", "ex:3"]
    assert first.arrival == ArrivalRule(not_before_ms=0.0)
    assert first.identity == Identity(conversation_id="ex/s1", turn_index=0)
    assert second.arrival == ArrivalRule(
        not_before_ms=None, after=(Dep("ex:1", "completion", 500.0),)
    )
    assert second.identity == Identity(conversation_id="ex/s1", turn_index=1)
    assert third.arrival == ArrivalRule(not_before_ms=200.0)
    assert third.identity == Identity()
    assert workload.format == "mooncake"
    assert workload.source == "ex"


def test_worked_example_a_content_ids_are_interned_in_first_seen_order(
    write_lines: WriteLines,
) -> None:
    workload = loadgen.read_mooncake(write_lines("ex.jsonl", *EXAMPLE_A))
    first, second, third = workload.requests
    # ex:1 has 600 tokens: 2 ids; ex:2 900 tokens: 2 ids; ex:3 300 tokens: 1 id.
    assert first.hash_ids.tolist() == [0, 1]
    assert second.hash_ids.tolist() == [0, 1]
    assert third.hash_ids.tolist() == [2]
    assert first.hash_ids.dtype == np.int64


def test_a_timestamp_gap_becomes_think_time_after_completion(write_lines: WriteLines) -> None:
    rows = list(EXAMPLE_A)
    rows[1] = rows[1].replace('"delay":500', '"timestamp":1300')
    second = loadgen.read_mooncake(write_lines("ex.jsonl", *rows)).requests[1]
    assert second.arrival.after == (Dep("ex:1", "completion", 300.0),)


def test_surplus_ids_are_dropped_and_counted(write_lines: WriteLines) -> None:
    path = write_lines(
        "t.jsonl", {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [5, 6, 7]}
    )
    workload = loadgen.read_mooncake(path)
    assert workload.requests[0].hash_ids.tolist() == [0]
    assert workload.tolerated.surplus_ids == 2


def test_full_blocks_only_ids_get_one_private_tail_id(write_lines: WriteLines) -> None:
    path = write_lines(
        "t.jsonl",
        {"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [9]},
        {"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [9]},
    )
    workload = loadgen.read_mooncake(path)
    assert [r.hash_ids.tolist() for r in workload.requests] == [[0, 1], [0, 2]]
    assert workload.tolerated.private_tail_ids == 2


def test_input_length_defaults_to_whole_blocks(write_lines: WriteLines) -> None:
    path = write_lines("t.jsonl", {"timestamp": 3, "output_tokens": 1, "hash_ids": [1, 2]})
    request = loadgen.read_mooncake(path).requests[0]
    assert request.input_length == 1024
    assert request.arrival.not_before_ms == 0.0


def test_integer_session_ids_become_strings(write_lines: WriteLines) -> None:
    path = write_lines(
        "t.jsonl",
        {"session_id": 7, "timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]},
    )
    assert loadgen.read_mooncake(path).requests[0].identity.conversation_id == "t/7"


def test_source_label_overrides_the_file_name(write_lines: WriteLines) -> None:
    path = write_lines(
        "t.v2.jsonl", {"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}
    )
    assert loadgen.read_mooncake(path).requests[0].id == "t:1"
    assert loadgen.read_mooncake(path, source="mine").requests[0].id == "mine:1"


def test_a_bad_source_label_is_rejected(write_lines: WriteLines) -> None:
    path = write_lines("t.jsonl", {"timestamp": 0, "output_length": 1, "hash_ids": [1]})
    with pytest.raises(loadgen.WorkloadConfigError) as info:
        loadgen.read_mooncake(path, source="a b")
    assert str(info.value) == "source: 'a b' must match [A-Za-z0-9_.-]+"


def test_blank_lines_and_a_bom_are_skipped_and_lines_still_count(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    row = json.dumps({"timestamp": 0, "output_length": 1, "hash_ids": [1]})
    path.write_bytes(b"\xef\xbb\xbf" + row.encode() + b"\n\n  \n" + row.encode() + b"\n")
    assert [r.id for r in loadgen.read_mooncake(path).requests] == ["t:1", "t:4"]


def test_one_interner_serves_two_inputs_of_a_run(write_lines: WriteLines) -> None:
    a = write_lines("a.jsonl", {"timestamp": 0, "output_length": 1, "hash_ids": [1]})
    b = write_lines("b.jsonl", {"timestamp": 0, "output_length": 1, "hash_ids": [1]})
    interner = loadgen.ContentInterner()
    ra = loadgen.read_mooncake(a, interner=interner).requests[0]
    rb = loadgen.read_mooncake(b, interner=interner).requests[0]
    assert (ra.hash_ids.tolist(), rb.hash_ids.tolist()) == ([0], [1])


def test_reading_twice_gives_equal_workloads(write_lines: WriteLines) -> None:
    path = write_lines("ex.jsonl", *EXAMPLE_A)
    assert loadgen.read_mooncake(path) == loadgen.read_mooncake(path)


def test_closed_loop_mode_makes_timestamps_optional(write_lines: WriteLines) -> None:
    path = write_lines("t.jsonl", {"output_length": 1, "hash_ids": [1]})
    request = loadgen.read_mooncake(path, closed_loop=True).requests[0]
    assert request.arrival == ArrivalRule(not_before_ms=None)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"output_length": 1, "hash_ids": [1]},
            "t.jsonl:1: timestamp: required on a standalone request",
        ),
        (
            {"session_id": "s", "output_length": 1, "hash_ids": [1]},
            "t.jsonl:1: timestamp: required on the first turn of a session",
        ),
        (
            {"timestamp": 0, "hash_ids": [1]},
            "t.jsonl:1: output_length: required",
        ),
        (
            {"timestamp": 0, "output_length": 1.0, "hash_ids": [1]},
            "t.jsonl:1: output_length: must be an integer >= 0, got 1.0",
        ),
        (
            {"timestamp": 0, "output_length": True, "hash_ids": [1]},
            "t.jsonl:1: output_length: must be an integer >= 0, got true",
        ),
        (
            {"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]},
            "t.jsonl:1: input_length: must be an integer >= 1, got 0",
        ),
        (
            {"timestamp": -1, "output_length": 1, "hash_ids": [1]},
            "t.jsonl:1: timestamp: must be a number >= 0, got -1",
        ),
        (
            {"timestamp": 0, "output_length": 1, "hash_ids": [1, -2]},
            "t.jsonl:1: hash_ids[1]: must be an integer >= 0, got -2",
        ),
        (
            {"timestamp": 0, "output_length": 1, "hash_ids": [1, True]},
            "t.jsonl:1: hash_ids[1]: must be an integer >= 0, got true",
        ),
        (
            {"timestamp": 0, "output_length": 1, "hash_ids": "1"},
            't.jsonl:1: hash_ids: must be a list of integers, got "1"',
        ),
        (
            {"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1]},
            "t.jsonl:1: hash_ids: 1 ids cover at most 512 tokens at block_size 512; "
            "input_length 1100 needs at least 2",
        ),
        (
            {"timestamp": 0, "delay": 1, "delay_ms": 1, "output_length": 1, "hash_ids": [1]},
            "t.jsonl:1: delay: delay and delay_ms are both set",
        ),
        (
            {"session_id": "s", "timestamp": 0, "delay": 5, "output_length": 1, "hash_ids": [1]},
            "t.jsonl:1: delay: must be absent or 0 on the first turn of session 's'",
        ),
        (
            {"session_id": "", "timestamp": 0, "output_length": 1, "hash_ids": [1]},
            't.jsonl:1: session_id: must be a non-empty string or an integer, got ""',
        ),
        ("[1, 2]", "t.jsonl:1: -: expected a JSON object, got an array"),
        (
            '{"timestamp": 0,',
            "t.jsonl:1: -: invalid JSON (Expecting property name enclosed in double quotes "
            "at column 17)",
        ),
        (
            '{"timestamp": NaN, "output_length": 1, "hash_ids": [1]}',
            "t.jsonl:1: timestamp: must be a finite number, got NaN",
        ),
    ],
)
def test_bad_rows_raise_file_line_field_problem(
    write_lines: WriteLines, row: object, message: str
) -> None:
    assert _error(write_lines("t.jsonl", row)) == message


def test_later_turn_going_back_in_time_is_rejected(write_lines: WriteLines) -> None:
    path = write_lines(
        "t.jsonl",
        {"session_id": "s", "timestamp": 100, "output_length": 1, "hash_ids": [1]},
        {"session_id": "s", "timestamp": 40, "output_length": 1, "hash_ids": [1]},
    )
    assert _error(path) == (
        "t.jsonl:2: timestamp: goes back 60 ms from the previous turn of session 's'"
    )


def test_later_turn_timestamp_without_earlier_timestamp_is_rejected(
    write_lines: WriteLines,
) -> None:
    path = write_lines(
        "t.jsonl",
        {"session_id": "s", "output_length": 1, "hash_ids": [1]},
        {"session_id": "s", "timestamp": 40, "output_length": 1, "hash_ids": [1]},
    )
    assert _error(path, closed_loop=True) == (
        "t.jsonl:2: timestamp: no earlier timestamp in session 's'"
    )


def test_invalid_utf8_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"timestamp": 0}\n{"a": "\xff"}\n')
    # The first row is bad too (no output_length) and comes first in file order.
    assert _error(path) == "t.jsonl:1: output_length: required"
    path.write_bytes(b'{"a": "\xff"}\n')
    assert _error(path) == "t.jsonl:1: -: invalid UTF-8 at byte 7"


def test_shared_mooncake_first_rows_by_hand() -> None:
    workload = loadgen.read_mooncake(MOONCAKE)
    first = workload.requests[0]
    assert (first.id, first.input_length, first.output_length) == (
        "conversation_trace:1",
        6758,
        500,
    )
    assert first.hash_ids.tolist() == list(range(14))
    second = workload.requests[1]
    assert second.hash_ids.tolist() == [0, *range(14, 28)]
    assert len(workload) == 12031
    assert workload.requests[-1].arrival.not_before_ms == 3536999.0
    assert workload.tolerated == loadgen.Tolerated()
