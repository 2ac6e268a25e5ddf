"""One set of terminal statuses, defined once: loadgen's, which replay re-exports."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import loadgen
import replay
from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import RoundRobin

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("simclock", "engines", "policies", "loadgen", "replay")
REPORT_ORDER = (
    "completed",
    "rejected",
    "unplaced",
    "incomplete",
    "failed",
    "cancelled",
    "skipped",
    "never_issued",
)


def test_loadgen_and_replay_export_the_same_statuses_in_report_order() -> None:
    assert replay.TERMINAL_STATUSES is loadgen.TERMINAL_STATUSES
    assert replay.TerminalStatus is loadgen.TerminalStatus
    assert loadgen.TERMINAL_STATUSES == REPORT_ORDER
    assert get_args(loadgen.TerminalStatus) == REPORT_ORDER


def test_the_statuses_are_written_in_one_module() -> None:
    defining = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                targets = (
                    [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else node.targets
                    if isinstance(node, ast.Assign)
                    else []
                )
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if names & {"TERMINAL_STATUSES", "TerminalStatus"}:
                    defining.append(path.relative_to(ROOT).as_posix())
    assert defining == ["loadgen/_outcomes.py", "loadgen/_outcomes.py"]


def test_the_report_counts_every_status_in_report_order() -> None:
    requests = (
        Request("a", 100, 2, 64, [1, 2], ArrivalRule(not_before_ms=0)),
        Request("b", 100_000, 2, 64, list(range(3, 1566)), ArrivalRule(not_before_ms=0)),
    )
    workload = Workload(requests=requests, source="ex", format="test")
    topology = replay.Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=20),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = replay.run(workload, topology=topology, policy=RoundRobin())
    counts = result.summary.status_counts
    assert tuple(counts) == REPORT_ORDER
    assert counts == {**dict.fromkeys(REPORT_ORDER, 0), "completed": 1, "rejected": 1}


def test_the_driver_counts_every_status_in_report_order() -> None:
    outcome = loadgen.RequestOutcome("a", "cancelled", 0, 5, "measure", None)
    counts = loadgen.DriverReport(requests=(outcome,), plays=()).counts()
    assert tuple(counts) == REPORT_ORDER
    assert counts == {**dict.fromkeys(REPORT_ORDER, 0), "cancelled": 1}
