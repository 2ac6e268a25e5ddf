"""The per-engine series (engines.csv): what it records, that recording changes nothing, and
that a run without it writes what it always wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engines import EngineConfig, FixedTiming
from loadgen import generate_synthetic, parse_synthetic
from policies import RoundRobin, pd_policy
from replay import (
    Aggregated,
    Disaggregated,
    Run,
    SeriesError,
    SeriesRecorder,
    read_series,
    run,
    summary_json,
)
from replay._cli import main
from replay._series import SERIES_COLUMNS

from .plot_runs import SYNTHETIC, replay_to

WORKLOAD = generate_synthetic(parse_synthetic(SYNTHETIC), seed=3)


def _aggregated() -> Aggregated:
    return Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=64, block_size=16),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )


def _utilisation(series: dict[int, dict[str, object]]) -> dict[int, float]:
    out = {}
    for engine, cols in series.items():
        span = np.asarray(cols["end_s"]) - np.asarray(cols["start_s"])
        out[engine] = float((np.asarray(cols["utilisation"]) * span).sum() / span.sum())
    return out


def _series_of(tmp_path: Path, **options: object) -> tuple[bytes, dict[str, object], object]:
    recorder = SeriesRecorder()
    result = run(WORKLOAD, series=recorder, **options)  # type: ignore[arg-type]
    end_ns = round(result.meta.virtual_duration_ms * 1_000_000)
    tmp_path.mkdir(exist_ok=True)
    path = recorder.write(tmp_path, end_ns=end_ns)
    return path.read_bytes(), summary_json(result), result


def test_utilisation_over_the_run_matches_the_summary(tmp_path: Path) -> None:
    data, _, result = _series_of(tmp_path, topology=_aggregated(), policy=RoundRobin())
    util = _utilisation(read_series(tmp_path / "engines.csv"))  # type: ignore[arg-type]
    engines = result.summary.engines  # type: ignore[attr-defined]
    assert len(util) == len(engines) == 2
    for summary_engine in engines:
        assert util[summary_engine.index] == pytest.approx(summary_engine.utilisation, abs=1e-4)
        assert 0 < summary_engine.utilisation < 1
    assert data.startswith((",".join(SERIES_COLUMNS) + "\n").encode())


def test_prefill_and_decode_engines_are_recorded_with_their_roles(tmp_path: Path) -> None:
    topology = Disaggregated(
        prefill_workers=1,
        decode_workers=1,
        prefill_engine=EngineConfig(num_blocks=128, block_size=16),
        decode_engine=EngineConfig(num_blocks=128, block_size=16),
        prefill_timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
        decode_timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )
    _, _, result = _series_of(tmp_path, topology=topology, policy=pd_policy("round_robin"))
    series = read_series(tmp_path / "engines.csv")
    assert [series[e]["role"] for e in sorted(series)] == ["prefill", "decode"]
    util = _utilisation(series)  # type: ignore[arg-type]
    for summary_engine in result.summary.engines:  # type: ignore[attr-defined]
        assert util[summary_engine.index] == pytest.approx(summary_engine.utilisation, abs=1e-4)


def test_recording_changes_no_report_and_both_steppings_give_the_same_series(
    tmp_path: Path,
) -> None:
    plain = summary_json(run(WORKLOAD, topology=_aggregated(), policy=RoundRobin()))
    macro, macro_summary, _ = _series_of(
        tmp_path / "m", topology=_aggregated(), policy=RoundRobin(), stepping="macro"
    )
    per_pass, _, _ = _series_of(
        tmp_path / "p", topology=_aggregated(), policy=RoundRobin(), stepping="pass"
    )
    assert macro_summary == plain
    assert macro == per_pass


def test_the_recorder_keeps_the_engines_fast_path() -> None:
    recorder = SeriesRecorder()
    built = Run.build(WORKLOAD, topology=_aggregated(), policy=RoundRobin(), series=recorder)
    try:
        assert recorder.attached
        assert not built.journal.wants_token_events
        with pytest.raises(RuntimeError, match="already records a run"):
            recorder.attach(built.journal, [e.view for e in built.engines])
    finally:
        built.close()


def test_bins_follow_the_given_width_and_end_with_the_run(tmp_path: Path) -> None:
    recorder = SeriesRecorder(bin_ms=50.0)
    result = run(WORKLOAD, topology=_aggregated(), policy=RoundRobin(), series=recorder)
    end_ns = round(result.meta.virtual_duration_ms * 1_000_000)
    series = recorder.series(end_ns=end_ns)
    assert series.bin_ms == 50.0
    rows = [r for r in series.rows if r[0] == 0]
    assert rows[0][2] == "0" and rows[1][2] == "0.05"
    assert float(str(rows[-1][3])) == pytest.approx(end_ns / 1e9, abs=1e-6)
    with pytest.raises(ValueError, match="bin_ms: must be a finite number > 0"):
        SeriesRecorder(bin_ms=0.0)


def test_the_default_run_writes_the_same_files_and_series_adds_engines_csv(
    tmp_path: Path,
) -> None:
    plain = replay_to(tmp_path / "plain")
    recorded = replay_to(tmp_path / "series", extra=["--series"])
    assert sorted(p.name for p in plain.iterdir()) == [
        "config.json",
        "requests.jsonl",
        "summary.json",
    ]
    assert sorted(p.name for p in recorded.iterdir()) == [
        "config.json",
        "engines.csv",
        "requests.jsonl",
        "summary.json",
    ]
    for name in ("config.json", "requests.jsonl", "summary.json"):
        assert (plain / name).read_bytes() == (recorded / name).read_bytes()


def test_series_without_an_output_dir_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", "--synthetic", SYNTHETIC, "--series", "--quiet"]) == 2
    assert capsys.readouterr().err == "simclock replay: error: --series needs --output-dir\n"


def test_a_malformed_series_file_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "engines.csv"
    path.write_text("engine,role\n0,aggregated\n", encoding="utf-8")
    with pytest.raises(SeriesError, match=r"engines.csv:1: missing column 'start_s'"):
        read_series(path)
    header = ",".join(SERIES_COLUMNS)
    path.write_text(
        f"{header}\n0,aggregated,0,1,0,0,1,1,0.5,0.5,1\n0,aggregated,1,2,x,0,1,1,0,0,1\n"
    )
    with pytest.raises(SeriesError, match=r"engines.csv:3: queue_depth: not a number: 'x'"):
        read_series(path)
