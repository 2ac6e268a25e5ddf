"""``simclock datasets``, and the bundled datasets taken by name where a trace file goes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay._cli import EXIT_OK, EXIT_USAGE, main


def test_datasets_lists_every_bundled_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datasets"]) == EXIT_OK
    rows = capsys.readouterr().out.splitlines()
    assert [row.split()[:3] for row in rows] == [
        ["mooncake-conversation", "mooncake", "Apache-2.0"],
        ["azure-conv-2023", "azure", "CC-BY-4.0"],
        ["weka-claude-code", "weka", "Apache-2.0"],
        ["mooncake-sample", "mooncake", "Apache-2.0"],
    ]


def test_replay_takes_a_dataset_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["replay", "azure-conv-2023", "--max-requests", "40", "--quiet", "--output-dir"]
    assert main([*argv, str(out)]) == EXIT_OK
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workload"] == {
        "source": "AzureLLMInferenceTrace_conv",
        "format": "azure",
        "requests": 19_366,
    }
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["trace"] == "azure-conv-2023"


def test_inspect_takes_a_dataset_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "mooncake-conversation", "--json"]) == EXIT_OK
    stats = json.loads(capsys.readouterr().out)
    assert stats["path"] == "mooncake-conversation"
    assert stats["format"] == "mooncake"
    assert stats["requests"] == 12_031


def test_an_existing_path_wins_over_a_dataset_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("azure-conv-2023").write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
    )
    assert main(["inspect", "azure-conv-2023", "--format", "mooncake", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["requests"] == 1


def test_a_name_that_is_neither_a_file_nor_a_dataset_is_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["replay", "mooncake-conversations.jsonl"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "simclock replay: error: mooncake-conversations.jsonl: No such file or directory\n"
    )
