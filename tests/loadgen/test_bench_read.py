"""bench/read.py runs: a case with no timed round is left out instead of failing, and the
generated cases read the same workload with their reader and their reference."""

from __future__ import annotations

import gc
import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from unittest.mock import patch

import pytest

import loadgen
from loadgen import _intern
from tests.datasets import AZURE, MOONCAKE, head_lines

BENCH = Path(__file__).resolve().parents[2] / "bench" / "read.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_read", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_read"] = module
    spec.loader.exec_module(module)
    return module


def _main(argv: list[str]) -> int:
    """``bench/read.py``'s main with this process's heap frozen.

    The bench collects garbage before every timed read, and a full collection walks every
    object the earlier tests of a worker left alive (seconds per test in a whole-suite
    run); frozen, those are left out and each collection walks only the bench's own.
    """
    gc.freeze()
    try:
        result: int = _bench().main(argv)
    finally:
        gc.unfreeze()
    return result


def _mooncake_head(folder: Path) -> str:
    """The Mooncake rows :func:`_data` writes."""
    return (folder / "mooncake" / "conversation_trace.jsonl").read_text(encoding="utf-8")


def _data(folder: Path) -> None:
    """A --data folder laid out as the bench reads it: the heads of the bundled traces."""
    for trace, lines, out in (
        (MOONCAKE, 300, folder / "mooncake" / "conversation_trace.jsonl"),
        (AZURE, 301, folder / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"),
    ):
        out.parent.mkdir(parents=True)
        out.write_text(head_lines(trace, lines), encoding="utf-8", newline="")


def test_zero_rounds_leave_the_case_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _data(tmp_path)
    argv = ["--weka-repeat", "0", "--repeat", "1", "--only", "weka", "--only", "azure"]
    assert _main([*argv, "--data", str(tmp_path)]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:-1]]
    assert rows == ["azure"]


def test_generated_cases_read_as_their_references_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the bench stops (SystemExit) when a reading differs from the new reader's
    _data(tmp_path)
    cases = ["mooncake-sessions", "delta-sessions", "agentic", "burstgpt", "vidur"]
    argv = ["--weka-repeat", "0", "--repeat", "1", "--data", str(tmp_path)]
    assert _main([*argv, *(f"--only={case}" for case in cases)]) == 0
    lines = capsys.readouterr().out.splitlines()[2:-1]
    assert [line.split()[0] for line in lines] == cases
    rows = {line.split()[0]: int(line.split()[1]) for line in lines}
    assert rows["vidur"] == rows["burstgpt"] == 300  # every Azure row of the head, none failed
    assert rows["agentic"] == rows["mooncake-sessions"] == 300


