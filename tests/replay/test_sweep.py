"""``simclock sweep`` and ``replay.sweep``: the grid, the runs' files, the table, resumption."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

import simclock
from replay import LocalExecutor, SweepRun, SweepSpec, load_sweep, sweep
from replay._cli import EXIT_FAILED, EXIT_OK, main

_T = TypeVar("_T")
_R = TypeVar("_R")

SYNTHETIC = (
    "count=30 arrivals=poisson(40) input=300 output=8 prefix_groups=3 shared_prefix_ratio=0.5"
)

SWEEP = f"""\
output_dir = "out"
seeds = [3, 4]

[base]
workers = 2
timing = {{type = "fixed", prefill_ms = 20, decode_ms = 5}}
[base.workload]
synthetic = "{SYNTHETIC}"

[grid]
policy = ["round_robin", "kv_aware"]
workload.speedup = [1, 2]
"""

RUN_FILES = ("config.json", "requests.jsonl", "summary.json")


class Recording:
    """An in-process executor that records what it was asked to run, and can stop early."""

    shares_filesystem = True

    def __init__(self, *, stop_after: int | None = None) -> None:
        self.items: list[Any] = []
        self.stop_after = stop_after

    def map_unordered(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> Iterator[_R]:
        for item in items:
            if self.stop_after is not None and len(self.items) == self.stop_after:
                raise KeyboardInterrupt
            self.items.append(item)
            yield fn(item)


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def sweep_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    return path


def test_runs_are_the_product_of_the_axes_in_file_order_with_the_seed_fastest(
    sweep_file: Path,
) -> None:
    spec, output_dir = load_sweep(sweep_file)
    assert output_dir == "out"
    assert spec.swept == ("policy", "workload.speedup", "seed")
    runs = spec.runs()
    assert [r.run_id for r in runs] == [
        "r000-policy=round_robin-workload.speedup=1-seed=3",
        "r001-policy=round_robin-workload.speedup=1-seed=4",
        "r002-policy=round_robin-workload.speedup=2-seed=3",
        "r003-policy=round_robin-workload.speedup=2-seed=4",
        "r004-policy=kv_aware-workload.speedup=1-seed=3",
        "r005-policy=kv_aware-workload.speedup=1-seed=4",
        "r006-policy=kv_aware-workload.speedup=2-seed=3",
        "r007-policy=kv_aware-workload.speedup=2-seed=4",
    ]
    assert runs[6].params == {"policy": "kv_aware", "workload.speedup": 2}
    assert runs[6].seed == 3
    assert runs[6].config == {
        "workers": 2,
        "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 5},
        "workload": {"synthetic": SYNTHETIC, "speedup": 2},
        "policy": "kv_aware",
        "seed": 3,
    }


def test_a_run_id_is_sanitised_and_a_table_value_written_as_key_value_pairs() -> None:
    spec = SweepSpec(
        grid={
            "policy": ["kv_aware:temperature=0.5", {"name": "kv_aware", "temperature": 1}],
            "engine.enable_prefix_caching": [False],
        }
    )
    assert [r.run_id for r in spec.runs()] == [
        "r000-policy=kv_aware_temperature=0.5-engine.enable_prefix_caching=false",
        "r001-policy=name=kv_aware_temperature=1-engine.enable_prefix_caching=false",
    ]
    assert spec.runs()[0].config == {
        "policy": "kv_aware:temperature=0.5",
        "engine": {"enable_prefix_caching": False},
    }
    assert spec.swept == ("policy", "engine.enable_prefix_caching")


def test_a_key_inside_a_table_of_the_base_is_set_there() -> None:
    spec = SweepSpec(
        base={"policy": {"name": "kv_aware", "temperature": 0.5}, "engine": {"max_num_seqs": 8}},
        grid={"policy.temperature": [0.1], "engine.block_size": [16]},
    )
    (run,) = spec.runs()
    assert run.config == {
        "policy": {"name": "kv_aware", "temperature": 0.1},
        "engine": {"max_num_seqs": 8, "block_size": 16},
    }
    assert spec.base == {
        "policy": {"name": "kv_aware", "temperature": 0.5},
        "engine": {"max_num_seqs": 8},
    }


def test_a_sweep_run_is_byte_identical_to_simclock_replay_with_the_same_config(
    sweep_file: Path, tmp_path: Path
) -> None:
    assert main(["sweep", str(sweep_file), "--quiet"]) == EXIT_OK
    spec, _ = load_sweep(sweep_file)
    run = spec.runs()[6]  # kv_aware, speedup 2, seed 3
    config = dict(tomllib.loads(SWEEP)["base"])
    config["policy"] = "kv_aware"
    config["workload"] = {**config["workload"], "speedup": 2}
    (tmp_path / "run.json").write_text(json.dumps(config))
    args = ["replay", "--config", "run.json", "--seed", "3", "--output-dir", "cli", "--quiet"]
    assert main(args) == EXIT_OK
    swept = _files(tmp_path / "out" / "runs" / run.run_id)
    assert list(swept) == list(RUN_FILES)
    assert swept == _files(tmp_path / "cli")


def test_the_table_lists_every_run_in_grid_order_with_its_summary_metrics(
    sweep_file: Path, tmp_path: Path
) -> None:
    assert main(["sweep", str(sweep_file), "--quiet", "--jobs", "2"]) == EXIT_OK
    out = tmp_path / "out"
    table = json.loads((out / "sweep.json").read_text())
    assert list(table) == ["schema", "schema_version", "simclock_version", "swept", "runs"]
    assert table["schema"] == "simclock.sweep" and table["schema_version"] == 1
    assert table["simclock_version"] == simclock.__version__
    assert table["swept"] == ["policy", "workload.speedup", "seed"]
    ids = [r.run_id for r in load_sweep(sweep_file)[0].runs()]
    assert [r["run_id"] for r in table["runs"]] == ids
    first = table["runs"][0]
    assert list(first) == [
        "run_id", "params", "seed", "status", "error", "output_dir", "metrics"
    ]  # fmt: skip
    assert first["params"] == {"policy": "round_robin", "workload.speedup": 1}
    assert (first["seed"], first["status"], first["error"]) == (3, "ok", None)
    assert first["output_dir"] == f"runs/{ids[0]}"
    for row in table["runs"]:
        summary = json.loads((out / row["output_dir"] / "summary.json").read_text())
        assert row["metrics"] == summary["metrics"]
    with (out / "sweep.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    metric_keys = list(first["metrics"])
    assert rows[0] == ["run_id", "status", "seed", "policy", "workload.speedup", *metric_keys]
    assert [r[0] for r in rows[1:]] == ids
    assert rows[5][:5] == [ids[4], "ok", "3", "kv_aware", "1"]
    ttft = metric_keys.index("median_ttft_ms") + 5
    assert float(rows[5][ttft]) == table["runs"][4]["metrics"]["median_ttft_ms"]


def test_worker_processes_write_the_same_bytes_as_one_process(
    sweep_file: Path, tmp_path: Path
) -> None:
    spec, _ = load_sweep(sweep_file)
    sweep(spec, output_dir=tmp_path / "one", executor=LocalExecutor(jobs=1))
    sweep(spec, output_dir=tmp_path / "two", executor=LocalExecutor(jobs=2))
    one = _files(tmp_path / "one")
    assert len(one) == 2 + 8 * len(RUN_FILES)
    assert one == _files(tmp_path / "two")


def test_a_rerun_skips_the_finished_runs_and_writes_the_same_table(
    sweep_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", str(sweep_file)]) == EXIT_OK
    first = _files(tmp_path / "out")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 9
    assert lines[0].startswith("run 1/8  r000-policy=round_robin-workload.speedup=1-seed=3  ok  ")
    assert lines[0].endswith(" ms") and "median TTFT " in lines[0]
    assert lines[-1] == (
        "simclock sweep: 8 runs (8 run now), 0 failed: out/sweep.json, out/sweep.csv"
    )
    recording = Recording()
    spec, _ = load_sweep(sweep_file)
    result = sweep(spec, output_dir="out", executor=recording)
    assert recording.items == [] and result.ran == 0
    assert _files(tmp_path / "out") == first
    assert main(["sweep", str(sweep_file)]) == EXIT_OK
    again = capsys.readouterr().err.splitlines()
    assert again[0].startswith("run 1/8  r000-policy=round_robin-workload.speedup=1-seed=3  ")
    assert all("  done before  median TTFT " in line for line in again[:8])


def test_a_run_whose_config_changed_runs_again(sweep_file: Path, tmp_path: Path) -> None:
    spec, _ = load_sweep(sweep_file)
    sweep(spec, output_dir="out")
    changed = tmp_path / "out" / "runs" / spec.runs()[2].run_id / "config.json"
    config = json.loads(changed.read_text())
    config["config"]["workers"] = 3
    changed.write_text(json.dumps(config))
    recording = Recording()
    sweep(spec, output_dir="out", executor=recording)
    assert [t.run_id for t in recording.items] == [spec.runs()[2].run_id]
    assert json.loads(changed.read_text())["config"]["workers"] == 2


FAILING_POLICY = """
from policies import RoundRobin


