"""Reader and generator limits, empty and ambiguous inputs (docs/reference/trace-limits.md)."""

from __future__ import annotations

import io
import json
import re
import tarfile
import tracemalloc
from pathlib import Path

import pytest

import loadgen
from loadgen import TraceFormatError, WorkloadConfigError, _limits, _weka

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "trace-limits.md"
RANGE = "is past the clock's range (at most 3155760000000 ms, 100 years)"
CALL = {"t": 0, "type": "n", "model": "m", "in": 64, "out": 1, "hash_ids": [1]}
PLAY = {"id": "p", "block_size": 64, "hash_id_scope": "local", "requests": [CALL]}
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
VIDUR_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


def _error(path: Path, read: object = loadgen.read_trace, **options: object) -> str:
    with pytest.raises(TraceFormatError) as info:
        read(path, **options)  # type: ignore[operator]
    text = str(info.value)
    assert "\n" not in text
    return text


def test_the_limits_page_quotes_every_value() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for value in (
        _limits.MAX_TOKENS,
        _limits.MAX_IDS,
        int(_limits.MAX_INSTANT_MS),
        _limits.MAX_MEMBER_BYTES,
        _limits.MAX_COUNT,
        loadgen._synthetic.MAX_TURNS,
    ):
        assert f"{value:,}" in text, value


# --- numbers past the clock's range ------------------------------------------------------


def test_an_epoch_microsecond_mooncake_timestamp_is_past_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 1.7e15, "input_length": 10, "output_length": 1, "hash_ids": [2]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _error(path) == (
        f"{path}:2: timestamp: 1700000000000000 ms after the trace's first arrival {RANGE}"
    )


def test_epoch_milliseconds_alone_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 1.7e12, "input_length": 10, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 1.7e12 + 5, "input_length": 10, "output_length": 1, "hash_ids": [2]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    workload = loadgen.read_mooncake(path)
    assert [r.arrival.not_before_ms for r in workload.requests] == [0.0, 5.0]


