"""Configuration errors name their file (or flag) and key; options past a documented limit
are refused before anything is read or run."""

from __future__ import annotations

from pathlib import Path

import pytest

import replay._cli as cli
from replay._cli import EXIT_USAGE, main
from replay._config import resolve_config
from replay._limits import CLOCK_RANGE_S, MAX_COUNT, MAX_WORKERS
from replay.config import ConfigError

BIG = 10**23


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[policy]\nname = "kv_aware"\ntemperature = "hot"\n',
            "run.toml: policy: kv_aware: temperature: must be a number, got 'hot'",
        ),
        (
            '[policy]\nname = "kv_aware"\ntemperature = -1\n',
            "run.toml: policy: kv_aware: temperature: must be finite and >= 0, got -1",
        ),
        (
            "[engine]\nnum_blocks = -3\n",
            "run.toml: engine: num_blocks: must be an int >= 1, got -3",
        ),
        (
            '[engine]\nblock_size = "x"\n',
            "run.toml: engine: block_size: must be an integer, got 'x'",
        ),
        (
            '[engine]\nreserve_one_per_pass = "yes"\n',
            "run.toml: engine: reserve_one_per_pass: must be true or false, got 'yes'",
        ),
        (
            'scheduler = "vllm:admit_whole_prompt=yes"\n',
            "run.toml: scheduler: vllm: admit_whole_prompt: must be true or false, got 'yes'",
        ),
        (
            'scheduler = "sarathi"\n',
            "run.toml: scheduler: unknown scheduler 'sarathi'; known: vllm, sglang",
        ),
        (
            'scheduler = "vllm:max_tokens=3"\n',
            "run.toml: scheduler: vllm: got an unexpected keyword argument 'max_tokens'",
        ),
        (
            '[engine]\nscheduler = "vllm"\n',
            "run.toml: engine: scheduler: not an engine field; set the top-level scheduler key "
            "(or --scheduler)",
        ),
        (
            'timing = "fixed:prefill_ms=-1"\n',
            "run.toml: timing: fixed: prefill_ms: must be a finite number >= 0, got -1",
        ),
        (
            'model = "llama-3.1-70b"\n',
            "run.toml: model: llama-3.1-70b does not fit on one H100 with room for KV",
        ),
        (
            "[workload]\nspeedup = -2\n",
            "run.toml: workload.speedup: must be a finite number > 0, got -2",
        ),
        (f"workers = {BIG}\n", f"run.toml: workers: must be at most 4,096, got {BIG}"),
        (
            "[workload]\nspeedup = 1e-300\n",
            "run.toml: workload.speedup: must be between 1e-06 and 1e+09, got 1e-300",
        ),
        (
            f"[workload]\nlanes = {BIG}\n",
            f"run.toml: workload.lanes: must be at most 1,000,000, got {BIG}",
        ),
    ],
)
def test_a_config_file_error_names_the_file_and_the_key(
    text: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("run.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        resolve_config(cli.load_config_file("run.toml"), source="run.toml")
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--policy", "kv_aware:temperature=hot"],
            "--policy: kv_aware: temperature: must be a number, got 'hot'",
        ),
        (
            ["--timing", "fixed:decode_ms=-5"],
            "--timing: fixed: decode_ms: must be a finite number >= 0, got -5",
        ),
        (["--workers", str(BIG)], f"--workers: must be at most {MAX_WORKERS:,}, got {BIG}"),
        (
            ["--topology", "pd", "--decode-workers", str(BIG)],
            f"--decode-workers: must be at most 4,096, got {BIG}",
        ),
        (["--speedup", "1e-300"], "--speedup: must be between 1e-06 and 1e+09, got 1e-300"),
        (["--speedup", "1e300"], "--speedup: must be between 1e-06 and 1e+09, got 1e+300"),
        (
            ["--topology", "pd", "--kv-bandwidth-gbps", "1e-300"],
            "--kv-bandwidth-gbps: must be between 1e-06 and 1e+09, got 1e-300",
        ),
        (
            ["--max-virtual-time", "1e308"],
            f"--max-virtual-time: must be at most {CLOCK_RANGE_S:.4g} s (the virtual clock's "
            "range), got 1e+308",
        ),
        (
            ["--target-rate", "1e-300"],
            "--target-rate: must be between 1e-06 and 1e+09, got 1e-300",
        ),
        (
            ["--concurrency", str(BIG)],
            f"--concurrency: must be at most {MAX_COUNT:,}, got {BIG}",
        ),
        (
            ["--warmup-repeats", str(BIG)],
            f"--warmup-repeats: must be at most 1,000,000, got {BIG}",
        ),
    ],
)
def test_a_bad_or_absurd_option_is_refused_up_front_with_exit_2(
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trace was read")

    monkeypatch.setattr(cli, "_read_workload", no_read)
    assert main(["replay", *argv]) == EXIT_USAGE
    assert capsys.readouterr().err == f"simclock replay: error: {message}\n"


def test_a_pace_that_releases_past_the_clock_range_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the replay ran")

    monkeypatch.setattr(cli, "_execute", no_run)
    # 12,031 sessions at one per 10^6 s end after 1.2e10 s, past the clock's 9.2e9 s.
    assert main(["replay", "mooncake-conversation", "--target-rate", "1e-6"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "simclock replay: error: --target-rate: the last request would be released at "
        "1.203e+10 s of virtual time, past the virtual clock's range (9.223e+09 s)\n"
    )
