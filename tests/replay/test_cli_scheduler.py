"""``--scheduler NAME[:key=value,...]`` and the ``scheduler`` key of a config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay._cli import EXIT_OK, EXIT_USAGE, main

FAST = ["--timing", "fixed", "--workers", "2", "--quiet", "--max-requests", "40"]


def _replay(out: Path, *args: str) -> tuple[dict[str, object], bytes]:
    assert main(["replay", *args, *FAST, "--output-dir", str(out)]) == EXIT_OK
    config = json.loads((out / "config.json").read_text())
    return config, (out / "requests.jsonl").read_bytes()


def test_the_scheduler_flag_reaches_every_engine_and_is_echoed(tmp_path: Path) -> None:
    plain_config, plain = _replay(tmp_path / "plain")
    assert "scheduler" not in plain_config["config"]  # type: ignore[operator]
    assert "scheduler" not in plain_config["topology"]["engine"]  # type: ignore[index]
    # the default named explicitly: the same run, the flag echoed as given
    named_config, named = _replay(tmp_path / "named", "--scheduler", "vllm")
    assert named == plain
    assert named_config["config"]["scheduler"] == {"name": "vllm"}  # type: ignore[index]
    config, _ = _replay(tmp_path / "whole", "--scheduler", "vllm:admit_whole_prompt=true")
    expected = {"name": "vllm", "admit_whole_prompt": True}
    assert config["config"]["scheduler"] == expected  # type: ignore[index]
    assert config["topology"]["engine"]["scheduler"] == expected  # type: ignore[index]


def test_a_config_file_sets_the_scheduler_and_the_flag_wins(tmp_path: Path) -> None:
    run_toml = tmp_path / "run.toml"
    run_toml.write_text('[scheduler]\nname = "vllm"\nevict_empty_first = true\n')
    config, _ = _replay(tmp_path / "file", "--config", str(run_toml))
    assert config["topology"]["engine"]["scheduler"] == {  # type: ignore[index]
        "name": "vllm",
        "evict_empty_first": True,
    }
    config, _ = _replay(
        tmp_path / "flag", "--config", str(run_toml), "--scheduler", "vllm:admit_whole_prompt=true"
    )
    assert config["topology"]["engine"]["scheduler"] == {  # type: ignore[index]
        "name": "vllm",
        "admit_whole_prompt": True,
    }
    # a run's config.json is a config file: it replays with the same scheduler
    again, _ = _replay(tmp_path / "again", "--config", str(tmp_path / "flag" / "config.json"))
    assert again["topology"] == config["topology"]


def test_the_pd_pools_take_the_scheduler(tmp_path: Path) -> None:
    out = tmp_path / "pd"
    args = ["replay", "--topology", "pd", "--timing", "fixed", "--quiet", "--max-requests", "20"]
    spec = "vllm:evict_empty_first=true"
    assert main([*args, "--scheduler", spec, "--output-dir", str(out)]) == EXIT_OK
    topology = json.loads((out / "config.json").read_text())["topology"]
    engines = [v for k, v in topology.items() if k.endswith("engine")]
    assert len(engines) == 2
    for engine in engines:
        assert engine["scheduler"] == {"name": "vllm", "evict_empty_first": True}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sarathi", "--scheduler: unknown scheduler 'sarathi'; known: vllm, sglang"),
        (
            "vllm:admit_whole_prompt=3",
            "--scheduler: vllm: admit_whole_prompt: must be true or false, got 3",
        ),
        (
            "vllm:budget=3",
            "--scheduler: vllm: got an unexpected keyword argument 'budget'",
        ),
    ],
)
def test_a_bad_scheduler_is_one_line_and_exit_status_2(
    spec: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["replay", "--scheduler", spec, *FAST, "--output-dir", str(out)]) == EXIT_USAGE
    assert capsys.readouterr().err == f"simclock replay: error: {message}\n"
    assert not out.exists()


def test_sglang_is_selected_by_flag_and_config_file_with_blocks_of_its_page_size(
    tmp_path: Path,
) -> None:
    config, flagged = _replay(tmp_path / "flag", "--scheduler", "sglang:schedule_policy=lpm")
    engine = config["topology"]["engine"]  # type: ignore[index]
    assert engine["scheduler"] == {"name": "sglang", "schedule_policy": "lpm"}
    assert engine["block_size"] == 1  # SGLang's default page size sizes the blocks
    assert flagged != _replay(tmp_path / "vllm")[1]  # other rules, other results
    run_toml = tmp_path / "run.toml"
    run_toml.write_text('[scheduler]\nname = "sglang"\nschedule_policy = "lpm"\n')
    from_file, filed = _replay(tmp_path / "file", "--config", str(run_toml))
    assert from_file["topology"] == config["topology"] and filed == flagged
    paged, _ = _replay(tmp_path / "paged", "--scheduler", "sglang:page_size=16")
    assert paged["topology"]["engine"]["block_size"] == 16  # type: ignore[index]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--scheduler", "sglang:schedule_policy=dfs", *FAST],
            "--scheduler: sglang: schedule_policy: must be 'lpm' or 'fcfs', got 'dfs'",
        ),
        (
            ["--scheduler", "sglang:page_size=x", *FAST],
            "--scheduler: sglang: page_size: must be an integer, got 'x'",
        ),
        (
            ["--scheduler", "sglang", "--topology", "pd", "--timing", "fixed", "--quiet"],
            "SGLangScheduler runs aggregated engines only, not role 'prefill'",
        ),
    ],
)
def test_a_bad_sglang_scheduler_is_one_line_and_exit_status_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["replay", *args, "--output-dir", str(out)]) == EXIT_USAGE
    assert capsys.readouterr().err == f"simclock replay: error: {message}\n"
    assert not out.exists()
