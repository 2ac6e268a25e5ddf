"""The loadgen examples under docs/examples run, and the docs show exactly what they print."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

PAGES = {
    "loadgen_mooncake.py": "how-to/replay-a-mooncake-trace.md",
    "loadgen_claude_code.py": "how-to/replay-claude-code-sessions.md",
    "loadgen_other_formats.py": "how-to/other-trace-formats.md",
}


def _run(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    runpy.run_path(str(DOCS / "examples" / name), run_name="__main__")
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(PAGES))
def test_page_shows_the_output_of_its_example(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    output = _run(name, capsys)
    page = (DOCS / PAGES[name]).read_text(encoding="utf-8")
    if name == "loadgen_claude_code.py":
        head, tail = output.split("history (never released)")
        assert head in page
        assert "history (never released)" + tail in page
    else:
        assert output in page


def test_mooncake_example_reproduces_worked_example_a(capsys: pytest.CaptureFixture[str]) -> None:
    output = _run("loadgen_mooncake.py", capsys)
    assert "timestamps      {'ex:1': 0.0, 'ex:3': 200.0, 'ex:2': 570.0, 'completed': 3}" in output
    assert "concurrency 1   {'ex:1': 0.0, 'ex:2': 570.0, 'ex:3': 630.0, 'completed': 3}" in output


def test_claude_code_example_reproduces_worked_example_d(
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = _run("loadgen_claude_code.py", capsys)
    assert "barrier B = 600.0 ms" in output
    assert "2265.12 ms  ex:P#0/main/3" in output
    assert "7265.12 ms  ex:P#0/agent_001/2" in output


def test_explanation_page_states_the_lineage_json_shape() -> None:
    page = (DOCS / "explanation" / "agentic-plays-and-lineage.md").read_text(encoding="utf-8")
    assert '"schema": "conversation-lineage", "version": 1' in page
    assert "lineage: unsupported schema 'x' version 2" in page
