"""write_outputs: summary.json, requests.jsonl, config.json; deterministic and atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import replay._output as output_module
from loadgen import Identity, Lineage, Request, Workload
from replay import (
    OUTPUT_FILES,
    SLO,
    EngineUsage,
    OutputError,
    ReplayResult,
    RunMeta,
    finalize,
    format_table,
    write_outputs,
)

from .fakes import MS, FakeTrace, completed, journal_of, workload_of


def _result(*, wall_time_s: float = 1.25, config: dict[str, object] | None = None) -> ReplayResult:
    traces = [
        completed("a", arrival_ms=0, tokens_ms=[50, 60, 70], reused=64),
        completed("b", arrival_ms=1, tokens_ms=[110, 120], engine=1, admit_ms=50),
        FakeTrace(
            "c",
            arrival_ns=2 * MS,
            terminal_ns=2 * MS,
            terminal_status="rejected",
            rejection_reason="prompt exceeds context",
        ),
    ]
    meta = RunMeta(
        seed=7,
        config=config if config is not None else {"workers": 2, "policy": "round_robin"},
        virtual_duration_ms=120.0,
        wall_time_s=wall_time_s,
        events_processed=42,
        engines=(EngineUsage(0, 70 * MS, 3), EngineUsage(1, 60 * MS, 2)),
    )
    return finalize(
        journal_of(*traces, events=["arrived", "arrived", "arrived"]),
        workload=workload_of(["a", "b", "c", "d"]),
        meta=meta,
        slo=SLO(ttft_ms=100),
    )


def test_write_outputs_writes_the_three_files(tmp_path: Path) -> None:
    paths = write_outputs(_result(), tmp_path / "out")
    assert [p.name for p in paths] == list(OUTPUT_FILES)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(OUTPUT_FILES)


def test_files_get_the_permissions_of_an_ordinary_new_file(tmp_path: Path) -> None:
    ordinary = tmp_path / "ordinary"
    ordinary.write_text("")
    write_outputs(_result(), tmp_path / "out")
    for name in OUTPUT_FILES:
        assert (tmp_path / "out" / name).stat().st_mode == ordinary.stat().st_mode


def test_summary_json_is_versioned_and_uses_vllm_metric_names(tmp_path: Path) -> None:
    write_outputs(_result(), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["schema"] == "simclock.replay.summary"
    assert summary["schema_version"] == 1
    assert summary["seed"] == 7
    assert summary["workload"] == {"source": "test", "format": "test", "requests": 4}
    assert summary["status_counts"]["completed"] == 2
    assert summary["status_counts"]["rejected"] == 1
    assert summary["status_counts"]["never_issued"] == 1
    metrics = summary["metrics"]
    assert metrics["completed"] == 2
    assert metrics["mean_ttft_ms"] == 79.5  # (50 + 109) / 2
    assert metrics["median_ttft_ms"] == 79.5
    assert metrics["mean_tpot_ms"] == 10.0
    assert metrics["mean_itl_ms"] == 10.0
    assert metrics["mean_e2el_ms"] == 94.5  # (70 + 119) / 2
    assert metrics["request_goodput"] == pytest.approx(1 / 0.12)
    for name in (
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "std_ttft_ms",
        "p99_itl_ms",
        "p50_e2el_ms",
    ):
        assert name in metrics
    assert summary["distributions"]["ttst_ms"]["count"] == 2
    assert summary["prefix_reuse"]["reused_input_tokens"] == 64
    assert [e["utilisation"] for e in summary["engines"]] == [70 / 120, 60 / 120]
    assert summary["lifecycle_events"] == {"arrived": 3, "token": 3}  # tokens after the first
    assert summary["goodput"]["count"] == 1


def test_wall_time_never_reaches_the_files_only_the_table(tmp_path: Path) -> None:
    write_outputs(_result(wall_time_s=1.0), tmp_path / "one")
    write_outputs(_result(wall_time_s=99.0), tmp_path / "two")
    for name in OUTPUT_FILES:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert "Wall time (s):" in format_table(_result(wall_time_s=99.0))
    assert "99.000" in format_table(_result(wall_time_s=99.0))


def test_requests_jsonl_has_one_line_per_request_with_the_timeline(tmp_path: Path) -> None:
    write_outputs(_result(), tmp_path)
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["request_id"] for r in records] == ["a", "b", "c", "d"]
    assert [r["status"] for r in records] == ["completed", "completed", "rejected", "never_issued"]
    a = records[0]
    assert a["token_times_ms"] == [50.0, 60.0, 70.0]
    assert a["admissions"] == [{"at_ms": 0.0, "reused_tokens": 64, "is_readmission": False}]
    assert a["ttft_ms"] == 50.0
    assert a["meets_slo"] is True
    assert "lineage" not in a
    assert "handoff" not in a
    assert records[2]["rejection_reason"] == "prompt exceeds context"
    assert list(a)[:3] == ["request_id", "status", "engine"]


def test_lineage_is_written_when_present_with_parent_omitted_for_roots(tmp_path: Path) -> None:
    def request(rid: str, lineage: Lineage) -> Request:
        return Request(
            id=rid,
            input_length=10,
            output_length=1,
            block_size=64,
            hash_ids=[1],
            identity=Identity(conversation_id=rid, turn_index=0, lineage=lineage),
        )

    workload = Workload(
        requests=(
            request("root", Lineage(root_conversation_id="root")),
            request("child", Lineage(root_conversation_id="root", parent_conversation_id="root")),
        ),
        source="s",
        format="weka",
    )
    journal = journal_of(
        completed("root", arrival_ms=0, tokens_ms=[5]),
        completed("child", arrival_ms=0, tokens_ms=[6]),
    )
    write_outputs(finalize(journal, workload=workload, meta=RunMeta(seed=0)), tmp_path)
    root, child = (json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines())
    assert root["lineage"] == {
        "schema": "conversation-lineage",
        "version": 1,
        "root_conversation_id": "root",
    }
    assert child["lineage"]["parent_conversation_id"] == "root"
    assert root["conversation_id"] == "root"
    assert root["turn_index"] == 0


def test_config_json_echoes_the_resolved_configuration(tmp_path: Path) -> None:
    write_outputs(_result(config={"workers": 4, "timing": {"type": "fixed"}}), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config == {
        "schema_version": 1,
        "simclock_version": config["simclock_version"],
        "workers": 4,
        "timing": {"type": "fixed"},
        "seed": 7,
    }


def test_a_failure_while_writing_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def failing_write(handle: object, data: bytes) -> None:
        calls.append(data)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        handle.write(data)  # type: ignore[attr-defined]

    monkeypatch.setattr(output_module, "_write", failing_write)
    out = tmp_path / "new" / "out"
    with pytest.raises(OutputError) as info:
        write_outputs(_result(), out)
    assert str(info.value) == (
        f"{out / 'requests.jsonl'}: cannot write report: No space left on device"
    )
    assert not (tmp_path / "new").exists()  # directories this call created are gone too
    assert os.listdir(tmp_path) == []


def test_a_failed_rename_removes_files_already_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_replace = os.replace
    renames: list[str] = []

    def failing_replace(src: str, dst: str) -> None:
        renames.append(str(dst))
        if len(renames) == 2:
            raise PermissionError(13, "Permission denied", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(output_module.os, "replace", failing_replace)
    with pytest.raises(OutputError) as info:
        write_outputs(_result(), tmp_path)
    assert (
        str(info.value) == f"{tmp_path / 'requests.jsonl'}: cannot write report: Permission denied"
    )
    assert os.listdir(tmp_path) == []


def test_an_unserialisable_config_fails_before_any_file_exists(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cannot write object value"):
        write_outputs(_result(config={"bad": object()}), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_output_dir_that_is_a_file_is_an_output_error(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(OutputError) as info:
        write_outputs(_result(), target)
    assert str(info.value) == f"{target}: not a directory"


def test_console_table_lists_statuses_metrics_and_engines() -> None:
    table = format_table(_result())
    assert "Replay Result" in table
    assert "  rejected:" in table
    assert "Mean TTFT (ms):" in table
    assert "79.50" in table
    assert "Engine 1 utilisation (%):" in table
    assert "Request goodput (req/s) [ttft=100]:" in table


def test_pd_phases_appear_only_for_runs_with_handoffs(tmp_path: Path) -> None:
    write_outputs(_result(), tmp_path / "agg")
    assert "pd_phases" not in json.loads((tmp_path / "agg" / "summary.json").read_text())
    trace = completed("a", arrival_ms=0, tokens_ms=[65.3687, 75.3687])
    trace.prefill_worker, trace.decode_worker = 0, 1
    trace.prefill_admit_ns, trace.prefill_done_ns = 0, 50 * MS
    trace.destination_reserved_ns = 50 * MS
    trace.transfer_done_ns = trace.decode_admit_ns = 55_368_700
    result = finalize(journal_of(trace), workload=workload_of(["a"]), meta=RunMeta(seed=0))
    write_outputs(result, tmp_path / "pd")
    phases = json.loads((tmp_path / "pd" / "summary.json").read_text())["pd_phases"]
    assert phases["prefill_compute_ms"]["mean"] == 50.0
    assert phases["transfer_ms"]["mean"] == pytest.approx(5.3687)
    assert phases["decode_first_pass_ms"]["mean"] == pytest.approx(10.0)
    engines = [(e.index, e.completed) for e in result.summary.engines]
    assert engines == [(1, 1)]  # counted on the decode engine
    assert "KV transfer (ms):" in format_table(result)


def test_token_times_can_be_written_as_runs_or_left_out(tmp_path: Path) -> None:
    write_outputs(_result(), tmp_path / "full")
    write_outputs(_result(), tmp_path / "runs", token_times="runs")
    write_outputs(_result(), tmp_path / "none", token_times="none")

    def first(name: str) -> dict[str, object]:
        lines = (tmp_path / name / "requests.jsonl").read_text().splitlines()
        return dict(json.loads(lines[0]))

    full, runs, none = first("full"), first("runs"), first("none")
    assert full["token_times_ms"] == [50.0, 60.0, 70.0] and "token_time_runs_ms" not in full
    assert runs["token_time_runs_ms"] == [[50.0, 10.0, 3]] and "token_times_ms" not in runs
    assert "token_times_ms" not in none and "token_time_runs_ms" not in none
    # the other fields keep their order and values
    assert [k for k in full if k != "token_times_ms"] == [k for k in none]
    for name in ("summary.json", "config.json"):
        assert (tmp_path / "runs" / name).read_bytes() == (tmp_path / "full" / name).read_bytes()
    with pytest.raises(ValueError, match="token_times: must be one of full, runs, none"):
        write_outputs(_result(), tmp_path / "bad", token_times="some")  # type: ignore[arg-type]