def _weka_archive(out: Path, plays: int) -> None:
    """A WEKA archive of ``plays`` small plays: two main calls, a subagent of two calls
    launched between them, content ids local to each play."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz") as archive:
        for n in range(plays):
            calls = [
                {"t": t, "type": "n", "model": "m", "in": 64 * size, "out": 5,
                 "hash_ids": list(range(size))}
                for t, size in ((0, 3), (9, 6))
            ]  # fmt: skip
            inner = [
                {"t": t, "type": "n", "model": "m", "in": 64 * 4, "out": 3,
                 "hash_ids": [100, 101, 102, 103]}
                for t in (0, 2)
            ]  # fmt: skip
            marker = {"t": 4, "type": "subagent", "agent_id": "agent_001", "status": "completed"}
            play = {
                "id": f"trace_{n:04d}",
                "block_size": 64,
                "hash_id_scope": "local",
                "requests": [calls[0], {**marker, "requests": inner}, calls[1]],
            }
            body = json.dumps(play).encode()
            member = tarfile.TarInfo(f"traces/trace_{n:04d}.json")
            member.size = len(body)
            archive.addfile(member, io.BytesIO(body))


@pytest.mark.parametrize(
    ("suffix", "ids"),
    [
        # plays 0 and 25 (every 25th): four calls each, 3 + 4 + 4 + 6 content ids
        ("", "34"),
        # the same eight calls; 3, 4 and 6 ids of 64 tokens are one id of 512 each
        ("-512", "8"),
    ],
)
def test_the_weka_cases_read_the_same_calls_as_mooncake_and_agentic_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str, ids: str
) -> None:
    _data(tmp_path)
    _weka_archive(tmp_path / "weka_cc" / "weka_cc_traces_v8_shared.tar.xz", 30)
    cases = [f"mooncake-weka{suffix}", f"agentic-weka{suffix}"]
    argv = ["--weka-repeat", "0", "--repeat", "1", "--data", str(tmp_path)]
    # the mooncake case is checked against the record-by-record reading with the same
    # block size (a difference stops it)
    assert _main([*argv, *(f"--only={case}" for case in cases)]) == 0
    lines = capsys.readouterr().out.splitlines()[2:-1]
    assert [line.split()[0] for line in lines] == cases
    assert [line.split()[1:3] for line in lines] == [["8", ids], ["8", ids]]


def test_coarser_rows_are_the_same_prompts_in_larger_blocks(tmp_path: Path) -> None:
    archive = tmp_path / "weka.tar.xz"
    _weka_archive(archive, 1)
    bench = _bench()
    _, agentic = bench._weka_files(archive, tmp_path)
    coarse = bench._coarser(agentic, tmp_path / "coarse.jsonl", 2)
    fine_rows = [json.loads(line) for line in agentic.read_text().splitlines()]
    coarse_rows = [json.loads(line) for line in coarse.read_text().splitlines()]
    assert [r["hash_ids"] for r in coarse_rows] == [r["hash_ids"][::2] for r in fine_rows]
    assert [len(r["hash_ids"]) for r in fine_rows] == [3, 4, 4, 6]
    assert [{**r, "hash_ids": None} for r in coarse_rows] == [
        {**r, "hash_ids": None} for r in fine_rows
    ]
    workload = loadgen.read_agentic(coarse, block_size=128)
    assert [len(r.hash_ids) for r in workload.requests] == [2, 2, 2, 3]
    assert workload.tolerated.private_tail_ids == 0


def test_widened_agentic_rows_hold_as_many_times_the_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _data(tmp_path)
    argv = ["--weka-repeat", "0", "--repeat", "1", "--data", str(tmp_path), "--only=agentic"]
    head = [json.loads(line) for line in _mooncake_head(tmp_path).splitlines()]
    for widen, name in ((1, "agentic"), (3, "agentic-x3")):
        assert _main([*argv, f"--widen={widen}"]) == 0
        (line,) = capsys.readouterr().out.splitlines()[2:-1]
        # a row keeps the ids its prompt needs (512 tokens each), and one private id for a
        # last block its ids leave out (as the Mooncake reading does)
        ids = 0
        for row in head:
            have, need = widen * len(row["hash_ids"]), -(-widen * row["input_length"] // 512)
            ids += min(have, need) + (have < need)
        assert line.split()[:3] == [name, "300", str(ids)]


def test_widened_rows_keep_sharing_what_they_shared(tmp_path: Path) -> None:
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_text(
        '{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [4, 9]}\n'
        '{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [4, 2]}\n'
    )
    rows = [
        json.loads(line)
        for line in _bench()._agentic_file(mooncake, tmp_path, 2).read_text().splitlines()
    ]
    assert [r["input_length"] for r in rows] == [1400, 1200]
    assert [r["hash_ids"] for r in rows] == [[8, 9, 18, 19], [8, 9, 4, 5]]
    assert rows[1]["wait_for"] == ["r0"]


def test_the_agentic_weka_rows_wait_as_the_calls_do(tmp_path: Path) -> None:
    archive = tmp_path / "weka.tar.xz"
    _weka_archive(archive, 26)
    plain, agentic = _bench()._weka_files(archive, tmp_path)
    rows = [json.loads(line) for line in agentic.read_text().splitlines()]
    assert [r["request_id"] for r in rows] == [f"r{n}" for n in range(8)]
    assert [r.get("wait_for") for r in rows[:4]] == [None, ["r0"], ["r1"], ["r0"]]
    assert [r["session_id"] for r in rows] == ["s0", "s1", "s1", "s0", "s2", "s3", "s3", "s2"]
    workload = loadgen.read_agentic(agentic, block_size=64)
    assert len(workload.plays) == 2
    # large plays are interned play by play: the same workload as all plays at once
    with patch.object(_intern, "SCOPE_BY_SCOPE_FROM", 1):
        assert loadgen.read_agentic(agentic, block_size=64) == workload
    assert [len(r.hash_ids) for r in workload.requests] == [3, 4, 4, 6] * 2
    assert loadgen.read_mooncake(plain, block_size=64).requests[3].input_length == 6 * 64


def test_negative_rounds_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _bench().main(["--weka-repeat", "-1"])
    assert stop.value.code == 2
    assert "--weka-repeat: must be >= 0, got -1" in capsys.readouterr().err


def test_a_widening_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _bench().main(["--widen", "0"])
    assert stop.value.code == 2
    assert "--widen: must be >= 1, got 0" in capsys.readouterr().err


def test_without_data_the_bundled_traces_are_read_as_plain_files(tmp_path: Path) -> None:
    compressed = loadgen.dataset_path("azure-conv-2023")
    plain = _bench()._plain(compressed, tmp_path)
    assert plain == tmp_path / compressed.name.removesuffix(".xz")
    with loadgen.open_binary(compressed) as stream:
        assert plain.read_bytes() == stream.read()
