"""``simclock inspect``: statistics as text and JSON, and errors."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from replay._cli_debug import add_inspect_parser

SMALL = (
    '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n'
    '{"timestamp": 1000, "input_length": 900, "output_length": 2, "hash_ids": [1, 2]}\n'
    '{"timestamp": 3000, "input_length": 300, "output_length": 4, "hash_ids": [7]}\n'
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="simclock")
    add_inspect_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["inspect", *argv])


def inspect(*argv: str) -> tuple[int, str]:
    args = parse(*argv)
    out = io.StringIO()
    status = args.handler(args, stdout=out)
    return status, out.getvalue()


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_text(SMALL, encoding="utf-8")
    return path


def test_text_lists_every_statistic(small: Path) -> None:
    status, text = inspect(str(small))
    assert status == 0
    assert text.splitlines() == [
        f"{small} (mooncake)",
        "  requests             3",
        "  sessions             3",
        "  conversations        0",
        "  span                 3,000.0 ms (3.000 s)",
        "  rate                 1.00 req/s",
        "  inter-arrival CV     0.33",
        "  input tokens         p50 600  p90 840  p99 894  mean 600.0  max 900",
        "  output tokens        p50 3  p90 3.8  p99 4  mean 3.0  max 4",
        "  prefix hit ratio     50.00 % of prompt tokens (unbounded cache)",
        "  requests with a hit  33.33 % (at least one block)",
        "  tolerated            nothing",
    ]


def test_json_has_the_statistics_and_where_they_came_from(small: Path) -> None:
    status, text = inspect(str(small), "--json")
    assert status == 0
    data = json.loads(text)
    assert (data["requests"], data["format"], data["path"]) == (3, "mooncake", str(small))
    assert data["input"] == {"p50": 600.0, "p90": 840.0, "p99": 894.0, "mean": 600.0, "max": 900}


def test_a_bad_trace_exits_2_with_the_readers_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": -1, "output_length": 3}\n', encoding="utf-8")
    status, text = inspect(str(path), "--format", "mooncake")
    assert (status, text) == (2, "")
    assert capsys.readouterr().err.startswith(f"simclock inspect: error: {path}:1: ")


def test_the_mooncake_trace_matches_the_reference_figures() -> None:
    status, text = inspect("mooncake-conversation")
    assert status == 0
    lines = text.splitlines()
    assert "  requests             12,031" in lines
    assert "  span                 3,536,999.0 ms (58.9 min)" in lines
    assert "  rate                 3.40 req/s" in lines
    assert "  inter-arrival CV     3.03" in lines
    assert any(
        line.startswith("  input tokens         p50 6,909  p90 27,367  p99 85,400.4")
        for line in lines
    )
    assert any(
        line.startswith("  output tokens        p50 350  p90 597  p99 1,118.5") for line in lines
    )
    assert "  prefix hit ratio     37.36 % of prompt tokens (unbounded cache)" in lines
