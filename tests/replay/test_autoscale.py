"""Autoscalers on the virtual clock: the HPA's rules worked by hand, cold starts, the SLO
planner, cost, determinism and bad specs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from policies import RoundRobin
from replay import (
    HPA,
    AutoscalerContext,
    ClusterError,
    ReplayResult,
    SLOPlanner,
    run,
    summary_json,
)
from replay._cli import EXIT_USAGE, main

from ..policies.support import req, topology, workload

REPO = Path(__file__).resolve().parents[2]


def step_load() -> list:
    """Two long requests at 0 s (20000 tokens: 200 s of 10 ms decode passes), then a step of
    six shorter ones at 12 s (2000 tokens: done by about 32 s)."""
    requests = [req("a0", output=20000), req("a1", output=20000)]
    requests += [req(f"s{i}", output=2000, at_ms=12_000) for i in range(6)]
    return requests


def hpa() -> HPA:
    return HPA(
        metric="running",
        target=2,
        period_s=10,
        window_s=1,
        stabilization_s=30,
        min_replicas=1,
        max_replicas=4,
    )


def step_run(scaler: HPA, *, stepping: str = "macro") -> ReplayResult:
    return run(
        workload(step_load()),
        topology=topology(1, num_blocks=4096),
        policy=RoundRobin(),
        autoscaler=scaler,
        cold_start_s=15,
        stepping=stepping,
    )


def test_the_hpa_worked_example_by_hand() -> None:
    # One engine; target 2 running requests per engine; evaluated every 10 s on the sample
    # at that instant; scale-down stabilised over 30 s; cold start 15 s.
    #  10 s: 2 running on 1 engine: ratio 1 -> 1 (in tolerance)
    #  20 s: 8 running (the step at 12 s): ratio 4 -> ceil(1 * 4) = 4: engines 1, 2, 3 added,
    #        starting until 35 s
    #  30 s: 1 ready engine, 8 running: ceil(1 * 4) = 4 = replicas: no change
    #  40 s: the step is over: 2 running over 4 ready engines: 0.5 / 2 = 0.25 -> ceil(4 *
    #        0.25) = 1; but the highest recommendation of (10 s, 40 s] is 4: stay at 4
    #  50 s: the same; the window (20 s, 50 s] still holds 20 s and 30 s: 4
    #  60 s: the window (30 s, 60 s] holds 40, 50, 60 s: 1 -> remove 3, 2, 1 (idle: at once)
    scaler = hpa()
    result = step_run(scaler)
    rows = [(r.time_s, r.value, r.ready, r.replicas, r.desired, r.target) for r in scaler.history]
    assert rows[:7] == [
        (10.0, 2.0, 1, 1, 1, 1),
        (20.0, 8.0, 1, 1, 4, 4),
        (30.0, 8.0, 1, 4, 4, 4),
        (40.0, 0.5, 4, 4, 1, 4),
        (50.0, 0.5, 4, 4, 1, 4),
        (60.0, 0.5, 4, 4, 1, 1),
        (70.0, 2.0, 1, 1, 1, 1),
    ]
    cost = result.summary.cost
    assert cost is not None
    counts = [(c.at_ms, c.engines, c.starting, c.active, c.draining) for c in cost.engine_count]
    assert counts == [
        (0.0, 1, 0, 1, 0),
        (20_000.0, 4, 3, 1, 0),
        (35_000.0, 4, 0, 4, 0),
        (60_000.0, 1, 0, 1, 0),
    ]
    end_s = result.meta.virtual_duration_ms / 1000
    assert cost.engine_seconds == pytest.approx(end_s + 3 * 40.0)
    engines = summary_json(result)["engines"]
    assert [(e["index"], e["joined_ms"], e["removed_ms"]) for e in engines] == [  # type: ignore[index]
        (0, 0.0, None),
        (1, 20_000.0, 60_000.0),
        (2, 20_000.0, 60_000.0),
        (3, 20_000.0, 60_000.0),
    ]
    assert result.summary.status_counts["completed"] == 8


def test_both_steppings_agree_and_reruns_are_byte_identical() -> None:
    def outputs(stepping: str) -> bytes:
        result = step_run(hpa(), stepping=stepping)
        return json.dumps(summary_json(result), sort_keys=True).encode()

    macro = outputs("macro")
    assert macro == outputs("pass")
    assert macro == outputs("macro")


_SCRIPT = textwrap.dedent(
    """
    import sys, json, hashlib
    sys.path.insert(0, {repo!r})
    from tests.replay.test_autoscale import hpa, step_run
    from replay import summary_json
    result = step_run(hpa())
    print(hashlib.sha256(json.dumps(summary_json(result), sort_keys=True).encode()).hexdigest())
    """
)


def test_results_do_not_depend_on_the_hash_seed() -> None:
    digests = []
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT.format(repo=str(REPO))],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.append(done.stdout)
    assert digests[0] == digests[1]
    here = hashlib.sha256(
        json.dumps(summary_json(step_run(hpa())), sort_keys=True).encode()
    ).hexdigest()
    assert digests[0].strip() == here


class Probe:
    """Adds an engine at 1 s, looks at it during its cold start, and removes a second one
    while it is still starting."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, object, int, tuple[int, ...]]] = []

    async def run(self, ctx: AutoscalerContext) -> None:
        await ctx.sleep_s(1.0)
        first = ctx.add_engine()
        second = ctx.add_engine()
        for at in (1.5, 3.0):
            await ctx.sleep_until_ns(round(at * 1e9))
            self.seen.append(
                (ctx.now_s, ctx.cluster.state(first), ctx.replicas(), ctx.engine_ids("active"))
            )
            if at == 1.5:
                ctx.remove(second)


