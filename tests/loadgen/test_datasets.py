"""The bundled datasets and the transparent xz/gzip seam of the readers."""

from __future__ import annotations

import collections
import gzip
import hashlib
import json
import lzma
import re
from pathlib import Path

import pytest

import loadgen
from loadgen import TraceFormatError, WorkloadConfigError

from .conftest import MOONCAKE

PROVENANCE = Path(loadgen.__file__).parent / "datasets" / "PROVENANCE.md"
ROWS = (
    b'{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n'
    b'{"timestamp": 5, "input_length": 100, "output_length": 2, "hash_ids": [1]}\n'
)


def test_datasets_are_listed_in_order_with_their_formats() -> None:
    assert [(d.name, d.format, d.licence) for d in loadgen.DATASETS] == [
        ("mooncake-conversation", "mooncake", "Apache-2.0"),
        ("azure-conv-2023", "azure", "CC-BY-4.0"),
        ("weka-claude-code", "weka", "Apache-2.0"),
        ("mooncake-sample", "mooncake", "Apache-2.0"),
    ]


def test_every_dataset_file_is_installed_and_compressed() -> None:
    for one in loadgen.DATASETS:
        assert one.path.is_file(), one.name
        assert one.path.read_bytes()[:6] == b"\xfd7zXZ\x00", one.name  # xz magic


def test_an_unknown_dataset_name_lists_the_known_ones() -> None:
    with pytest.raises(WorkloadConfigError) as caught:
        loadgen.dataset_path("mooncake")
    assert str(caught.value) == (
        "dataset: no bundled dataset 'mooncake' "
        "(known: mooncake-conversation, azure-conv-2023, weka-claude-code, mooncake-sample)"
    )


def test_the_provenance_note_names_every_file_with_its_checksum() -> None:
    text = PROVENANCE.read_text(encoding="utf-8")
    for one in loadgen.DATASETS:
        digest = hashlib.sha256(one.path.read_bytes()).hexdigest()
        assert f"`{one.file}` (`{digest}`)" in text, one.name
        assert f"## `{one.name}`" in text


@pytest.mark.parametrize(
    ("name", "upstream"),
    [("mooncake-conversation", "b8cbb061"), ("azure-conv-2023", "2f1e5b66")],
)
def test_decompressed_bytes_are_the_upstream_file(name: str, upstream: str) -> None:
    # The provenance note gives the upstream sha256; the bundled file decompresses to it.
    text = PROVENANCE.read_text(encoding="utf-8")
    section = text.split(f"## `{name}`", 1)[1]
    expected = re.search(r"upstream sha256 \(decompressed\) \| `([0-9a-f]{64})`", section)
    assert expected is not None and expected.group(1).startswith(upstream)
    with loadgen.open_binary(loadgen.dataset_path(name)) as stream:
        assert hashlib.sha256(stream.read()).hexdigest() == expected.group(1)


def test_read_dataset_reads_the_whole_trace_with_upstream_ids() -> None:
    mooncake = loadgen.read_dataset("mooncake-conversation")
    assert len(mooncake.requests) == 12_031
    assert mooncake.requests[0].id == "conversation_trace:1"
    azure = loadgen.read_dataset("azure-conv-2023")
    assert len(azure.requests) == 19_366
    assert azure.requests[0].id == "AzureLLMInferenceTrace_conv:2"


def test_auto_detection_looks_through_the_compression_suffix() -> None:
    assert loadgen.detect_format(MOONCAKE).name == "mooncake"
    assert loadgen.detect_format(loadgen.dataset_path("azure-conv-2023")).name == "azure"


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.xz", ".jsonl.gz"])
def test_a_compressed_trace_reads_like_the_plain_one(tmp_path: Path, suffix: str) -> None:
    plain = tmp_path / "t.jsonl"
    plain.write_bytes(ROWS)
    packed = tmp_path / f"t{suffix}"
    if suffix.endswith(".xz"):
        packed.write_bytes(lzma.compress(ROWS))
    elif suffix.endswith(".gz"):
        packed.write_bytes(gzip.compress(ROWS, mtime=0))
    expected = loadgen.read_trace(plain)
    got = loadgen.read_trace(packed)
    assert got.requests == expected.requests
    assert got.format_note == "format auto: mooncake (no requests and no wait_for)"


def test_compression_is_found_by_content_whatever_the_name(tmp_path: Path) -> None:
    packed = tmp_path / "t.csv"
    rows = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,2\n"
    packed.write_bytes(gzip.compress(rows))
    assert [r.input_length for r in loadgen.read_trace(packed).requests] == [10]


def test_a_damaged_xz_stream_is_a_one_line_trace_error(tmp_path: Path) -> None:
    body = b"".join(ROWS for _ in range(2000))
    packed = bytearray(lzma.compress(body))
    packed[len(packed) // 2] ^= 0xFF
    path = tmp_path / "t.jsonl.xz"
    path.write_bytes(bytes(packed))
    with pytest.raises(TraceFormatError) as caught:
        loadgen.read_trace(path)
    assert caught.value.file == str(path)
    assert caught.value.field == "-"
    assert caught.value.problem.startswith("damaged xz data (")
    assert "\n" not in str(caught.value)


def test_a_truncated_gzip_stream_is_a_trace_error_at_the_line_reached(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(ROWS * 3)[:-12])
    with pytest.raises(TraceFormatError) as caught:
        loadgen.read_trace(path)
    assert caught.value.problem.startswith("damaged gzip data (")
    assert 1 <= caught.value.line <= 7


def test_the_sample_is_whole_early_conversations_by_the_documented_rule() -> None:
    # The rule of PROVENANCE.md, applied to the bundled conversation trace.
    with loadgen.open_binary(MOONCAKE) as stream:
        raw = stream.read().splitlines(keepends=True)
    rows = [json.loads(line) for line in raw]
    groups: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
    for i, row in enumerate(rows):
        if len(row["hash_ids"]) >= 2:
            groups[(row["hash_ids"][0], row["hash_ids"][1])].append(i)
    keep = sorted(
        i
        for group in groups.values()
        if len(group) >= 2 and all(rows[j]["timestamp"] < 300_000 for j in group)
        for i in group
    )
    with loadgen.open_binary(loadgen.dataset_path("mooncake-sample")) as stream:
        sample = stream.read()
    assert sample == b"".join(raw[i] for i in keep)
    assert (len(keep), keep[0] + 1, keep[-1] + 1) == (199, 2, 916)
    section = PROVENANCE.read_text(encoding="utf-8").split("## `mooncake-sample`", 1)[1]
    assert hashlib.sha256(sample).hexdigest() in section
    stats = loadgen.workload_stats(loadgen.read_dataset("mooncake-sample"))
    assert round(stats.prefix_hit_ratio, 3) == 0.435
