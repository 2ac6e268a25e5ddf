"""``read_trace`` and ``format="auto"`` (REFERENCE-workloads §2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loadgen

from .conftest import AZURE, MOONCAKE, WEKA

CALL = {"t": 0, "type": "n", "model": "m", "in": 64, "out": 1, "hash_ids": [1]}
PLAY = {"id": "p", "block_size": 64, "hash_id_scope": "local", "requests": [CALL]}


@pytest.mark.parametrize(
    ("name", "text", "note"),
    [
        (
            "m.jsonl",
            '{"timestamp": 0, "output_length": 1, "hash_ids": [1]}\n',
            "format auto: mooncake (no requests and no wait_for)",
        ),
        (
            "a.jsonl",
            '{"request_id": "A", "output_length": 1, "hash_ids": [1]}\n'
            '{"request_id": "B", "wait_for": ["A"], "output_length": 1, "hash_ids": [1]}\n',
            "format auto: agentic (line 2 has wait_for)",
        ),
        (
            "w.jsonl",
            json.dumps(PLAY) + "\n",
            "format auto: weka (first object has requests)",
        ),
        (
            "w.json",
            json.dumps(PLAY),
            "format auto: weka (a .json file)",
        ),
        (
            "v.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n1,1,1\n",
            "format auto: vidur (CSV header has arrived_at,num_prefill_tokens,num_decode_tokens)",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,m,1,1,2,x\n",
            "format auto: burstgpt (CSV header has Timestamp,Model,Request tokens,"
            "Response tokens,Total tokens,Log Type)",
        ),
    ],
)
def test_auto_detection_reports_its_choice(tmp_path: Path, name: str, text: str, note: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    workload = loadgen.read_trace(path)
    assert workload.format_note == note


def test_shared_files_are_detected() -> None:
    assert loadgen.detect_format(MOONCAKE).name == "mooncake"
    assert loadgen.detect_format(AZURE).name == "azure"
    assert loadgen.detect_format(WEKA).note == "format auto: weka (a .tar archive)"


def test_a_directory_is_weka(tmp_path: Path) -> None:
    assert loadgen.detect_format(tmp_path).note == "format auto: weka (a directory)"


def test_unknown_csv_header_lists_the_three(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n", encoding="utf-8")
    with pytest.raises(loadgen.TraceFormatError) as info:
        loadgen.read_trace(path)
    assert str(info.value) == (
        f"{path}:1: -: unknown CSV header; expected one of: "
        "TIMESTAMP,ContextTokens,GeneratedTokens | "
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type | "
        "arrived_at,num_prefill_tokens,num_decode_tokens"
    )


def test_unknown_extension_and_format_are_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("", encoding="utf-8")
    with pytest.raises(loadgen.WorkloadConfigError, match=r"^format: cannot tell the format"):
        loadgen.read_trace(path)
    with pytest.raises(loadgen.WorkloadConfigError) as info:
        loadgen.read_trace(path, format="nope")
    assert str(info.value) == (
        "format: unknown format 'nope' (known: auto, mooncake, mooncake-delta, agentic, "
        "weka, azure, burstgpt, vidur)"
    )


def test_named_format_has_no_note_and_mooncake_delta_is_never_detected(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}\n', encoding="utf-8")
    assert loadgen.read_trace(path, format="mooncake-delta").format_note is None
    assert loadgen.read_trace(path).format == "mooncake"


def test_unknown_reader_option_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}\n', encoding="utf-8")
    with pytest.raises(loadgen.WorkloadConfigError, match=r"^options: .*'colour'"):
        loadgen.read_trace(path, colour=1)