def test_an_added_engine_is_starting_for_its_cold_start() -> None:
    probe = Probe()
    requests = [req(f"r{i}", output=50, at_ms=100.0 * i) for i in range(40)]
    result = run(
        workload(requests),
        topology=topology(1),
        policy=RoundRobin(),
        autoscaler=probe,
        cold_start_s=2.0,
    )
    # engine 1 starts until 3 s: not active at 1.5 s, active at 3 s; engine 2 was removed
    # while starting (it never served)
    assert probe.seen == [(1.5, "starting", 3, (0,)), (3.0, "active", 2, (0, 1))]
    by_engine = {e.index: e for e in result.summary.engines}
    assert by_engine[2].completed == 0 and by_engine[2].removed_ms == 1500.0  # type: ignore[attr-defined]
    assert by_engine[1].completed > 0
    served = [r for r in result.requests if r.engine == 1]
    assert min(r.arrival_ms for r in served) >= 3000.0
    cost = result.summary.cost
    assert cost is not None
    assert [(c.at_ms, c.starting, c.active) for c in cost.engine_count] == [
        (0.0, 0, 1),
        (1000.0, 2, 1),
        (1500.0, 1, 1),
        (3000.0, 0, 2),
    ]


def test_the_slo_planner_adds_engines_when_ttft_misses_its_target() -> None:
    # 40 prompts of a whole pass's budget at once on one engine: one prefill per pass, so
    # TTFTs up to about 2.4 s against a 0.2 s target
    requests = [req(f"r{i}", prompt=8192, output=50) for i in range(40)]
    requests += [req(f"t{i}", prompt=8192, output=50, at_ms=5000.0 + 50 * i) for i in range(80)]
    planner = SLOPlanner(ttft_ms=200, itl_ms=1000, interval_s=5, max_replicas=4, max_step=2)
    result = run(
        workload(requests),
        topology=topology(1, num_blocks=8192),
        policy=RoundRobin(),
        autoscaler=planner,
    )
    first = planner.history[0]
    assert first.time_s == 5.0 and first.value is not None and first.value > 1
    assert first.replicas == 1 and first.target == 3  # ceil(1 * c) clamped to 1 + max_step
    assert max(c.engines for c in result.summary.cost.engine_count) >= 3  # type: ignore[union-attr]


def test_a_static_run_reports_its_cost() -> None:
    requests = [req(f"r{i}", output=20, at_ms=10.0 * i) for i in range(10)]
    result = run(workload(requests), topology=topology(3), policy=RoundRobin())
    cost = result.summary.cost
    assert cost is not None
    end_s = result.meta.virtual_duration_ms / 1000
    assert cost.engine_seconds == pytest.approx(3 * end_s)
    assert cost.gpu_seconds == cost.engine_seconds
    assert cost.requests_per_engine_hour == pytest.approx(10 / (3 * end_s / 3600))
    assert cost.output_tokens_per_engine_hour == pytest.approx(200 / (3 * end_s / 3600))
    assert cost.engine_count == ()
    assert "engine_count" not in summary_json(result)["cost"]  # type: ignore[operator]


