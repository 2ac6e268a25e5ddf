"""Exports: ``vllm_bench.json`` (vLLM's serving-benchmark result layout), ``requests.csv``, and
``--slo`` in vLLM's ``--goodput`` form."""

from __future__ import annotations

import csv
import functools
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen import LoadMode, open_binary
from policies import RoundRobin
from replay import EXPORT_FILES, OUTPUT_FILES, ReplayResult, format_table, run, write_outputs
from replay._cli import EXIT_OK, main
from replay._export import (
    CSV_COLUMNS,
    _Arrays,
    peak_overlap,
    request_lines,
    vllm_bench_json,
)
from tests.datasets import MOONCAKE

from .mooncake_e2e import SPEEDUP, TOPOLOGY, mooncake

EXPORTED = 3_000


@functools.cache
def _mooncake_head() -> ReplayResult:
    """The Mooncake trace's first 3,000 requests on the end-to-end set-up, round robin:
    every request's token times are written out and read back (the whole trace's 4.1 M token
    instants cost ten seconds of JSON text and show nothing more)."""
    return run(
        mooncake(),
        topology=TOPOLOGY,
        policy=RoundRobin(),
        seed=2026,
        load=LoadMode(speedup=SPEEDUP, max_requests=EXPORTED),
    )


def _mooncake_rows(count: int) -> str:
    """The first ``count`` rows of the Mooncake conversation trace."""
    with open_binary(MOONCAKE) as handle:
        return "".join(handle.readline().decode() for _ in range(count))