class Failing(RoundRobin):
    def choose(self, request, ctx):
        raise RuntimeError("no engine for you")
"""


def test_a_failed_run_is_marked_and_the_others_go_on_then_it_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "failing.py").write_text(FAILING_POLICY)
    spec = SweepSpec(
        base={"workers": 1, "timing": "fixed", "workload": {"synthetic": SYNTHETIC}},
        grid={"policy": ["failing.py:Failing", "round_robin"]},
        source="s.toml",
    )
    result = sweep(spec, output_dir="out")
    failed, ok = result.rows
    assert (failed.status, ok.status) == ("failed", "ok")
    assert failed.error is not None and "no engine for you" in failed.error
    assert failed.metrics["completed"] == 0  # the report up to the failure was written
    table = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [r["status"] for r in table["runs"]] == ["failed", "ok"]
    assert table["runs"][0]["error"] == failed.error
    recording = Recording()
    again = sweep(spec, output_dir="out", executor=recording)
    assert [t.run_id for t in recording.items] == [failed.run_id]
    assert again.rows == result.rows
    (tmp_path / "s.toml").write_text(
        '[base]\nworkers = 1\ntiming = "fixed"\nworkload.synthetic = "' + SYNTHETIC + '"\n'
        '[grid]\npolicy = ["failing.py:Failing"]\n'
    )
    capsys.readouterr()
    assert main(["sweep", "s.toml", "--output-dir", "cli"]) == EXIT_FAILED
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("run 1/1  r000-policy=failing.py_Failing  failed: ")
    assert err[-1] == "simclock sweep: 1 runs (1 run now), 1 failed: cli/sweep.json, cli/sweep.csv"


def test_an_interrupted_sweep_leaves_a_table_of_the_finished_runs(
    sweep_file: Path, tmp_path: Path
) -> None:
    spec, _ = load_sweep(sweep_file)
    with pytest.raises(KeyboardInterrupt):
        sweep(spec, output_dir="cut", executor=Recording(stop_after=3))
    table = json.loads((tmp_path / "cut" / "sweep.json").read_text())
    assert [r["run_id"] for r in table["runs"]] == [r.run_id for r in spec.runs()[:3]]
    assert len((tmp_path / "cut" / "sweep.csv").read_text().splitlines()) == 4
    recording = Recording()
    sweep(spec, output_dir="cut", executor=recording)
    assert [t.run_id for t in recording.items] == [r.run_id for r in spec.runs()[3:]]
    sweep(spec, output_dir="whole")
    assert _files(tmp_path / "cut") == _files(tmp_path / "whole")


def test_the_python_api_takes_the_runs_themselves(tmp_path: Path) -> None:
    base = {"workers": 1, "timing": "fixed", "workload": {"synthetic": SYNTHETIC}}
    runs = [
        SweepRun(
            index=i,
            run_id=f"seed{seed}",
            params={},
            seed=seed,
            config={**base, "seed": seed},
        )
        for i, seed in enumerate((5, 6))
    ]
    result = sweep(runs, output_dir=tmp_path / "api")
    assert result.swept == ("seed",)
    assert [(r.run_id, r.seed, r.status) for r in result.rows] == [
        ("seed5", 5, "ok"),
        ("seed6", 6, "ok"),
    ]
    summary = json.loads((tmp_path / "api" / "runs" / "seed6" / "summary.json").read_text())
    assert summary["seed"] == 6


def test_quiet_prints_nothing(sweep_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", str(sweep_file), "--quiet"]) == EXIT_OK
    assert capsys.readouterr() == ("", "")


def test_ctrl_c_stops_the_worker_processes_and_leaves_only_whole_runs(
    tmp_path: Path,
) -> None:
    # Four runs in two worker processes, two short ones first, then two that take many times
    # longer; Ctrl-C (SIGINT to the process group, as a terminal sends it) once the short two
    # are in the table, so it comes while the long two run however fast the machine is.
    (tmp_path / "s.toml").write_text(
        '[base]\nworkers = 2\nworkload.synthetic = "count=8000 arrivals=poisson(50) '
        'input=2000 output=100"\n[grid]\nworkload.max_requests = [300, 8000]\n'
        'policy = ["round_robin", "kv_aware"]\n'
    )
    command = [sys.executable, "-m", "simclock", "sweep", "s.toml", "--output-dir", "out"]
    command += ["--jobs", "2"]
    process = subprocess.Popen(
        command, cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    table = tmp_path / "out" / "sweep.json"
    try:
        for _ in range(6000):  # at most 10 minutes
            if table.exists() and len(json.loads(table.read_text())["runs"]) >= 2:
                break
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    listed = [r["run_id"] for r in json.loads(table.read_text())["runs"]]
    assert err.splitlines()[len(listed) :] == [
        "simclock sweep: interrupted; the table holds the runs finished so far"
    ]
    assert len(listed) < 4
    runs = tmp_path / "out" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == listed  # the interrupted runs left nothing
    for run_id in listed:
        assert sorted(p.name for p in (runs / run_id).iterdir()) == sorted(RUN_FILES)


def test_plots_draw_the_sweep_figures_and_report_after_the_table(
    sweep_file: Path, tmp_path: Path
) -> None:
    assert main(["sweep", str(sweep_file), "--quiet", "--plots"]) == EXIT_OK
    plots = tmp_path / "out" / "plots"
    names = sorted(p.name for p in plots.iterdir())
    assert "report.html" in names
    # one figure per metric against the swept key, one line per policy
    svg = next(p for p in plots.glob("sweep_*.svg")).read_text()
    assert "round_robin" in svg and "kv_aware" in svg
    assert {p.stem for p in plots.glob("*.png")} == {p.stem for p in plots.glob("*.svg")}


def test_a_sweep_of_the_bundled_sample_and_of_plays_replays_as_simclock_replay_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No trace: the first-run sample; a trace of plays: the default lanes. Both come from the
    # same configured run as the command line's, exports included.
    monkeypatch.chdir(tmp_path)
    base = {"workers": 2, "workload": {"max_requests": 12}, "export": ["csv"]}
    for name, trace in (("sample", None), ("plays", _a_plays_trace(tmp_path))):
        config = dict(base) if trace is None else {**base, "trace": trace, "format": "agentic"}
        sweep_text = (
            f'output_dir = "{name}"\nseeds = [5]\n[base]\n'
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items() if k != "workload")
            + '[base.workload]\nmax_requests = 12\n[grid]\npolicy = ["kv_aware"]\n'
        )
        (tmp_path / f"{name}.toml").write_text(sweep_text)
        assert main(["sweep", f"{name}.toml", "--quiet"]) == EXIT_OK
        (tmp_path / f"{name}.json").write_text(json.dumps({**config, "policy": "kv_aware"}))
        args = ["replay", "--config", f"{name}.json", "--seed", "5", "--output-dir", f"cli-{name}"]
        assert main([*args, "--quiet"]) == EXIT_OK
        (run_dir,) = (tmp_path / name / "runs").iterdir()
        swept = _files(run_dir)
        assert "requests.csv" in swept
        assert swept == _files(tmp_path / f"cli-{name}")
    # the plays ran two at a time (one lane per engine), not all six at once
    lines = (tmp_path / "cli-plays" / "requests.jsonl").read_text().splitlines()
    assert len({json.loads(line)["arrival_ms"] for line in lines}) == 3


def _a_plays_trace(tmp_path: Path) -> str:
    """Six one-request plays (agentic rows), all recorded at timestamp 0."""
    rows = [
        json.dumps(
            {
                "request_id": f"p{i}",
                "timestamp": 0,
                "input_length": 100,
                "output_length": 2,
                "hash_ids": [i],
            }
        )
        for i in range(6)
    ]
    path = tmp_path / "plays.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_plots_say_where_they_went_unless_quiet(
    sweep_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", str(sweep_file), "--plots"]) == EXIT_OK
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("wrote ") and line.endswith("out/plots") for line in err)


class _InterruptedAfterAWholeRun:
    """Runs the first task and hands its outcome over; runs the second to its end (its
    directory written) and is interrupted before handing that one over."""

    shares_filesystem = True

    def map_unordered(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
        yield fn(items[0])
        fn(items[1])
        raise KeyboardInterrupt


def test_a_run_written_but_not_yet_in_the_table_when_interrupted_is_removed(
    sweep_file: Path,
) -> None:
    spec, output_dir = load_sweep(sweep_file)
    with pytest.raises(KeyboardInterrupt):
        sweep(spec, output_dir=output_dir, executor=_InterruptedAfterAWholeRun())
    runs = spec.runs()
    listed = [r["run_id"] for r in json.loads(Path("out/sweep.json").read_text())["runs"]]
    assert listed == [runs[0].run_id]
    assert sorted(p.name for p in Path("out/runs").iterdir()) == listed