def test_a_bad_autoscaler_or_cold_start_is_refused() -> None:
    with pytest.raises(ClusterError) as bad_cold_start:
        run(workload([req("r0")]), topology=topology(1), policy=RoundRobin(), cold_start_s=-1)
    assert str(bad_cold_start.value) == "cold_start_s: must be a finite number >= 0, got -1"
    with pytest.raises(ClusterError) as bad_autoscaler:
        run(workload([req("r0")]), topology=topology(1), policy=RoundRobin(), autoscaler=3)  # type: ignore[typeddict-item]
    assert str(bad_autoscaler.value) == "autoscaler: must have an async run(ctx) method, got int"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--autoscaler", "nope"], "--autoscaler: unknown autoscaler 'nope'; known: hpa, "
         "slo_planner, or path/to/file.py:ClassName or package.module:ClassName"),
        (["--autoscaler", "hpa:metric=cpu"], "--autoscaler: hpa: metric: must be one of "
         "utilisation, queue_depth, running, kv_usage, got 'cpu'"),
        (["--autoscaler", "hpa:target=0"], "--autoscaler: hpa: target: must be a finite "
         "number > 0, got 0"),
        (["--autoscaler", "hpa:min_replicas=3,max_replicas=2"], "--autoscaler: hpa: "
         "max_replicas: must be >= min_replicas and >= 1, got 2 (min_replicas 3)"),
        (["--autoscaler", "hpa:period=3"], "--autoscaler: hpa: got an unexpected keyword "
         "argument 'period'"),
        (["--autoscaler", "slo_planner:ttft_ms=fast"], "--autoscaler: slo_planner: ttft_ms: "
         "must be a number, got 'fast'"),
        (["--cold-start-s", "-1"], "argument --cold-start-s: must be a finite number >= 0, "
         "got -1"),
    ],
)  # fmt: skip
def test_a_bad_spec_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["replay", "--workers", "1", "--output-dir", str(out), *args])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not out.exists()


def test_an_own_autoscaler_class_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("scale.py").write_text(
        textwrap.dedent(
            """
            class AddOne:
                def __init__(self, at_s=1.0):
                    self.at_s = at_s

                async def run(self, ctx):
                    await ctx.sleep_s(self.at_s)
                    ctx.add_engine()
            """
        )
    )
    code = main(
        [
            "replay",
            "--synthetic",
            "count=50 arrivals=poisson(20) input=256 output=20",
            "--workers",
            "1",
            "--timing",
            "fixed",
            "--autoscaler",
            "scale.py:AddOne:at_s=0.5",
            "--cold-start-s",
            "0.25",
            "--output-dir",
            "out",
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().err
    summary = json.loads(Path("out/summary.json").read_text())
    config = json.loads(Path("out/config.json").read_text())
    assert config["cluster"] == {"autoscaler": "AddOne", "cold_start_s": 0.25}
    assert config["config"]["autoscaler"] == {"name": "scale.py:AddOne", "at_s": 0.5}
    assert [(c["at_ms"], c["starting"], c["active"]) for c in summary["cost"]["engine_count"]] == [
        (0.0, 0, 1),
        (500.0, 1, 1),
        (750.0, 0, 2),
    ]


def test_the_engine_count_of_an_autoscaled_run_is_drawn(tmp_path: Path) -> None:
    from replay import plot, write_outputs

    write_outputs(step_run(hpa()), tmp_path / "scaled", token_times="none")
    static = run(workload(step_load()), topology=topology(1, num_blocks=4096), policy=RoundRobin())
    write_outputs(static, tmp_path / "static", token_times="none")
    plot([tmp_path / "scaled", tmp_path / "static"], tmp_path / "figs", formats=("svg",))
    svg = (tmp_path / "figs" / "engine_count.svg").read_text()
    assert "engines paid for" in svg and "engines serving" in svg
    # a run whose cluster never changed has no engine count: no figure for it alone
    plot([tmp_path / "static"], tmp_path / "alone", formats=("svg",))
    assert not (tmp_path / "alone" / "engine_count.svg").exists()


def test_the_timeline_counts_engines_and_samples_the_added_ones(tmp_path: Path) -> None:
    from replay import ReplaySession

    # four more requests at 36 s, when the added engines serve: round robin spreads them
    later = [req(f"l{i}", output=200, at_ms=36_000) for i in range(4)]
    with ReplaySession.build(
        workload([*step_load(), *later]),
        topology=topology(1, num_blocks=4096),
        policy=RoundRobin(),
        autoscaler=hpa(),
        cold_start_s=15,
        timeline=True,
    ) as session:
        session.run()
        events = session.timeline().events
    counts = [e for e in events if e.get("name") == "engines" and e.get("ph") == "C"]
    # 1 active; 3 starting beside it at 20 s; 4 active at 35 s
    assert [(e["ts"] / 1e6, e["args"]["starting"], e["args"]["active"]) for e in counts][:3] == [
        (0.0, 0, 1),
        (20.0, 3, 1),
        (35.0, 0, 4),
    ]
    sampled = {e["pid"] - 1 for e in events if e.get("name") == "requests" and e.get("ph") == "C"}
    assert sampled == {0, 1, 2, 3}  # the engines added during the run are sampled too
