"""The CSV readers: azure, burstgpt, vidur (REFERENCE-workloads §2.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

import loadgen
from loadgen import TraceFormatError

from .conftest import AZURE


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_azure_timestamps_are_100ns_ticks_from_the_first(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "az.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 23:59:59.9999999,100,5\n"
        "2023-11-17 00:00:00.5,65,0\n",
    )
    workload = loadgen.read_azure(path)
    assert [r.arrival.not_before_ms for r in workload.requests] == [0.0, 500.0001]
    assert [r.id for r in workload.requests] == ["az:2", "az:3"]
    assert [r.hash_ids.tolist() for r in workload.requests] == [[0, 1], [2, 3]]
    assert workload.requests[1].output_length == 0


def test_shared_azure_first_rows_by_hand() -> None:
    workload = loadgen.read_azure(AZURE)
    first, second = workload.requests[:2]
    assert (first.input_length, first.output_length, first.arrival.not_before_ms) == (374, 44, 0.0)
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.3145790 s.
    assert second.arrival.not_before_ms == 4314.579
    assert first.hash_ids.size == 6  # ceil(374 / 64)


def test_burstgpt_drops_and_counts_failures_by_default(tmp_path: Path) -> None:
    text = (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,10,3,13,Conversation log\n"
        "6.5,GPT-4,20,0,20,Conversation log\n"
        "7,GPT-4,30,4,34,API log\n"
    )
    path = _write(tmp_path, "b.csv", text)
    dropped = loadgen.read_burstgpt(path)
    assert [r.id for r in dropped.requests] == ["b:2", "b:4"]
    assert [r.arrival.not_before_ms for r in dropped.requests] == [0.0, 2000.0]
    assert dropped.tolerated.dropped_failures == 1
    kept = loadgen.read_burstgpt(path, failures="prefill_only")
    assert [r.output_length for r in kept.requests] == [3, 0, 4]
    filtered = loadgen.read_burstgpt(path, models={"GPT-4"}, log_types={"API log"})
    assert [r.id for r in filtered.requests] == ["b:4"]
    assert filtered.tolerated.filtered_rows == 2


def test_vidur_seconds_become_ms(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "v.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens,extra\n1.5,10,2,x\n2.25,3,1,y\n",
    )
    workload = loadgen.read_vidur(path)
    assert [r.arrival.not_before_ms for r in workload.requests] == [0.0, 750.0]
    assert workload.format == "vidur"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "TIMESTAMP,ContextTokens\n",
            "1: -: header lacks GeneratedTokens; expected TIMESTAMP,ContextTokens,GeneratedTokens",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00,0,1\n",
            "2: ContextTokens: must be an integer >= 1, got '0'",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00,1.0,1\n",
            "2: ContextTokens: must be an integer >= 1, got '1.0'",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T10:00:00,1,1\n",
            "2: TIMESTAMP: must be YYYY-MM-DD HH:MM:SS[.fraction], got '2023-11-16T10:00:00'",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-30 10:00:00,1,1\n",
            "2: TIMESTAMP: must be YYYY-MM-DD HH:MM:SS[.fraction], got '2023-02-30 10:00:00'",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\n2023-11-16 10:00:00,1\n",
            "3: -: expected 3 columns, got 2",
        ),
        ("", "1: -: empty file; expected a CSV header"),
    ],
)
def test_bad_azure_rows(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, "a.csv", text)
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_azure(path)
    assert str(info.value) == f"{path}:{message}"


def test_bad_vidur_number(tmp_path: Path) -> None:
    path = _write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\nnan,1,1\n")
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_vidur(path)
    assert str(info.value) == f"{path}:2: arrived_at: must be a number >= 0, got 'nan'"


def test_bad_failures_option(tmp_path: Path) -> None:
    path = _write(tmp_path, "b.csv", "x\n")
    with pytest.raises(loadgen.WorkloadConfigError) as info:
        loadgen.read_burstgpt(path, failures="keep")  # type: ignore[arg-type]
    assert str(info.value) == "failures: must be 'drop' or 'prefill_only', got 'keep'"
