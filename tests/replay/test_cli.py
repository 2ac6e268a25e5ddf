"""``simclock replay``: defaults, options, config files, outputs and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import replay._cli as cli
import simclock
from loadgen import dataset_path
from replay import OUTPUT_FILES, ReplayFailedError
from replay._cli import EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, main
from tests.datasets import MOONCAKE, head_lines

SAMPLE = dataset_path("mooncake-sample")


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The first 20 rows of the Mooncake conversation trace."""
    path = tmp_path / "small.jsonl"
    path.write_text(head_lines(MOONCAKE, 20))
    return path


def _python_m(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simclock", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_no_arguments_replays_the_bundled_sample_and_prints_the_table() -> None:
    out = _python_m("replay")
    assert out.returncode == EXIT_OK, out.stderr
    assert out.stderr == ""
    assert "Replay Result" in out.stdout
    assert "mooncake_sample (mooncake)" in out.stdout
    assert "4 engines, RooflineTiming, round_robin" in out.stdout
    assert "Requests:                                199" in out.stdout
    assert "  completed:                             199" in out.stdout
    assert "Mean TTFT (ms):" in out.stdout


def test_help_explains_every_option() -> None:
    out = _python_m("replay", "--help")
    assert out.returncode == 0
    for option in (
        "TRACE",
        "--format",
        "--config",
        "--workers",
        "--policy",
        "--timing",
        "--gpu",
        "--model",
        "--seed",
        "--slo",
        "--output-dir",
        "--max-virtual-time",
        "--quiet",
    ):
        assert option in out.stdout
    for option in ("--timeline", "--progress", "--log-format", "--log-level"):
        assert option in out.stdout
    for name in ("round_robin", "kv_aware", "session_affinity", "roofline", "table", "mooncake"):
        assert name in out.stdout
    assert "exit status" in out.stdout


def test_output_dir_gets_the_three_files_and_config_echoes_the_flags(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "replay",
            str(small_trace),
            "--workers",
            "2",
            "--policy",
            "kv_aware",
            "--timing",
            "fixed:prefill_ms=40",
            "--seed",
            "5",
            "--slo",
            "ttft=500,e2e=20000",
            "--output-dir",
            str(out),
        ]
    )
    assert code == EXIT_OK
    assert sorted(os.listdir(out)) == sorted(OUTPUT_FILES)
    config = json.loads((out / "config.json").read_text())
    assert config["seed"] == 5
    assert config["policy"] == "kv_aware"
    assert config["topology"]["workers"] == 2
    cli_config = config["config"]
    assert cli_config["timing"] == {"type": "fixed", "prefill_ms": 40}
    assert cli_config["slo"] == "ttft=500,e2e=20000"
    assert "output_dir" not in cli_config
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status_counts"]["completed"] == 20
    assert summary["slo"] == {"ttft_ms": 500.0, "e2e_ms": 20000.0}
    assert summary["goodput"]["count"] >= 0
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 20
    assert json.loads(lines[0])["request_id"] == "small:1"
    assert "Request goodput (req/s) [ttft=500,e2e=20000]" in capsys.readouterr().out


