"""explore: seeded variation of a replay, invariants and assertions after each run, and a
failure replayed exactly from its seed."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from engines import EventKind, LifecycleEvent
from policies import LeastLoaded, RoundRobin
from replay import (
    Assertion,
    EngineCrash,
    EngineDrain,
    ExploreError,
    Faults,
    ReplayResult,
    explore,
)
from replay._cli import main
from replay._explore import _Placements, variation

from .test_faults import _bytes, _topology, _workload

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "explore_drained_engine.py"
Remembered = runpy.run_path(str(EXAMPLE))["RememberedRoundRobin"]

DRAIN = Faults(drains=(EngineDrain(at_s=1.5, engine=1),))


def test_explore_catches_a_policy_that_ignores_a_drain() -> None:
    found = explore(
        _workload(), runs=3, policy_factory=Remembered, topology=_topology(3), faults=DRAIN
    )
    assert len(found.failures) == 3
    for run in found.failures:
        assert [v.check for v in run.violations] == ["inactive_placement"]
        assert run.result is not None
        # the plain report shows nothing wrong: every request completed
        assert run.result.summary.status_counts["completed"] == 60


def test_a_correct_policy_passes_every_run() -> None:
    found = explore(
        _workload(),
        runs=4,
        policy_factory=RoundRobin,
        topology=_topology(3),
        faults=Faults(
            crashes=(EngineCrash(at_s=1.0, engine=0, restart_s=0.3),),
            drains=(EngineDrain(at_s=1.5, engine=1),),
        ),
        jitter_s=0.5,
    )
    assert found.ok and len(found.runs) == 4
    assert all(run.result is None for run in found.runs)  # not kept when they pass


def test_a_failure_replays_exactly_from_its_seed() -> None:
    options = dict(topology=_topology(3), faults=DRAIN, jitter_s=0.7)
    found = explore(_workload(), runs=4, policy_factory=Remembered, variation_seed=10, **options)  # type: ignore[arg-type]
    third = found.runs[2]
    assert third.seed == 12 and not third.ok
    again = explore(_workload(), runs=1, policy_factory=Remembered, variation_seed=12, **options)  # type: ignore[arg-type]
    [same] = again.runs
    assert same.violations == third.violations
    assert same.faults == third.faults and same.schedule_seed == third.schedule_seed
    assert same.result is not None and third.result is not None
    assert _bytes(same.result) == _bytes(third.result)


def test_variations_differ_by_seed_and_repeat_for_one() -> None:
    faults = Faults(
        crashes=(EngineCrash(at_s=1.0, engine=0),), view_delay_ms=10.0, kv_event_delay_ms=5.0
    )
    seen = {variation(s, faults, jitter_s=0.5, delays_ms=(0, 50, 200)) for s in range(5)}
    assert len(seen) == 5
    assert variation(3, faults, jitter_s=0.5, delays_ms=(0, 50)) == variation(
        3, faults, jitter_s=0.5, delays_ms=(0, 50)
    )
    schedule, varied = variation(3, faults, jitter_s=0.0, delays_ms=())
    assert varied == faults and isinstance(schedule, int)
    # a delay left at 0 stays 0
    _, drawn = variation(4, Faults(view_delay_ms=1.0), jitter_s=0, delays_ms=(7.0,))
    assert drawn is not None and (drawn.view_delay_ms, drawn.kv_event_delay_ms) == (7.0, 0.0)


def test_assertions_and_predicates_fail_runs() -> None:
    def everything_fast(result: ReplayResult) -> bool:
        return all(r.ttft_ms is not None and r.ttft_ms < 1 for r in result.requests)

    found = explore(
        _workload(),
        runs=1,
        policy_factory=LeastLoaded,
        topology=_topology(),
        assertions=["completed>=60", "p99_ttft_ms<0.5", "goodput.attainment>=0.5"],
        predicate=everything_fast,
    )
    [run] = found.runs
    checks = [(v.check, v.message.split(":")[0]) for v in run.violations]
    assert checks == [
        ("assert", "p99_ttft_ms<0.5"),
        ("assert", "goodput.attainment>=0.5"),
        ("predicate", "everything_fast(result) is false"),
    ]
    assert run.violations[1].message == (
        "goodput.attainment>=0.5: the summary has no goodput.attainment"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slo >> 1", "--assert: 'slo >> 1': expected NAME OP NUMBER, e.g. slo_attainment>=0.9"),
        ("slo_attainment>=high", "--assert: 'slo_attainment>=high': 'high' is not a number"),
    ],
)
def test_bad_assertions_are_refused(text: str, message: str) -> None:
    with pytest.raises(ExploreError) as caught:
        Assertion.parse(text)
    assert str(caught.value) == message


def test_assertion_aliases() -> None:
    assert Assertion.parse("slo_attainment >= 0.9").path == "goodput.attainment_of_all"
    summary = {"goodput": {"attainment_of_all": 0.95}, "metrics": {"p99_ttft_ms": 3.0}}
    assert Assertion.parse("slo_attainment>=0.9").check(summary) is None
    assert Assertion.parse("p99_ttft_ms<=3").check(summary) is None
    assert Assertion.parse("nope>1").check(summary) == "nope>1: the summary has no nope"


def test_bad_options_are_refused() -> None:
    with pytest.raises(ExploreError, match=r"^runs: must be an int >= 1, got 0$"):
        explore(_workload(), runs=0, policy_factory=RoundRobin, topology=_topology())
    with pytest.raises(ExploreError, match=r"^policy: explore sets it per run"):
        explore(
            _workload(),
            runs=1,
            policy_factory=RoundRobin,
            topology=_topology(),
            policy=RoundRobin(),
        )


def test_a_request_queued_twice_is_seen() -> None:
    watch = _Placements()
    queued = LifecycleEvent(5_000_000, EventKind.QUEUED, "r1", 0, (("role", "aggregated"),))
    watch(queued)
    watch(LifecycleEvent(6_000_000, EventKind.REQUEUED, "r1", 0))
    watch(LifecycleEvent(7_000_000, EventKind.QUEUED, "r1", 1, (("role", "aggregated"),)))
    assert watch.twice == []
    watch(LifecycleEvent(8_000_000, EventKind.QUEUED, "r1", 2, (("role", "aggregated"),)))
    assert watch.twice == ["request 'r1' queued on engine 2 at 8 ms while on engine 1"]


CONFIG = """\
workers = 3
policy = "{path}:RememberedRoundRobin"
timing = {{type = "fixed", prefill_ms = 20, decode_ms = 5}}
[workload]
synthetic = "count=40 arrivals=poisson(20) input=300 output=40"
[faults]
drains = [{{at_s = 1.0, engine = 1}}]
"""


def test_the_command_writes_a_failed_runs_outputs_and_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(path=EXAMPLE))
    out = tmp_path / "out"
    argv = ["explore", str(config), "--runs", "2", "--seed", "5", "--output-dir", str(out)]
    assert main(argv) == 1
    text = capsys.readouterr().out
    assert "run 1 (seed 6): FAILED" in text
    line = next(x for x in text.splitlines() if "replay it:" in x and "--seed 6" in x)
    command = line.split("replay it: ", 1)[1]
    assert command == (
        f"simclock explore {config} --runs 1 --seed 6 --jitter-s 0.5 --output-dir {out}"
    )
    written = sorted(p.name for p in (out / "seed-6").iterdir())
    assert written == ["config.json", "requests.jsonl", "summary.json", "timeline.json"]
    first = (out / "seed-6" / "requests.jsonl").read_bytes()
    assert json.loads((out / "seed-6" / "timeline.json").read_text())
    # the printed command replays exactly that run
    assert main(command.split()[1:]) == 1
    assert "explore: 1 of 1 runs failed" in capsys.readouterr().out
    assert (out / "seed-6" / "requests.jsonl").read_bytes() == first


def test_the_command_passes_a_correct_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text(
        CONFIG.format(path=EXAMPLE).replace(f"{EXAMPLE}:RememberedRoundRobin", "round_robin")
    )
    assert main(["explore", str(config), "--runs", "2"]) == 0
    assert capsys.readouterr().out.endswith("explore: 0 of 2 runs failed\n")


def test_the_command_reports_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text("workers = 2\n[faults]\ndrains = [{at_s = 1, engine = 4}]\n")
    assert main(["explore", str(config), "--runs", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"simclock replay: error: {config}: faults.drains[0]: engine 4 does not exist at 1 s "
        "(engines 0..1)\n"
    )


def test_explored_runs_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    # the same exploration (seeded same-instant order, jittered faults, varied delays) in
    # processes with different hash seeds: the same printed report and the same failed run
    import os
    import subprocess
    import sys

    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(path=EXAMPLE) + "view_delay_ms = 0\n")
    seen = set()
    for hash_seed in ("0", "4242"):
        out = tmp_path / f"out-{hash_seed}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "simclock",
                "explore",
                str(config),
                "--runs",
                "3",
                "--seed",
                "5",
                "--delays-ms",
                "20",
                "--output-dir",
                str(out),
            ],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
        )
        assert done.returncode == 1, done.stderr
        report = done.stdout.replace(str(out), "OUT")
        files = tuple(
            (p.relative_to(out).as_posix(), p.read_bytes()) for p in sorted(out.rglob("*.json*"))
        )
        assert files
        seen.add((report, files))
    assert len(seen) == 1
