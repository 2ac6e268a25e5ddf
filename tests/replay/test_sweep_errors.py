"""A bad sweep file or option: one line naming the file, the line and the key; exit status 2;
nothing written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from replay import RayExecutor, SweepSpec, sweep
from replay._cli import EXIT_USAGE, main
from replay._run_keys import RUN_KEYS
from replay.config import ConfigError

CASES = {
    "an unknown top-level key": (
        'output_dir = "x"\noutputdir = "y"\n',
        "s.toml:2: outputdir: unknown key; known: output_dir, seeds, base, grid",
    ),
    "a grid value a run cannot use": (
        "[base]\nworkers = 2\n\n[grid]\nworkers = [2, 0]\n",
        "s.toml:5: grid.workers: must be an integer >= 1, got 0",
    ),
    "a grid entry that is not a list": (
        "[grid]\nworkers = 3\n",
        "s.toml:2: grid.workers: must be a non-empty list of values, got 3",
    ),
    "an unknown key of the base": (
        "[base]\nworkers = 2\nwokers = 2\n",
        # every key a configuration file takes, in their declared order
        "s.toml:3: base.wokers: unknown key; known: " + ", ".join(k.name for k in RUN_KEYS),
    ),
    "an unknown policy in the grid": (
        '[grid]\npolicy = ["round_robin", "nope"]\n',
        "s.toml:2: grid.policy: unknown policy 'nope'; known: round_robin, random, "
        "least_loaded, kv_aware, session_affinity, or path/to/file.py:ClassName or "
        "package.module:ClassName",
    ),
    "a bad key inside a table": (
        '[grid]\nengine.max_num_seqs = [1, "x"]\n',
        "s.toml:2: grid.engine.max_num_seqs: must be an integer, got 'x'",
    ),
    "a bad workload key in a sub-table of the grid": (
        "[grid.workload]\nspeedup = [1, -2]\n",
        "s.toml:2: grid.workload.speedup: must be a finite number > 0, got -2",
    ),
    "a key inside a value that is not a table": (
        '[base]\npolicy = "kv_aware"\n[grid]\npolicy.temperature = [1]\n',
        "s.toml:4: grid.policy.temperature: base.policy is 'kv_aware', not a table",
    ),
    "a negative seed": (
        "seeds = [1, -1]\n",
        "s.toml:1: seeds: must hold integers >= 0, got -1",
    ),
    "seeds and a base seed": (
        "seeds = [1]\n[base]\nseed = 2\n",
        "s.toml:3: base.seed: the seeds are swept (seeds): leave the base's seed out",
    ),
    "a seed axis in the grid": (
        "[grid]\nseed = [1]\n",
        "s.toml:2: grid.seed: set the seeds with the top-level seeds list",
    ),
    "an output directory in the base": (
        '[base]\noutput_dir = "x"\n',
        "s.toml:2: base.output_dir: not used in a sweep: set the top-level output_dir",
    ),
    "a trace that does not exist": (
        '[base]\nworkers = 1\ntrace = "missing.jsonl"\n',
        "s.toml:3: base.trace: missing.jsonl: no such file or bundled dataset",
    ),
    "invalid TOML": (
        "[base\n",
        "s.toml: invalid TOML: Expected ']' at the end of a table declaration "
        "(at line 1, column 6)",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_sweep_file_is_one_line_and_exit_2_with_nothing_written(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text, message = CASES[case]
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(text)
    assert main(["sweep", "s.toml", "--output-dir", "out"]) == EXIT_USAGE
    assert capsys.readouterr() == ("", f"simclock sweep: error: {message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["s.toml"], "s.toml: output_dir: not set (or give --output-dir)"),
        (["s.toml", "-o", "x"], "unrecognized arguments: -o x"),
        (["s.toml", "--jobs", "0", "--output-dir", "o"],
         "argument --jobs: must be an integer >= 1, got '0'"),
        (["s.toml", "--ray-address", "auto", "--output-dir", "o"],
         "--ray-address: only used with --executor ray"),
        (["missing.toml", "--output-dir", "o"], "missing.toml: No such file or directory"),
        (["s.json", "--output-dir", "o"], "s.json: a sweep file must end in .toml"),
    ],
)  # fmt: skip
def test_a_bad_option_is_one_line_and_exit_2(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text("[grid]\nworkers = [1]\n")
    assert main(["sweep", *args]) == EXIT_USAGE
    assert capsys.readouterr() == ("", f"simclock sweep: error: {message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_without_ray_the_ray_executor_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(
        ConfigError, match=r"^the ray executor needs Ray: pip install 'simclock\[ray\]'$"
    ):
        RayExecutor()
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text("[grid]\nworkers = [1]\n")
    assert main(["sweep", "s.toml", "--executor", "ray", "--output-dir", "o"]) == EXIT_USAGE
    assert capsys.readouterr() == (
        "",
        "simclock sweep: error: the ray executor needs Ray: pip install 'simclock[ray]'\n",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"grid": {"policy": "kv_aware"}},
         "sweep: grid.policy: must be a non-empty list of values, got 'kv_aware'"),
        ({"grid": {"workers": []}},
         "sweep: grid.workers: must be a non-empty list of values, got []"),
        ({"seeds": [0, True]}, "sweep: seeds: must hold integers >= 0, got True"),
        ({"base": {"output_dir": "x"}},
         "sweep: base.output_dir: not used in a sweep: set the top-level output_dir"),
    ],
)  # fmt: skip
def test_a_sweep_built_in_python_is_checked_when_made(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        SweepSpec(**options)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_a_bad_run_of_a_sweep_built_in_python_names_its_axis(tmp_path: Path) -> None:
    spec = SweepSpec(base={"workers": 2}, grid={"workers": [1, 0]}, source="mine")
    with pytest.raises(ConfigError) as info:
        sweep(spec, output_dir=tmp_path / "out")
    assert str(info.value) == "mine: grid.workers: must be an integer >= 1, got 0"
    assert list(tmp_path.iterdir()) == []
