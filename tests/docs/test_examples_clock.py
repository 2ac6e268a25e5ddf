"""The clock examples under docs/examples run and print what the docs show."""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "clock_first_run.py": """\
 5.0 h  breakfast
10.0 h  lunch
15.0 h  dinner
final virtual time: 54000000000001 ns
""",
    "clock_wakeups.py": """\
  0 ms  a request arrives
  0 ms  engine-0 plans a pass
  0 ms  engine-1 plans a pass
 30 ms  a request arrives
 30 ms  engine-0 plans a pass
 30 ms  engine-1 plans a pass
stale wakeup for waiter 'late policy': requested 5000000 ns, which is before now (60000000 ns)
'client' waits in stuck.<locals>.wait_for_reply -> Queue.get
""",
    "clock_stepping.py": """\
StepEvent(time_ns=0, label="task 'engine'")
now 12 ms, 0 ready
  15 ms  policy (policy_wakeup)
  20 ms  engine-0 (engine_deadline)
  task engine: engine -> sleep_ns
  task policy: policy -> sleep_until_ns
LoopStats(now_ns=30000000, events=10, timers_fired=4, clock_advances=5, instant_end_wakeups=0)
""",
    "clock_schedule_race.py": """\
FIFO order:   created by ['worker-a']
seeds 0..19:  9 of 20 expose the race, first: seed 1
replay seed 1 (1): created by ['worker-a', 'worker-b']
replay seed 1 (2): created by ['worker-a', 'worker-b']
""",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]


def test_pytest_recipe_runs_as_documented(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "clock_pytest_conftest.py", tmp_path / "conftest.py")
    shutil.copy(EXAMPLES / "clock_pytest_tests.py", tmp_path / "test_timeouts.py")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("4 passed")


def _run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (directory / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
    )


def test_plugin_example_runs_as_documented(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "clock_plugin_tests.py", tmp_path / "test_with_the_plugin.py")
    result = _run_pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("5 passed")


def test_explore_example_finds_the_race_and_its_replay_fails_the_same_way(
    tmp_path: Path,
) -> None:
    shutil.copy(EXAMPLES / "clock_explore_tests.py", tmp_path / "test_sessions.py")
    explored = _run_pytest(tmp_path)
    assert explored.returncode == 1
    lines = explored.stdout.splitlines()
    summary = lines.index(
        next(line for line in lines if "simclock: failing schedule seeds" in line)
    )
    assert lines[summary + 1 : summary + 4] == [
        f"pytest 'test_sessions.py::test_one_session_per_user' --simclock-seed {seed}"
        for seed in (1, 3, 4)
    ]
    assert lines[-1].startswith("3 failed, 2 passed")
    replayed = _run_pytest(
        tmp_path, "test_sessions.py::test_one_session_per_user", "--simclock-seed", "1"
    )
    assert replayed.returncode == 1
    failure = "E       AssertionError: assert ['worker-a', 'worker-b'] == ['worker-a']"
    assert failure in explored.stdout.splitlines()
    assert failure in replayed.stdout.splitlines()
