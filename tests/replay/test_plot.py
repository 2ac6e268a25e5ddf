"""simclock plot, --plots and replay.plot: which figures are written, what they show, that the
same inputs give the same bytes, sweeps, and the one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import matplotlib.figure
import pytest

from replay import PlotExtraMissing, plot, plot_sweep
from replay._cli import main
from replay._plot import _sweep_figure
from replay._plot_data import load_sweep

from .plot_runs import make_sweep, replay_to

RUN_FIGURES = ("e2e_cdf", "requests", "throughput", "tpot_cdf", "ttft_cdf")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("plot")
    return (
        replay_to(root / "rr", policy="round_robin", extra=["--series"]),
        replay_to(root / "kv", policy="kv_aware"),
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sweep(tmp_path_factory.mktemp("sweep"))


@pytest.fixture(scope="module")
def plotted(runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both runs plotted in both formats, with the report."""
    out = tmp_path_factory.mktemp("plotted")
    plot(list(runs), out)
    return out


def _texts(svg: Path) -> list[str]:
    """Every text of an SVG figure (labels, ticks, legend, title)."""
    root = ElementTree.fromstring(svg.read_bytes())
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_two_runs_give_every_figure_in_both_formats_and_a_report(
    runs: tuple[Path, Path], plotted: Path
) -> None:
    rr, kv = runs
    result = plot([rr, kv], plotted)  # again, over the same directory
    names = sorted(p.name for p in plotted.iterdir())
    expected = [
        f"{n}.{fmt}" for n in (*RUN_FIGURES, "engines_round_robin") for fmt in ("png", "svg")
    ]
    assert names == sorted([*expected, "report.html"])
    assert sorted(p.name for p in result.files) == names
    assert result.notes == (
        f"engines_kv_aware: {kv} has no engines.csv (replay with --series or --plots to record "
        "queue depth, batch size, KV usage and utilisation per engine)",
    )
    assert (plotted / "ttft_cdf.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_the_figures_name_their_axes_and_runs(plotted: Path) -> None:
    ttft = _texts(plotted / "ttft_cdf.svg")
    for text in ("TTFT CDF", "TTFT (ms)", "share of requests", "round_robin", "kv_aware"):
        assert text in ttft
    assert "TPOT (ms)" in _texts(plotted / "tpot_cdf.svg")
    assert "E2E latency (ms)" in _texts(plotted / "e2e_cdf.svg")
    throughput = _texts(plotted / "throughput.svg")
    for text in ("output tokens/s", "completed req/s", "virtual time (s)"):
        assert text in throughput
    engines = _texts(plotted / "engines_round_robin.svg")
    for text in (
        "queue depth",
        "batch size",
        "KV usage (%)",
        "utilisation (%)",
        "engine 0",
        "engine 1",
        "Engines over virtual time: round_robin",
    ):
        assert text in engines


def test_the_same_inputs_give_the_same_bytes_in_another_process(
    runs: tuple[Path, Path], plotted: Path, tmp_path: Path
) -> None:
    code = "import sys; from replay import plot; plot(sys.argv[1:3], sys.argv[3])"
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    subprocess.run(
        [sys.executable, "-c", code, str(runs[0]), str(runs[1]), str(tmp_path / "there")],
        check=True,
        env=env,
    )
    here = sorted(plotted.iterdir())
    assert [p.name for p in here] == sorted(p.name for p in (tmp_path / "there").iterdir())
    for path in here:
        assert path.read_bytes() == (tmp_path / "there" / path.name).read_bytes(), path.name
    svg = (plotted / "ttft_cdf.svg").read_text(encoding="utf-8")
    assert "<dc:date>" not in svg


def test_the_report_is_one_page_with_the_figures_and_the_table(plotted: Path) -> None:
    page = (plotted / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == len(RUN_FIGURES) + 1
    assert "P99 TTFT (ms)" in page and "kv_aware vs round_robin" in page
    assert "has no engines.csv" in page
    assert "<script" not in page and 'src="http' not in page


def test_plot_of_one_directory_writes_into_its_plots_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = replay_to(tmp_path / "run", extra=["--series"])
    assert main(["plot", str(out), "--format", "svg", "--no-report"]) == 0
    assert capsys.readouterr().out == f"wrote 6 files to {out / 'plots'}\n"
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(
        f"{n}.svg" for n in (*RUN_FIGURES, "engines")
    )


def test_replay_plots_writes_the_series_and_the_figures(tmp_path: Path) -> None:
    out = replay_to(tmp_path / "run", extra=["--plots"])
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "engines.csv",
        "plots",
        "requests.jsonl",
        "summary.json",
    ]
    assert (out / "plots" / "engines.svg").exists()
    assert (out / "plots" / "report.html").exists()


def test_a_sweep_gives_a_metric_against_the_swept_key_per_policy(
    sweep: Path, tmp_path: Path
) -> None:
    result = plot_sweep(sweep, tmp_path, formats=["svg"], metrics=["mean_ttft_ms", "nope"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "sweep_mean_ttft_ms.svg"]
    assert result.notes == (
        f"{sweep}: 1 of 8 runs failed and are not drawn",
        "sweep_nope: no run has the metric 'nope'",
    )
    texts = _texts(tmp_path / "sweep_mean_ttft_ms.svg")
    for text in ("workers", "mean_ttft_ms", "round_robin", "kv_aware"):
        assert text in texts
    assert "mean_ttft_ms by workers (mean over 2 seeds)" in texts
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "r005-policy=kv_aware-workers=1-seed=1" in page and "failed" in page


def test_the_sweep_lines_are_the_seed_means(sweep: Path) -> None:
    table = json.loads((sweep / "sweep.json").read_text(encoding="utf-8"))
    values = [
        r["metrics"]["request_throughput"]
        for r in table["runs"]
        if r["params"]["policy"] == "round_robin" and r["params"]["workers"] == 2
    ]
    assert len(values) == 2
    # the mean of the two seeds is what the round_robin line passes through at workers=2
    draw = _sweep_figure(load_sweep(sweep), "request_throughput")
    figure = matplotlib.figure.Figure()
    draw(figure)
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert sorted(lines) == ["kv_aware", "round_robin"]
    xs, ys = lines["round_robin"].get_data()
    assert list(xs) == [1.0, 2.0]
    assert ys[1] == pytest.approx(sum(values) / 2)
    assert list(lines["kv_aware"].get_data()[0]) == [1.0, 2.0]


def test_a_plot_of_a_directory_that_is_no_run_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plot", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"simclock plot: error: {tmp_path / 'summary.json'}: no such file\n"
    )
    assert not (tmp_path / "plots").exists()


def test_without_matplotlib_plot_and_replay_plots_say_how_to_install(
    runs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    hint = "plots need matplotlib: pip install 'simclock[plot]'"
    assert main(["plot", str(runs[0]), "--output", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err == f"simclock plot: error: {hint}\n"
    out = tmp_path / "run"
    assert main(["replay", "--plots", "--output-dir", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err == f"simclock replay: error: {hint}\n"
    assert not out.exists()
    with pytest.raises(PlotExtraMissing):
        plot([runs[0]], tmp_path / "q")
