"""simclock compare and replay.compare: runs side by side, differences from the first."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from replay import RunDataError, compare
from replay._cli import main

from .plot_runs import replay_to


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    return replay_to(root / "a", policy="round_robin"), replay_to(root / "b", policy="kv_aware")


def _summary(path: Path) -> dict[str, object]:
    value: dict[str, object] = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    return value


def test_rows_hold_each_runs_figures_and_the_difference_from_the_first(
    runs: tuple[Path, Path],
) -> None:
    a, b = runs
    table = compare([a, b])
    assert table.labels == ("round_robin", "kv_aware")
    rows = {row.key: row for row in table.rows}
    p99_a = _summary(a)["distributions"]["ttft_ms"]["p99"]  # type: ignore[index]
    p99_b = _summary(b)["distributions"]["ttft_ms"]["p99"]  # type: ignore[index]
    row = rows["distributions.ttft_ms.p99"]
    assert row.label == "P99 TTFT (ms)"
    assert row.values == (p99_a, p99_b)
    assert row.diffs() == (None, p99_b - p99_a)
    assert row.diff_pcts() == (None, 100.0 * (p99_b - p99_a) / p99_a)
    throughput = rows["metrics.request_throughput"]
    assert throughput.label == "Request throughput (req/s)"
    assert throughput.values[0] == _summary(a)["metrics"]["request_throughput"]  # type: ignore[index]
    assert rows["preemptions"].diff_pcts() == (None, None)  # no % of zero


def test_the_text_table_has_a_column_per_run_and_the_differences(
    runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = runs
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].strip("= ") == "Comparison"
    assert lines[1].split() == ["Run", "1:", "round_robin", f"({a})"]
    header = lines[4].split()
    assert header == ["round_robin", "kv_aware", "diff", "diff", "%"]
    ttft = next(line for line in lines if line.startswith("P99 TTFT (ms):"))
    row = compare([a, b]).rows
    p99 = next(r for r in row if r.key == "distributions.ttft_ms.p99")
    assert ttft.split()[3:] == [
        f"{p99.values[0]:.2f}",
        f"{p99.values[1]:.2f}",
        f"{p99.diffs()[1]:+.2f}",
        f"{p99.diff_pcts()[1]:+.1f}%",
    ]
    assert lines[-1] == "=" * len(lines[0])


def test_csv_and_json_hold_the_same_figures(
    runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = runs
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == [
        "metric",
        "key",
        "round_robin",
        "kv_aware",
        "kv_aware diff",
        "kv_aware diff %",
    ]
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["schema"] == "simclock.compare"
    assert [r["label"] for r in table["runs"]] == ["round_robin", "kv_aware"]
    by_key = {r["key"]: r for r in table["rows"]}
    csv_by_key = {r[1]: r for r in rows[1:]}
    assert set(by_key) == set(csv_by_key)
    mean = by_key["distributions.e2el_ms.mean"]
    assert float(csv_by_key["distributions.e2el_ms.mean"][3]) == mean["values"][1]
    assert mean["diffs"][1] == pytest.approx(mean["values"][1] - mean["values"][0])


def test_the_same_runs_give_the_same_text(runs: tuple[Path, Path]) -> None:
    a, b = runs
    assert compare([a, b]).format("json") == compare([a, b]).format("json")
    assert compare([a, b]).format() == compare([a, b]).format()


def test_runs_of_one_policy_are_labelled_by_directory(runs: tuple[Path, Path]) -> None:
    a, _ = runs
    assert compare([a, a.parent / "a"]).labels == (str(a), str(a.parent / "a"))
    assert compare([a]).labels == ("round_robin",)


def test_a_directory_without_a_summary_is_one_line_exit_2(
    tmp_path: Path, runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = runs
    assert main(["compare", str(a), str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"simclock compare: error: {tmp_path / 'summary.json'}: no such file\n"
    )
    (tmp_path / "summary.json").write_text('{"schema": \n', encoding="utf-8")
    with pytest.raises(RunDataError, match=r"summary.json:2: not valid JSON"):
        compare([tmp_path])
