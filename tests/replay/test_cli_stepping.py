"""``simclock replay --stepping`` and ``--token-times`` (and their config-file keys)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay import OUTPUT_FILES
from replay._cli import EXIT_OK, EXIT_USAGE, main


def _run(tmp_path: Path, name: str, *flags: str) -> Path:
    out = tmp_path / name
    args = ["replay", "--quiet", "--output-dir", str(out), "--timing", "fixed", *flags]
    assert main(args) == EXIT_OK
    return out


def test_both_steppings_write_the_same_files(tmp_path: Path) -> None:
    macro = _run(tmp_path, "macro", "--stepping", "macro")
    per_pass = _run(tmp_path, "pass", "--stepping", "pass")
    default = _run(tmp_path, "default")
    for name in OUTPUT_FILES:
        assert (macro / name).read_bytes() == (per_pass / name).read_bytes()
        assert (default / name).read_bytes() == (macro / name).read_bytes()


def test_token_times_as_runs_or_none_change_only_that_field(tmp_path: Path) -> None:
    full = _run(tmp_path, "full")
    runs = _run(tmp_path, "runs", "--token-times", "runs")
    none = _run(tmp_path, "none", "--token-times", "none")
    rows = {
        name: [json.loads(line) for line in (d / "requests.jsonl").read_text().splitlines()]
        for name, d in (("full", full), ("runs", runs), ("none", none))
    }
    for a, b, c in zip(rows["full"], rows["runs"], rows["none"], strict=True):
        times = a.pop("token_times_ms")
        spans = b.pop("token_time_runs_ms")
        expanded = [s + k * step for s, step, n in spans for k in range(n)]
        assert expanded == pytest.approx(times, abs=1e-9)
        assert a == b == c
    for name in ("summary.json", "config.json"):
        assert (runs / name).read_bytes() == (full / name).read_bytes()
    assert (runs / "requests.jsonl").stat().st_size < (full / "requests.jsonl").stat().st_size


def test_the_config_file_takes_both_keys(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('timing = "fixed"\nstepping = "pass"\ntoken_times = "none"\n')
    out = tmp_path / "out"
    assert main(["replay", "--quiet", "--config", str(config), "--output-dir", str(out)]) == 0
    first = json.loads((out / "requests.jsonl").read_text().splitlines()[0])
    assert "token_times_ms" not in first and "token_time_runs_ms" not in first
    assert "stepping" not in json.loads((out / "config.json").read_text())


def test_a_bad_stepping_in_a_config_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text('stepping = "fast"\n')
    assert main(["replay", "--quiet", "--config", str(config)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.endswith("run.toml: stepping: must be one of macro, pass, got 'fast'")
    assert "\n" not in err
