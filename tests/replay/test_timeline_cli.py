"""The debugging flags of ``simclock replay`` and ``simclock inspect``, end to end."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from replay._cli import EXIT_OK, EXIT_USAGE, main
from tests.datasets import MOONCAKE, head_lines

from .timeline_checks import check_timeline

RUN = ["--workers", "2", "--timing", "fixed", "--quiet"]


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The first 20 rows of the bundled sample (real Mooncake rows)."""
    path = tmp_path / "small.jsonl"
    path.write_text(head_lines(MOONCAKE, 20))
    return path


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers = list(root.handlers)
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for name in ("simclock", "loadgen", "engines", "policies", "replay"):
        logging.getLogger(name).setLevel(logging.NOTSET)
    structlog.reset_defaults()


def test_timeline_flag_writes_a_filtered_valid_timeline(small_trace: Path, tmp_path: Path) -> None:
    path = tmp_path / "timeline.json"
    argv = ["replay", str(small_trace), *RUN, "--timeline", str(path)]
    argv += ["--timeline-request", "small:3", "--timeline-end-s", "5"]
    assert main(argv) == EXIT_OK
    doc = check_timeline(path.read_bytes())
    assert {e["id2"]["local"] for e in doc["traceEvents"] if e["ph"] == "b"} == {"small:3"}
    assert max(e["ts"] for e in doc["traceEvents"] if e["ph"] != "M") <= 5_000_000


def test_outputs_are_the_same_with_progress_and_timeline(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain, observed = tmp_path / "plain", tmp_path / "observed"
    assert main(["replay", str(small_trace), *RUN, "--output-dir", str(plain)]) == EXIT_OK
    argv = ["replay", str(small_trace), *RUN, "--output-dir", str(observed)]
    argv += ["--progress", "plain", "--timeline", str(tmp_path / "t.json")]
    assert main(argv) == EXIT_OK
    assert "done 20/20" in capsys.readouterr().err.splitlines()[-1]
    for name in ("summary.json", "requests.jsonl", "config.json"):
        assert (plain / name).read_bytes() == (observed / name).read_bytes()


def test_log_flags_render_json_lines_on_standard_error(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", str(small_trace), *RUN, "--timeline", str(tmp_path / "t.json")]
    argv += ["--log-level", "info", "--log-format", "json", "--progress", "none"]
    assert main(argv) == EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    written = [e for e in lines if e["event"] == "timeline written"]
    assert len(written) == 1
    assert written[0]["logger"] == "replay._cli_debug" and written[0]["level"] == "info"


def test_an_empty_timeline_window_is_a_usage_error(
    small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", str(small_trace), *RUN, "--timeline-start-s", "2", "--timeline-end-s", "1"]
    assert main(argv) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "simclock replay: error: timeline window ends (1000000000 ns) "
        "before it starts (2000000000 ns)\n"
    )


def test_inspect_prints_the_statistics(
    small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(small_trace)]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{small_trace} (mooncake)"
    assert out[1] == "  requests             20"


def test_timeline_bytes_do_not_depend_on_the_hash_seed(small_trace: Path, tmp_path: Path) -> None:
    outputs = []
    for hash_seed in ("0", "12345"):
        path = tmp_path / f"timeline-{hash_seed}.json"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        command = [sys.executable, "-m", "simclock", "replay", str(small_trace), *RUN]
        command += ["--timeline", str(path)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        assert done.returncode == EXIT_OK, done.stderr
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1]
    check_timeline(outputs[0])
