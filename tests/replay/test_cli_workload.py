"""``simclock replay``: synthetic workloads, load-mode flags, reader options, ``[workload]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replay import OUTPUT_FILES
from replay._cli import EXIT_OK, EXIT_USAGE, main
from tests.datasets import MOONCAKE, head_lines

FAST = ["--timing", "fixed", "--workers", "2", "--quiet"]
SYNTHETIC = "count=30 arrivals=poisson(5) input=lognormal(2000,1000) output=20"


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """The first 20 rows of the bundled sample (real Mooncake rows)."""
    path = tmp_path / "small.jsonl"
    path.write_text(head_lines(MOONCAKE, 20))
    return path


def _call(t: float, *, size: int = 128) -> dict[str, Any]:
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": size,
        "out": 5,
        "api_time": 1,
        "hash_ids": list(range(1, size // 64 + 1)),
    }


@pytest.fixture
def weka_plays(tmp_path: Path) -> Path:
    """Three Weka plays (a .jsonl, one play a line); play p1 has a subagent (§8 example c)."""
    marker = {
        "t": 5,
        "type": "subagent",
        "agent_id": "agent_001",
        "status": "completed",
        "duration_ms": 4000,
        "requests": [_call(0), _call(2)],
    }
    plays = [
        {
            "id": name,
            "models": ["m"],
            "block_size": 64,
            "hash_id_scope": "local",
            "requests": requests,
        }
        for name, requests in (
            ("p1", [_call(0), marker, _call(8), _call(12)]),
            ("p2", [_call(0), _call(3), _call(6)]),
            ("p3", [_call(0), _call(1, size=192)]),
        )
    ]
    path = tmp_path / "plays.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in plays))
    return path


def _replay(tmp_path: Path, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``simclock replay ARGS``; return (config.json, summary.json)."""
    out = tmp_path / "out"
    assert main(["replay", *args, *FAST, "--output-dir", str(out)]) == EXIT_OK
    config = json.loads((out / "config.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    return config, summary


def test_help_lists_every_workload_flag_with_its_meaning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = capsys.readouterr().out
    for flag, words in (
        ("--synthetic SPEC", "generate the workload"),
        ("--speedup X", "times the trace's pace"),
        ("--concurrency N", "closed loop"),
        ("--target-rate R", "per second"),
        ("--arrivals PROCESS", "re-time session starts"),
        ("--max-requests N", "never_issued"),
        ("--max-sessions N", "first N sessions"),
        ("--max-virtual-time SECONDS", "ones end incomplete"),
        ("--lanes N", "at most N plays at once"),
        ("--snapshots", "seeded point"),
        ("--snapshot-seed N", "implies --snapshots"),
        ("--warmup", "prime the caches"),
        ("--warmup-repeats N", "warm-up requests per lane"),
        ("--block-size T", "tokens per content id"),
        ("--source LABEL", "source label"),
        ("--nested-basis", "weka: the clock of subagent calls"),
        ("--subagent-join", "weka: recorded makes"),
        ("--pacing", "weka: recorded keeps"),
        ("--failures", "burstgpt: drop failed requests"),
    ):
        assert flag in text, flag
        assert words in " ".join(text.split()), words
    assert "[workload] table" in text
    assert "count and arrivals" in text


def test_synthetic_flag_generates_the_workload_and_echoes_the_spec(tmp_path: Path) -> None:
    config, summary = _replay(tmp_path, "--synthetic", SYNTHETIC, "--seed", "4")
    assert summary["workload"] == {"source": "syn", "format": "synthetic", "requests": 30}
    assert summary["status_counts"]["completed"] == 30
    assert config["config"]["workload"] == {"synthetic": SYNTHETIC}
    assert config["config"]["trace"] is None
    lines = (tmp_path / "out" / "requests.jsonl").read_text().splitlines()
    assert [json.loads(line)["request_id"] for line in lines[:2]] == ["syn:0", "syn:1"]
    assert {json.loads(line)["output_length"] for line in lines} == {20}


def test_a_synthetic_runs_config_json_replays_to_the_same_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    args = ["replay", "--synthetic", SYNTHETIC, "--speedup", "2", *FAST]
    assert main([*args, "--output-dir", str(first)]) == EXIT_OK
    again = ["replay", "--config", str(first / "config.json"), "--quiet"]
    assert main([*again, "--output-dir", str(second)]) == EXIT_OK
    for name in OUTPUT_FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_workload_table_in_toml_sets_synthetic_and_load_mode(tmp_path: Path) -> None:
    config_file = tmp_path / "run.toml"
    config_file.write_text(
        '[timing]\ntype = "fixed"\n'
        "[workload]\nspeedup = 2.5\nmax_requests = 10\n"
        '[workload.synthetic]\ncount = 25\narrivals = "constant(10)"\ninput = 300\n'
        "output = 4\n"
    )
    config, summary = _replay(tmp_path, "--config", str(config_file))
    assert config["config"]["workload"] == {
        "synthetic": {"count": 25, "arrivals": "constant(10)", "input": 300, "output": 4},
        "speedup": 2.5,
        "max_requests": 10,
    }
    assert config["load"]["speedup"] == 2.5
    assert summary["status_counts"]["completed"] == 10
    assert summary["status_counts"]["never_issued"] == 15


def test_workload_table_in_json_and_flags_override_it_key_by_key(
    small_trace: Path, tmp_path: Path
) -> None:
    config_file = tmp_path / "run.json"
    config_file.write_text(
        json.dumps({"trace": str(small_trace), "workload": {"speedup": 2, "max_requests": 12}})
    )
    config, summary = _replay(tmp_path, "--config", str(config_file), "--speedup", "4")
    assert config["config"]["workload"] == {"speedup": 4.0, "max_requests": 12}
    assert config["load"]["speedup"] == 4.0  # the flag wins
    assert config["load"]["max_requests"] == 12  # the file's value stays
    assert summary["status_counts"]["never_issued"] == 8


def test_a_trace_on_the_command_line_wins_over_a_synthetic_config(
    small_trace: Path, tmp_path: Path
) -> None:
    config_file = tmp_path / "run.toml"
    config_file.write_text(f'[workload]\nsynthetic = "{SYNTHETIC}"\n')
    config, summary = _replay(tmp_path, str(small_trace), "--config", str(config_file))
    assert summary["workload"]["source"] == "small"
    assert "workload" not in config["config"]


@pytest.mark.parametrize(
    ("args", "echo", "load"),
    [
        (["--speedup", "3"], {"speedup": 3.0}, {"speedup": 3.0}),
        (["--concurrency", "2"], {"concurrency": 2}, {"concurrency": 2}),
        (["--target-rate", "20"], {"target_rate": 20.0}, {"target_rate": 20.0}),
        (["--arrivals", "poisson(8)"], {"arrivals": "poisson(8)"}, {}),
        (["--max-requests", "5"], {"max_requests": 5}, {"max_requests": 5}),
        (["--max-sessions", "3"], {"max_sessions": 3}, {"max_sessions": 3}),
    ],
)
def test_each_load_flag_is_echoed_and_reaches_the_load_mode(
    small_trace: Path, tmp_path: Path, args: list[str], echo: dict[str, Any], load: dict[str, Any]
) -> None:
    config, summary = _replay(tmp_path, str(small_trace), *args)
    assert config["config"]["workload"] == echo
    for key, value in load.items():
        assert config["load"][key] == value
    assert sum(summary["status_counts"].values()) == 20


def test_max_virtual_time_is_echoed_in_the_workload_table(
    small_trace: Path, tmp_path: Path
) -> None:
    config, summary = _replay(tmp_path, str(small_trace), "--max-virtual-time", "2")
    assert config["config"]["workload"] == {"max_virtual_time_s": 2.0}
    assert config["max_virtual_time_s"] == 2.0
    counts = summary["status_counts"]
    assert counts["never_issued"] + counts["incomplete"] > 0
    assert sum(counts.values()) == 20


def test_max_requests_leaves_the_rest_never_issued(small_trace: Path, tmp_path: Path) -> None:
    _, summary = _replay(tmp_path, str(small_trace), "--max-requests", "5")
    assert summary["status_counts"]["completed"] == 5
    assert summary["status_counts"]["never_issued"] == 15


def test_arrivals_retime_roots_and_speedup_compresses_them(
    small_trace: Path, tmp_path: Path
) -> None:
    def last_arrival(*args: str) -> float:
        _replay(tmp_path, str(small_trace), *args)
        lines = (tmp_path / "out" / "requests.jsonl").read_text().splitlines()
        return max(json.loads(line)["arrival_ms"] for line in lines)

    recorded = last_arrival()
    assert last_arrival("--speedup", "4") == pytest.approx(recorded / 4, abs=1.0)
    assert last_arrival("--arrivals", "constant(1000)") == pytest.approx(19.0, abs=1.0)
    assert last_arrival("--target-rate", "1000") < recorded / 4


def test_reader_options_reach_the_reader(
    small_trace: Path, weka_plays: Path, tmp_path: Path
) -> None:
    config, _ = _replay(tmp_path, str(small_trace), "--source", "mc", "--block-size", "1024")
    assert config["config"]["workload"] == {"block_size": 1024, "source": "mc"}
    first = json.loads((tmp_path / "out" / "requests.jsonl").read_text().splitlines()[0])
    assert first["request_id"] == "mc:1"
    weka_args = ["--nested-basis", "relative", "--subagent-join", "recorded"]
    config, summary = _replay(tmp_path, str(weka_plays), *weka_args, "--pacing", "dependencies")
    assert config["config"]["workload"] == {
        "nested_basis": "relative",
        "subagent_join": "recorded",
        "pacing": "dependencies",
    }
    assert summary["status_counts"]["completed"] == 10


def test_burstgpt_failures_option(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,10,3,13,Conversation log\n"
        "6.5,GPT-4,20,0,20,Conversation log\n"
        "7,GPT-4,30,4,34,API log\n"
    )
    _, summary = _replay(tmp_path, str(path))
    assert summary["workload"]["requests"] == 2
    config, summary = _replay(tmp_path, str(path), "--failures", "prefill_only")
    assert config["config"]["workload"] == {"failures": "prefill_only"}
    assert summary["workload"]["requests"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speedup", "0"], "argument --speedup: must be a finite number > 0, got 0"),
        (["--concurrency", "0"], "argument --concurrency: must be >= 1, got 0"),
        (["--target-rate", "x"], "argument --target-rate: 'x' is not a number"),
        (["--max-requests", "-1"], "argument --max-requests: must be >= 0, got -1"),
        (["--max-sessions", "two"], "argument --max-sessions: 'two' is not an integer"),
        (["--lanes", "0"], "argument --lanes: must be >= 1, got 0"),
        (["--snapshot-seed", "-3"], "argument --snapshot-seed: must be >= 0, got -3"),
        (["--block-size", "0"], "argument --block-size: must be >= 1, got 0"),
        (
            ["--pacing", "fast"],
            "argument --pacing: invalid choice: 'fast' (choose from 'recorded', 'dependencies')",
        ),
        (["--speedup", "2", "--concurrency", "2"], "--speedup: not allowed with concurrency"),
        (
            ["--target-rate", "5", "--arrivals", "poisson(5)"],
            "--target-rate: not allowed with arrivals",
        ),
        (["--arrivals", "poisson(x)"], "--arrivals: 'x' is not a number"),
        (["--warmup"], "--warmup: needs snapshots"),
        (["--snapshots"], "--snapshots: needs lanes"),
        (["--lanes", "2"], "lanes: the workload has no plays"),
        (["--failures", "drop"], "--failures: only used with the burstgpt format, not mooncake"),
        (
            ["--nested-basis", "auto"],
            "--nested-basis: only used with the weka format, not mooncake",
        ),
        (["--synthetic", "count=5"], "--synthetic: arrivals: required"),
        (
            ["--synthetic", "count=5 arrivals=poisson(1) colour=red"],
            "--synthetic: colour: unknown synthetic option",
        ),
        (
            ["--synthetic", SYNTHETIC, "--block-size", "8"],
            "--block-size: only used with a trace, not with synthetic",
        ),
        (["TRACE.jsonl", "--synthetic", SYNTHETIC], "--synthetic: not allowed with a TRACE"),
    ],
)
def test_bad_workload_input_is_one_line_with_exit_2_and_no_files(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["replay", *args, "--timing", "fixed", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.count("\n") == 1
    assert err.strip().endswith(message), err
    assert not out.exists()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[workload]\nspeed = 2\n", "run.toml: workload.speed: unknown key; known: synthetic"),
        (
            "[workload]\nspeedup = -1\n",
            "run.toml: workload.speedup: must be a finite number > 0, got -1",
        ),
        (
            "[workload]\nlanes = true\n",
            "run.toml: workload.lanes: must be an integer >= 1, got True",
        ),
        (
            "[workload]\nsnapshots = 1\nlanes = 1\n",
            "run.toml: workload.snapshots: must be true or false, got 1",
        ),
        (
            '[workload]\npacing = "fast"\n',
            "run.toml: workload.pacing: must be one of recorded, dependencies, got 'fast'",
        ),
        (
            "[workload]\nprofile = {length = 3}\nlanes = 1\nsnapshots = true\n",
            "run.toml: workload.profile: unknown profile option",
        ),
        (
            'trace = "x.jsonl"\n[workload]\nsynthetic = "count=1 arrivals=poisson(1)"\n',
            "run.toml: workload.synthetic: not allowed with trace",
        ),
        ("workload = 3\n", "run.toml: workload: must be a table"),
    ],
)
def test_bad_workload_table_is_one_line_naming_file_and_key(
    table: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "run.toml"
    config_file.write_text(table)
    code = main(["replay", "--config", str(config_file), "--timing", "fixed"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.count("\n") == 1
    assert message in err.replace(str(config_file), "run.toml"), err


def test_a_synthetic_workload_draws_from_its_own_run_stream() -> None:
    import numpy as np

    from loadgen import generate_synthetic, parse_synthetic
    from replay import SEED_STREAMS
    from replay._cli import _read_workload
    from replay._config import resolve_config

    spec = "count=20 arrivals=poisson(5) input=uniform(10,500) output=uniform(1,50)"
    streams = np.random.SeedSequence(11).spawn(len(SEED_STREAMS))
    expected = generate_synthetic(
        parse_synthetic(spec), seed=streams[SEED_STREAMS.index("workload")]
    )
    # the policy stream (child 0) would give other arrivals
    clashing = generate_synthetic(parse_synthetic(spec), seed=11)
    got = _read_workload(resolve_config({"workload": {"synthetic": spec}, "seed": 11}))
    assert [r.input_length for r in got.requests] == [r.input_length for r in expected.requests]
    assert [r.arrival for r in got.requests] == [r.arrival for r in expected.requests]
    assert [r.arrival for r in got.requests] != [r.arrival for r in clashing.requests]