def test_a_delay_past_the_clock_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = [
        {"session_id": "a", "timestamp": 0, "input_length": 10, "output_length": 1,
         "hash_ids": [1]},
        {"session_id": "a", "delay": 1e300, "input_length": 10, "output_length": 1,
         "hash_ids": [2]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _error(path) == f"{path}:2: delay: 1e+300 ms {RANGE}"


def test_azure_dates_ten_thousand_years_apart_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(
        AZURE_HEADER + "0001-01-01 00:00:00,10,1\n9999-12-31 23:59:59.9999999,10,1\n",
        encoding="utf-8",
    )
    assert _error(path) == (
        f"{path}:3: TIMESTAMP: 315537897600000 ms after the trace's first arrival {RANGE}"
    )


def test_burstgpt_seconds_past_the_clock_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(BURST_HEADER + "0,m,1,1,2,x\n1e13,m,1,1,2,x\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}:3: Timestamp: 1e+16 ms after the trace's first arrival {RANGE}"
    )


def test_synthetic_arrivals_past_the_clock_are_refused() -> None:
    spec = loadgen.parse_synthetic("count=3 arrivals=constant(1e-300) input=10")
    with pytest.raises(WorkloadConfigError) as info:
        loadgen.generate_synthetic(spec, seed=1)
    assert str(info.value) == f"arrivals: 1e+303 ms (session 1) {RANGE}"


def test_synthetic_think_time_past_the_clock_is_refused() -> None:
    spec = loadgen.parse_synthetic("count=1 arrivals=poisson(1) turns=2 think_ms=1e300")
    with pytest.raises(WorkloadConfigError) as info:
        loadgen.generate_synthetic(spec, seed=1)
    assert str(info.value) == f"think_ms: 1e+300 ms before syn:s0/1 {RANGE}"


# --- bounded work for absurd sizes -------------------------------------------------------


def test_mooncake_delta_refuses_an_absurd_output_length(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [
        {"session_id": "a", "timestamp": 0, "input_length": 10, "output_length": 10**15,
         "hash_ids": [1]},
        {"session_id": "a", "input_length": 10, "output_length": 1, "hash_ids": [2]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _error(path, loadgen.read_mooncake_delta) == (
        f"{path}:1: output_length: must be at most 16777216 tokens, got 1000000000000000"
    )


def test_mooncake_delta_refuses_a_merged_prompt_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [
        {"session_id": "a", "timestamp": 0, "input_length": 1_000_000,
         "output_length": 16_000_000, "hash_ids": list(range(1954))},
        {"session_id": "a", "input_length": 10, "output_length": 1, "hash_ids": [5000]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _error(path, loadgen.read_mooncake_delta) == (
        f"{path}:2: input_length: the merged prompt of turn 1 "
        "must be at most 16777216 tokens, got 17000010"
    )


def test_a_forty_digit_azure_context_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(AZURE_HEADER + f"2023-11-16 18:15:46,{'9' * 40},1\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}:2: ContextTokens: must be at most 16777216 tokens, got a 40-digit number"
    )


def test_csv_private_ids_are_limited_per_request(tmp_path: Path) -> None:
    path = tmp_path / "v.csv"
    path.write_text(VIDUR_HEADER + "0,2000000,1\n", encoding="utf-8")
    assert _error(path, loadgen.read_vidur, block_size=1) == (
        f"{path}:2: num_prefill_tokens: 2000000 tokens at block_size 1 make 2000000 "
        "content ids; at most 1048576"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("count=1 arrivals=poisson(1) input=100000000000000000000",
         "input: must be at most 16777216 tokens, got 100000000000000000000"),
        ("count=1 arrivals=poisson(1) output=20000000",
         "output: must be at most 16777216 tokens, got 20000000"),
        ("count=1 arrivals=poisson(1) input_max=20000000",
         "input_max: must be at most 16777216 tokens, got 20000000"),
        ("count=100000000000 arrivals=poisson(1)",
         "count: must be at most 10000000, got 100000000000"),
        ("count=1 arrivals=poisson(1) turns=1000000",
         "turns: must be at most 100000, got 1000000"),
    ],
)  # fmt: skip
def test_synthetic_specs_past_the_limits_are_refused(spec: str, message: str) -> None:
    with pytest.raises(WorkloadConfigError) as info:
        loadgen.parse_synthetic(spec)
    assert str(info.value) == message


def test_a_lognormal_draw_past_the_limit_names_the_request() -> None:
    spec = loadgen.parse_synthetic("count=1 arrivals=poisson(1) input=lognormal(1e12,1e9)")
    with pytest.raises(WorkloadConfigError) as info:
        loadgen.generate_synthetic(spec, seed=1)
    assert re.fullmatch(
        r"input: syn:0 drew \d+ tokens; at most 16777216 \(set input_max\)", str(info.value)
    )


def test_a_merged_synthetic_prompt_past_the_limit_is_refused() -> None:
    spec = loadgen.parse_synthetic("count=1 arrivals=poisson(1) input=1000 output=16777000 turns=2")
    with pytest.raises(WorkloadConfigError) as info:
        loadgen.generate_synthetic(spec, seed=1)
    assert str(info.value) == (
        "input: the merged prompt of syn:s0/1 has 16779000 tokens; at most 16777216"
    )


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:xz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_an_oversized_archive_member_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The limit is 64 MiB; a small one stands in for it so the archive stays small.
    monkeypatch.setattr(_weka, "MAX_MEMBER_BYTES", 4096)
    member = json.dumps(PLAY).encode() + b" " * 20_000_000
    path = _tar(tmp_path / "w.tar.xz", {"big.json": member})
    tracemalloc.start()
    try:
        text = _error(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text == (
        f"{path}!big.json:1: -: {len(member)} bytes; a play file may hold at most 4096 (64 MiB)"
    )
    assert peak < 12_000_000  # the member was never read (tarfile itself takes ~8 MB)


def test_an_overlong_weka_jsonl_line_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_weka, "MAX_MEMBER_BYTES", 4096)
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(PLAY) + "\n" + "x" * 10_000 + "\n", encoding="utf-8")
    assert _error(path, format="weka") == (f"{path}:2: -: a line longer than 4096 bytes (64 MiB)")


# --- empty and ambiguous inputs ----------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n"])
@pytest.mark.parametrize("fmt", ["mooncake", "mooncake-delta", "agentic"])
def test_an_empty_jsonl_trace_is_an_error(tmp_path: Path, text: str, fmt: str) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(text, encoding="utf-8")
    assert _error(path, format=fmt) == f"{path}:1: -: no requests (the file is empty or blank)"


@pytest.mark.parametrize("header", [AZURE_HEADER, BURST_HEADER, VIDUR_HEADER])
def test_a_header_only_csv_is_an_error(tmp_path: Path, header: str) -> None:
    path = tmp_path / "h.csv"
    path.write_text(header + "\n \n", encoding="utf-8")
    assert _error(path) == f"{path}:1: -: no requests (a header and no rows)"


def test_burstgpt_with_every_row_failed_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(BURST_HEADER + "0,m,5,0,5,x\n1,m,5,0,5,x\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}:1: -: no requests left: 2 failed (0 response tokens) and dropped, 0 filtered out"
    )


def test_a_directory_without_plays_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here", encoding="utf-8")
    assert _error(tmp_path) == f"{tmp_path}:1: -: no requests (no .json or .jsonl play found)"


def test_an_archive_without_plays_is_an_error(tmp_path: Path) -> None:
    path = _tar(tmp_path / "w.tar.xz", {"README.md": b"no plays"})
    assert _error(path) == f"{path}:1: -: no requests (no .json or .jsonl play found)"


def test_plays_without_calls_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({**PLAY, "requests": []}) + "\n", encoding="utf-8")
    assert _error(path) == f"{path}:1: -: no requests (found 1 plays and no calls)"


def test_an_empty_weka_jsonl_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text("\n", encoding="utf-8")
    assert _error(path, format="weka") == (
        f"{path}:1: -: no requests (no .json or .jsonl play found)"
    )


def test_a_csv_header_fitting_two_formats_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens,arrived_at,num_prefill_tokens,"
        "num_decode_tokens\n2023-11-16 18:15:46,1,1,0,1,1\n",
        encoding="utf-8",
    )
    assert _error(path) == (
        f"{path}:1: -: fits two formats, azure (CSV header has "
        "TIMESTAMP,ContextTokens,GeneratedTokens) and vidur (CSV header has "
        "arrived_at,num_prefill_tokens,num_decode_tokens); name one with format="
    )


def test_a_jsonl_fitting_weka_and_agentic_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    row = {"request_id": "B", "wait_for": ["A"], "output_length": 1, "hash_ids": [1]}
    path.write_text(json.dumps(PLAY) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}:2: -: fits two formats, weka (first object has requests) and agentic "
        "(line 2 has wait_for); name one with format="
    )


def test_a_jsonl_fitting_weka_and_mooncake_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({**PLAY, "hash_ids": [1]}) + "\n", encoding="utf-8")
    assert _error(path) == (
        f"{path}:1: -: fits two formats, weka (first object has requests) and mooncake "
        "(first object has hash_ids); name one with format="
    )


def test_a_named_format_is_read_as_named_despite_the_ambiguity(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens,arrived_at,num_prefill_tokens,"
        "num_decode_tokens\n2023-11-16 18:15:46,1,1,0,1,1\n",
        encoding="utf-8",
    )
    assert len(loadgen.read_trace(path, format="vidur")) == 1


@pytest.mark.parametrize(
    ("fmt", "header", "row"),
    [
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens",
         "2023-11-16 18:15:46,1,1,1"),
        ("vidur", "arrived_at,num_prefill_tokens,num_decode_tokens,x,x", "0,1,1,2,3"),
    ],
)  # fmt: skip
def test_a_duplicate_csv_column_is_an_error(
    tmp_path: Path, fmt: str, header: str, row: str
) -> None:
    path = tmp_path / "d.csv"
    path.write_text(f"{header}\n{row}\n", encoding="utf-8")
    name = header.split(",")[-1]
    assert _error(path, format=fmt) == f"{path}:1: -: duplicate column {name!r} in the header"
