"""bench/read.py runs: a case with no timed round is left out instead of failing, and the
generated cases read the same workload with their reader and their reference."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import loadgen

BENCH = Path(__file__).resolve().parents[2] / "bench" / "read.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_read", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_read"] = module
    spec.loader.exec_module(module)
    return module


def _head(dataset: str, lines: int, out: Path) -> None:
    """The first ``lines`` lines of a bundled dataset, as a plain file at ``out``."""
    with loadgen.open_binary(loadgen.dataset_path(dataset)) as stream:
        head = [stream.readline() for _ in range(lines)]
    out.parent.mkdir(parents=True)
    out.write_bytes(b"".join(head))


def _data(folder: Path) -> None:
    """A --data folder laid out as the bench reads it: the heads of the bundled traces."""
    _head("mooncake-conversation", 300, folder / "mooncake" / "conversation_trace.jsonl")
    _head("azure-conv-2023", 301, folder / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")


def test_zero_rounds_leave_the_case_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _data(tmp_path)
    bench = _bench()
    argv = ["--weka-repeat", "0", "--repeat", "1", "--only", "weka", "--only", "azure"]
    assert bench.main([*argv, "--data", str(tmp_path)]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:-1]]
    assert rows == ["azure"]


def test_generated_cases_read_as_their_references_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the bench stops (SystemExit) when a reading differs from the new reader's
    _data(tmp_path)
    cases = ["mooncake-sessions", "delta-sessions", "agentic", "burstgpt", "vidur"]
    argv = ["--weka-repeat", "0", "--repeat", "1", "--data", str(tmp_path)]
    assert _bench().main([*argv, *(f"--only={case}" for case in cases)]) == 0
    lines = capsys.readouterr().out.splitlines()[2:-1]
    assert [line.split()[0] for line in lines] == cases
    rows = {line.split()[0]: int(line.split()[1]) for line in lines}
    assert rows["vidur"] == rows["burstgpt"] == 300  # every Azure row of the head, none failed
    assert rows["agentic"] == rows["mooncake-sessions"] == 300


def test_negative_rounds_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _bench().main(["--weka-repeat", "-1"])
    assert stop.value.code == 2
    assert "--weka-repeat: must be >= 0, got -1" in capsys.readouterr().err


def test_without_data_the_bundled_traces_are_read_as_plain_files(tmp_path: Path) -> None:
    compressed = loadgen.dataset_path("azure-conv-2023")
    plain = _bench()._plain(compressed, tmp_path)
    assert plain == tmp_path / compressed.name.removesuffix(".xz")
    with loadgen.open_binary(compressed) as stream:
        assert plain.read_bytes() == stream.read()