def test_flags_override_the_config_file(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "run.toml"
    config_file.write_text(
        f'trace = "{small_trace}"\nworkers = 3\npolicy = "least_loaded"\nseed = 9\n'
        '[timing]\ntype = "fixed"\nprefill_ms = 30\ndecode_ms = 5\n'
        "[engine]\nmax_num_batched_tokens = 4096\n"
    )
    out = tmp_path / "out"
    code = main(
        [
            "replay",
            "--config",
            str(config_file),
            "--workers",
            "2",
            "--output-dir",
            str(out),
            "--quiet",
        ]
    )
    assert code == EXIT_OK
    assert capsys.readouterr().out == ""
    config = json.loads((out / "config.json").read_text())
    assert config["topology"]["workers"] == 2  # the flag wins
    assert config["policy"] == "least_loaded"  # the file's value stays
    assert config["seed"] == 9
    assert config["topology"]["engine"]["max_num_batched_tokens"] == 4096
    assert config["config"]["timing"] == {"type": "fixed", "prefill_ms": 30, "decode_ms": 5}


def test_an_earlier_runs_config_json_replays_to_the_same_bytes(
    small_trace: Path, tmp_path: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    args = ["replay", str(small_trace), "--policy", "random", "--seed", "3", "--quiet"]
    assert main([*args, "--output-dir", str(first)]) == EXIT_OK
    again = ["replay", "--config", str(first / "config.json"), "--quiet"]
    assert main([*again, "--output-dir", str(second)]) == EXIT_OK
    for name in OUTPUT_FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_outputs_are_byte_identical_across_pythonhashseed(
    small_trace: Path, tmp_path: Path
) -> None:
    digests = []
    for hash_seed in ("0", "12345"):
        out = tmp_path / f"out{hash_seed}"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = _python_m(
            "replay",
            str(small_trace),
            "--policy",
            "kv_aware:temperature=0.5",
            "--seed",
            "11",
            "--output-dir",
            str(out),
            "--quiet",
            env=env,
        )
        assert done.returncode == EXIT_OK, done.stderr
        digests.append({name: (out / name).read_bytes() for name in OUTPUT_FILES})
    assert digests[0] == digests[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "simclock replay: error: argument --workers: must be >= 1, got 0"),
        (["--seed", "x"], "simclock replay: error: argument --seed: 'x' is not an integer"),
        (["--bogus"], "simclock replay: error: unrecognized arguments: --bogus"),
        (
            ["--format", "csv"],
            "simclock replay: error: argument --format: unknown format 'csv'; known: "
            "auto, mooncake, mooncake-delta, agentic, weka, azure, burstgpt, vidur",
        ),
        (
            ["--policy", "fastest"],
            "simclock replay: error: policy: unknown policy 'fastest'; known: round_robin, "
            "random, least_loaded, kv_aware, session_affinity, or path/to/file.py:ClassName or "
            "package.module:ClassName",
        ),
        (
            ["--timing", "fixed:speed=3"],
            "simclock replay: error: --timing: fixed: got an unexpected keyword argument 'speed'",
        ),
        (
            ["--timing", "roofline", "--gpu", "H900"],
            "simclock replay: error: --timing: roofline: unknown GPU 'H900'; known: A100, B200, "
            "H100, H200, L40S",
        ),
        (["--slo", "ttft=soon"], "simclock replay: error: --slo: ttft: 'soon' is not a number"),
        (
            ["--slo", "p99=5"],
            "simclock replay: error: --slo: unknown metric 'p99' (expected ttft, tpot, e2e)",
        ),
        (
            ["/no/such/trace.jsonl"],
            "simclock replay: error: /no/such/trace.jsonl: No such file or directory",
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_exit_2_and_no_files(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["replay", *args, "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == EXIT_USAGE
    assert captured.err == message + "\n"
    assert captured.out == ""
    assert not out.exists()


def test_malformed_trace_names_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": 10, "output_length": 2.5, "hash_ids": [1]}\n'
    )
    out = tmp_path / "out"
    code = main(["replay", str(trace), "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith(f"simclock replay: error: {trace}:2: output_length: ")
    assert err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("run.toml", "workers = [", "invalid TOML: "),
        ("run.toml", "wrokers = 2\n", "wrokers: unknown key; known: trace, format, workers"),
        ("run.toml", "workers = 2.5\n", "workers: must be an integer >= 1, got 2.5"),
        ("run.toml", "[engine]\nnum_blocks = 0\n", "engine: num_blocks: must be an int >= 1"),
        ("run.json", '{"workers": 2,\n "seed": }', ":2: -: invalid JSON: Expecting value"),
        ("run.json", "[1, 2]", ":1: -: the configuration must be a JSON object"),
        ("run.yaml", "workers: 2", ": a config file must end in .toml or .json"),
    ],
)
def test_bad_config_file_is_one_line_naming_the_file_with_exit_2(
    name: str, text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / name
    config.write_text(text)
    code = main(["replay", "--config", str(config), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert message in err
    assert err.count("\n") == 1
    assert err.startswith("simclock replay: error: ")
    assert not (tmp_path / "out").exists()


def test_missing_config_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.toml"
    assert main(["replay", "--config", str(missing)]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        f"simclock replay: error: {missing}: No such file or directory\n"
    )


def test_output_dir_that_is_a_file_is_exit_2_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "taken"
    target.write_text("keep me")
    assert main(["replay", "--output-dir", str(target)]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        f"simclock replay: error: {target}: --output-dir is not a directory\n"
    )
    assert target.read_text() == "keep me"


def test_internal_error_exits_70_and_says_it_is_a_bug(
    small_trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise simclock.InternalError("engine 0 lost request 'x'")

    monkeypatch.setattr(cli, "_execute", broken)
    assert main(["replay", str(small_trace)]) == EXIT_INTERNAL
    assert capsys.readouterr().err == (
        "simclock: internal error: engine 0 lost request 'x' -- this is a bug in simclock; "
        "please report it\n"
    )


def test_unexpected_exception_is_an_internal_error_too(
    small_trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("oops")

    monkeypatch.setattr(cli, "_execute", broken)
    assert main(["replay", str(small_trace)]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.endswith(
        "simclock: internal error: KeyError: 'oops' -- this is a bug in simclock; "
        "please report it\n"
    )


def test_a_failed_replay_still_prints_and_writes_its_report_and_exits_1(
    small_trace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    real_execute = cli._execute

    def failing(*args: object, **kwargs: object) -> object:
        result = real_execute(*args, **kwargs)  # type: ignore[arg-type]
        raise ReplayFailedError("replay failed: PolicyHookError: hook raised", result=result)

    monkeypatch.setattr(cli, "_execute", failing)
    out = tmp_path / "out"
    assert main(["replay", str(small_trace), "--output-dir", str(out)]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert "Replay Result" in captured.out
    assert captured.err == "simclock replay: replay failed: PolicyHookError: hook raised\n"
    assert sorted(os.listdir(out)) == sorted(OUTPUT_FILES)


def test_ctrl_c_exits_130_without_a_traceback(
    small_trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_execute", interrupted)
    assert main(["replay", str(small_trace)]) == 130
    assert capsys.readouterr().err == "simclock: interrupted before the replay started\n"


def test_inspect_and_replay_are_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_OK
    out = capsys.readouterr().out
    assert "replay" in out
    assert "inspect" in out
    assert main(["inspect", str(SAMPLE)]) == EXIT_OK
    assert "requests             199" in capsys.readouterr().out


def test_timeline_flag_writes_a_timeline_beside_unchanged_outputs(
    small_trace: Path, tmp_path: Path
) -> None:
    base = ["replay", str(small_trace), "--quiet", "--progress", "none"]
    assert main([*base, "--output-dir", str(tmp_path / "plain")]) == EXIT_OK
    timeline = tmp_path / "timeline.json"
    observed = [*base, "--output-dir", str(tmp_path / "seen"), "--timeline", str(timeline)]
    assert main(observed) == EXIT_OK
    assert json.loads(timeline.read_text())["traceEvents"]
    for name in OUTPUT_FILES:
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "seen" / name).read_bytes()


def test_an_empty_timeline_window_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--timeline-start-s", "5", "--timeline-end-s", "1"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "simclock replay: error: timeline window ends (1000000000 ns) before it starts "
        "(5000000000 ns)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["inspect", "x.jsonl", "--bogus"],
            "simclock inspect: error: unrecognized arguments: --bogus",
        ),
        (["--bogus"], "simclock: error: unrecognized arguments: --bogus"),
        (["nothing"], "simclock: error: argument COMMAND: invalid choice: 'nothing'"),
    ],
)
def test_usage_errors_name_the_command_they_belong_to(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_pd_topology_flags_build_two_pools_and_report_their_phases(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["replay", str(small_trace), "--topology", "pd", "--prefill-workers", "1"]
    args += ["--decode-workers", "2", "--kv-bandwidth-gbps", "50", "--output-dir", str(out)]
    assert main([*args, "--progress", "none"]) == EXIT_OK
    table = capsys.readouterr().out
    assert "1 prefill + 2 decode engines, RooflineTiming, round_robin" in table
    assert "KV transfer (ms):" in table
    config = json.loads((out / "config.json").read_text())
    assert config["topology"]["type"] == "pd"
    assert (config["topology"]["prefill_workers"], config["topology"]["decode_workers"]) == (1, 2)
    assert config["topology"]["link"]["bandwidth_gbps"] == 50.0
    assert config["config"]["topology"] == "pd"
    assert "workers" not in config["config"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status_counts"]["completed"] == 20
    assert summary["pd_phases"]["transfer_ms"]["count"] == 20
    assert [e["completed"] for e in summary["engines"]] == [0, 10, 10]
    record = json.loads((out / "requests.jsonl").read_text().splitlines()[0])
    assert record["handoff"]["prefill_worker"] == 0
    assert record["handoff"]["decode_worker"] in (1, 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--topology", "pd", "--workers", "3"],
            "simclock replay: error: --workers: not used by the pd topology (see prefill_workers)",
        ),
        (
            ["--decode-workers", "2"],
            "simclock replay: error: --decode-workers: only used with the pd topology",
        ),
        (
            ["--topology", "mesh"],
            "simclock replay: error: argument --topology: invalid choice: 'mesh'",
        ),
    ],
)
def test_pd_flag_misuse_is_a_usage_error(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", *args]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1
