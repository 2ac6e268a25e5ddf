"""The mooncake-delta reader (REFERENCE-workloads §2.2) and re-blocking (§1.4.4)."""

from __future__ import annotations

import loadgen

from .conftest import WriteLines


def _rows() -> tuple[dict[str, object], ...]:
    return (
        {
            "session_id": "s",
            "timestamp": 0,
            "input_length": 128,
            "output_length": 70,
            "hash_ids": [10, 11],
        },
        {
            "session_id": "s",
            "delay": 5,
            "input_length": 100,
            "output_length": 5,
            "hash_ids": [12, 13],
        },
        {"session_id": "s", "delay": 5, "input_length": 64, "output_length": 1, "hash_ids": [14]},
    )


def test_prompts_grow_by_previous_output_and_delta(write_lines: WriteLines) -> None:
    workload = loadgen.read_mooncake_delta(write_lines("d.jsonl", *_rows()), block_size=64)
    assert [r.input_length for r in workload.requests] == [128, 298, 367]
    assert [r.hash_ids.size for r in workload.requests] == [2, 5, 6]
    assert workload.format == "mooncake-delta"


def test_turn_reuses_the_previous_prompt_but_never_its_output(write_lines: WriteLines) -> None:
    first, second, third = loadgen.read_mooncake_delta(
        write_lines("d.jsonl", *_rows()), block_size=64
    ).requests
    # Turn 1 keeps turn 0's two whole blocks (128 tokens); window 2 is output only.
    assert second.hash_ids[:2].tolist() == first.hash_ids.tolist()
    assert second.hash_ids[2] not in first.hash_ids
    # Turn 2 repeats turn 1's four full windows, then its partial window differs.
    assert third.hash_ids[:4].tolist() == second.hash_ids[:4].tolist()
    assert third.hash_ids[4] != second.hash_ids[4]


def test_identical_sessions_share_ids_up_to_the_first_output(write_lines: WriteLines) -> None:
    rows = list(_rows())
    other = [dict(r, session_id="t") for r in rows]
    workload = loadgen.read_mooncake_delta(write_lines("d.jsonl", *rows, *other), block_size=64)
    ids = [r.hash_ids.tolist() for r in workload.requests]
    assert ids[0] == ids[3]
    assert ids[1][:2] == ids[4][:2]
    # Each request's output is its own content: windows holding it never match.
    assert ids[1][2] != ids[4][2]
    assert ids[1][3] != ids[4][3]
