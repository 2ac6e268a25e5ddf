"""``simclock replay --topology pd`` from a config file: the written config replays identically."""

from __future__ import annotations

from pathlib import Path

from replay._cli import main
from tests.datasets import MOONCAKE, head_lines


def small_trace(tmp_path: Path, rows: int = 12) -> Path:
    """The first rows of the Mooncake conversation trace (keeps the test fast)."""
    path = tmp_path / "small.jsonl"
    path.write_text(head_lines(MOONCAKE, rows), encoding="utf-8")
    return path


def test_a_pd_config_file_run_and_its_written_config_give_identical_bytes(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text(
        f'trace = "{small_trace(tmp_path).as_posix()}"\n'
        'topology = "pd"\nprefill_workers = 2\ndecode_workers = 2\nkv_bandwidth_gbps = 25\n'
        'timing = "fixed"\npolicy = "kv_aware"\n',
        encoding="utf-8",
    )
    first, second = tmp_path / "first", tmp_path / "second"
    options = ["--quiet", "--progress", "none", "--output-dir"]
    assert main(["replay", "--config", str(config), *options, str(first)]) == 0
    echoed = first / "config.json"
    assert main(["replay", "--config", str(echoed), *options, str(second)]) == 0
    for name in ("summary.json", "requests.jsonl", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    summary = (first / "summary.json").read_text(encoding="utf-8")
    assert '"pd_phases"' in summary