# the keys of `vllm bench serve --save-result --save-detailed --percentile-metrics
# ttft,tpot,itl,e2el --metric-percentiles 50,75,90,95,99`, in its order, with simclock's
# metadata where vLLM puts --metadata pairs
_STATS = [
    f"{stat}_{m}_ms"
    for m in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p50", "p75", "p90", "p95", "p99")
]
VLLM_KEYS = [
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "simclock_version",
    "seed",
    "policy",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    *_STATS,
]


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The first 20 rows of the bundled sample (real Mooncake rows)."""
    path = tmp_path / "small.jsonl"
    path.write_text(_mooncake_rows(20))
    return path


def _replay(trace: Path, out: Path, *extra: str) -> int:
    return main(["replay", str(trace), "--quiet", "--output-dir", str(out), *extra])


def test_export_writes_vllm_bench_json_in_vllms_layout(small_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _replay(small_trace, out, "--export", "vllm", "--slo", "ttft:500", "e2el:20000") == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_FILES, "vllm_bench.json"])
    bench = json.loads((out / "vllm_bench.json").read_text())
    assert list(bench) == VLLM_KEYS
    metrics = json.loads((out / "summary.json").read_text())["metrics"]
    for key in _STATS:
        assert bench[key] == metrics[key]
    for key in ("request_throughput", "request_goodput", "output_throughput", "completed"):
        assert bench[key] == metrics[key]
    assert bench["duration"] == metrics["duration_s"]
    assert bench["date"] is None
    assert bench["backend"] == "simclock"
    assert bench["model_id"] == "meta-llama/Llama-3.1-8B"
    assert (bench["request_rate"], bench["burstiness"], bench["max_concurrency"]) == (
        "inf",
        1.0,
        None,
    )
    assert bench["num_prompts"] == 20
    assert bench["failed"] == 0
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert bench["input_lens"] == [x["input_length"] for x in lines]
    assert bench["output_lens"] == [x["output_tokens"] for x in lines]
    assert bench["ttfts"] == pytest.approx([x["ttft_ms"] / 1000 for x in lines], abs=1e-12)
    assert bench["latencies"] == pytest.approx([x["e2e_ms"] / 1000 for x in lines], abs=1e-12)
    assert bench["start_times"] == [x["arrival_ms"] / 1000 for x in lines]
    assert [len(gaps) for gaps in bench["itls"]] == [x["output_tokens"] - 1 for x in lines]
    first = lines[0]["token_times_ms"]
    assert bench["itls"][0][0] == pytest.approx((first[1] - first[0]) / 1000, abs=1e-12)
    assert bench["generated_texts"] == [""] * 20
    assert bench["errors"] == [""] * 20
    assert bench["queue_times"] == [0.0] * 20


def test_exports_are_deterministic_and_leave_the_report_files_as_they_were(
    small_trace: Path, tmp_path: Path
) -> None:
    plain, a, b = tmp_path / "plain", tmp_path / "a", tmp_path / "b"
    assert _replay(small_trace, plain) == EXIT_OK
    assert _replay(small_trace, a, "--export", "csv,vllm") == EXIT_OK
    assert _replay(small_trace, b, "--export", "vllm", "--export", "vllm,csv") == EXIT_OK
    assert sorted(p.name for p in plain.iterdir()) == sorted(OUTPUT_FILES)
    for name in OUTPUT_FILES:
        assert (a / name).read_bytes() == (plain / name).read_bytes()
    for name in EXPORT_FILES.values():
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_requests_csv_has_one_row_per_request_with_the_scalar_fields(
    small_trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert _replay(small_trace, out, "--export", "csv", "--token-times", "none") == EXIT_OK
    with (out / "requests.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert rows[0] == list(CSV_COLUMNS)
    assert len(rows) == 1 + len(lines) == 21
    for row, line in zip(rows[1:], lines, strict=True):
        cells = dict(zip(CSV_COLUMNS, row, strict=True))
        assert cells["request_id"] == line["request_id"]
        assert float(cells["ttft_ms"]) == line["ttft_ms"]
        assert int(cells["output_tokens"]) == line["output_tokens"]
        assert cells["truncated"] == "false"
        assert cells["conversation_id"] == ""
        assert cells["prefill_worker"] == ""


def test_exports_from_kept_records_equal_those_of_a_streamed_run(tmp_path: Path) -> None:
    # replay.run keeps the records; the command line streams them to requests.jsonl
    result = _mooncake_head()
    assert result.summary.completed == EXPORTED
    kept = tmp_path / "kept"
    write_outputs(result, kept, exports=("vllm", "csv"))
    lines = (kept / "requests.jsonl").read_text().splitlines()
    with (kept / "requests.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert len(rows) == len(lines) + 1
    bench = json.loads((kept / "vllm_bench.json").read_text())
    assert bench["completed"] == result.summary.completed
    assert bench["model_id"] is None  # a run built in Python names no catalog model
    # the same records read back from the file give the same exports
    streamed = tmp_path / "streamed"
    write_outputs(result, streamed)
    again = vllm_bench_json(result, request_lines(result, streamed / "requests.jsonl"))
    assert json.loads(json.dumps(again)) == bench


def test_failed_requests_are_listed_as_vllm_lists_failures(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(_mooncake_rows(10))
    config = tmp_path / "run.toml"
    config.write_text("[engine]\ncontext_length = 8000\n")
    out = tmp_path / "out"
    code = _replay(trace, out, "--config", str(config), "--export", "vllm")
    assert code == EXIT_OK
    bench = json.loads((out / "vllm_bench.json").read_text())
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    rejected = [i for i, x in enumerate(lines) if x["status"] == "rejected"]
    assert rejected
    assert bench["failed"] == len(rejected)
    assert bench["completed"] == 10 - len(rejected)
    for i in rejected:
        assert bench["errors"][i] == "rejected: " + lines[i]["rejection_reason"]
        assert (bench["output_lens"][i], bench["ttfts"][i], bench["itls"][i]) == (0, 0.0, [])


def test_the_load_mode_fills_vllms_traffic_keys(small_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = _replay(
        small_trace, out, "--export", "vllm", "--arrivals", "gamma(2,0.5)", "--concurrency", "3"
    )
    assert code == EXIT_OK
    bench = json.loads((out / "vllm_bench.json").read_text())
    assert (bench["request_rate"], bench["burstiness"], bench["max_concurrency"]) == (2.0, 4.0, 3)


def test_peak_overlap_counts_half_open_intervals() -> None:
    assert peak_overlap([], []) == 0
    assert peak_overlap([0.0, 1.0], [1.0, 2.0]) == 1  # one ends as the other starts
    assert peak_overlap([0.0, 0.5, 0.7], [1.0, 2.0, 0.8]) == 3
    assert peak_overlap([0.0, 0.0], [0.0, 1.0]) == 1  # an empty interval counts for nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--export", "bogus", "--output-dir", "{out}"],
            "simclock replay: error: --export: unknown export 'bogus'; known: vllm, csv",
        ),
        (
            ["--export", "vllm"],
            "simclock replay: error: --export: needs --output-dir (or output_dir)",
        ),
        (
            ["--export", "vllm", "--token-times", "none", "--output-dir", "{out}"],
            "simclock replay: error: --export: vllm needs token times (--token-times full or runs)",
        ),
        (
            ["--slo", "ttft:500", "tpot", "--output-dir", "{out}"],
            "simclock replay: error: --slo: 'tpot' is not key=milliseconds or key:milliseconds",
        ),
        (
            ["--slo", "ttft:500", "itl:5", "--output-dir", "{out}"],
            "simclock replay: error: --slo: unknown metric 'itl' (expected ttft, tpot, e2e)",
        ),
    ],
)
def test_bad_exports_and_goodput_specs_are_one_line_with_exit_2_and_no_files(
    args: list[str],
    message: str,
    small_trace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    code = main(["replay", str(small_trace), *(a.replace("{out}", str(out)) for a in args)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == message + "\n"
    assert not out.exists()


def test_config_file_export_and_goodput_keys(small_trace: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    out = tmp_path / "out"
    config.write_text(
        f'trace = "{small_trace}"\noutput_dir = "{out}"\nexport = ["csv"]\n'
        'slo = ["ttft:500", "tpot:50"]\n'
    )
    assert main(["replay", "--config", str(config), "--quiet"]) == EXIT_OK
    assert (out / "requests.csv").exists()
    assert not (out / "vllm_bench.json").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    config.write_text(f'trace = "{small_trace}"\noutput_dir = "{out}"\nexport = 3\n')
    code = main(["replay", "--config", str(config), "--quiet"])
    assert code == 2


def test_slo_in_vllms_goodput_form_before_the_trace(small_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "replay",
            "--quiet",
            "--output-dir",
            str(out),
            "--slo",
            "ttft:500",
            "e2el:20000",
            str(small_trace),
        ]
    )
    assert code == EXIT_OK
    summary = json.loads((out / "summary.json").read_text())
    assert summary["slo"] == {"ttft_ms": 500.0, "e2e_ms": 20000.0}
    assert summary["workload"]["requests"] == 20
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["slo"] == "ttft=500,e2e=20000"


def test_write_outputs_refuses_an_unknown_export_before_writing(tmp_path: Path) -> None:
    result = _mooncake_head()
    with pytest.raises(ValueError, match=r"^exports: unknown export 'xml'; known: vllm, csv$"):
        write_outputs(result, tmp_path / "o", exports=("xml",))  # type: ignore[arg-type]
    assert not (tmp_path / "o").exists()


def test_the_table_names_the_hardware_scheduler_and_load_and_labels_pd_engines(
    small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replay", str(small_trace), "--topology", "pd", "--prefill-workers", "2"]
    args += ["--timing", "roofline:tensor_parallel=2", "--concurrency", "4"]
    assert main(args) == EXIT_OK
    table = capsys.readouterr().out
    assert "GPU, model, TP:                          H100, meta-llama/Llama-3.1-8B, TP 2\n" in table
    assert "Scheduler:                               vllm\n" in table
    assert "Load:                                    closed loop, 4 sessions\n" in table
    assert "Engine 0 (prefill) utilisation (%):" in table
    assert "Engine 1 (prefill) utilisation (%):" in table
    assert "Engine 2 (decode) utilisation (%):" in table


def test_a_run_built_in_python_names_only_what_it_knows() -> None:
    table = format_table(_mooncake_head())
    assert "GPU, model, TP:" not in table
    assert "Scheduler:" not in table
    assert "Load:                                    workload timestamps\n" in table
    assert "Engine 0 utilisation (%):" in table


def _spelled_out(line: dict[str, object]) -> list[float]:
    """The token instants of a line, one Python operation per instant (the oracle)."""
    full = line.get("token_times_ms")
    if isinstance(full, list):
        return [float(t) for t in full]
    out: list[float] = []
    for start, step, count in line["token_time_runs_ms"]:  # type: ignore[attr-defined]
        out.extend(start + step * k for k in range(count))
    return out


_instant = st.floats(min_value=0.0, max_value=1e7, allow_nan=False)
_runs = st.lists(
    st.tuples(
        _instant | st.integers(0, 10**7),
        st.floats(min_value=0.0, max_value=5e3) | st.integers(0, 5000),
        st.integers(0, 40),
    ).map(list),
    max_size=4,
)


@given(
    st.lists(
        st.tuples(_instant, st.lists(_instant, max_size=30) | _runs),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=200, deadline=None)
def test_vllm_arrays_equal_their_per_instant_arithmetic(
    rows: list[tuple[float, list[object]]],
) -> None:
    """The per-request gaps and the peak output rate of ``vllm_bench.json``, worked out on
    whole arrays, are the floats of the per-instant Python arithmetic."""
    lines: list[dict[str, object]] = []
    for i, (arrival, times) in enumerate(rows):
        runs = bool(times) and isinstance(times[0], list)
        lines.append(
            {
                "request_id": f"r{i}",
                "status": "completed",
                "input_length": 1,
                "arrival_ms": arrival,
                "ttft_ms": 1.0,
                "e2e_ms": 2.0,
                "token_time_runs_ms" if runs else "token_times_ms": times,
            }
        )
    arrays = _Arrays.of(lines)
    start = min(arrival for arrival, _ in rows)
    counts: dict[int, int] = {}
    for line, itls in zip(lines, arrays.itls, strict=True):
        instants = _spelled_out(line)
        assert itls == [(b - a) / 1000.0 for a, b in itertools.pairwise(instants)]
        for t in instants:
            bucket = int((t - start) / 1000.0)
            counts[bucket] = counts.get(bucket, 0) + 1
    assert arrays.output_lens == [len(_spelled_out(line)) for line in lines]
    assert arrays.max_output_tokens_per_s() == float(max(counts.values(), default=0))
