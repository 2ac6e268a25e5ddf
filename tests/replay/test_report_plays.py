"""finalize with the release driver's accounting: driver statuses and the ``plays`` section."""

from __future__ import annotations

import json

from loadgen import DriverReport, PlayOutcome, RequestOutcome
from replay import PLAY_OUTCOMES, RunMeta, finalize, format_table, summary_json
from replay._output import _dumps

from .fakes import MS, FakeTrace, completed, journal_of, workload_of


def _outcome(rid: str, status: str, *, play: str | None = None, phase: str = "measure"):
    return RequestOutcome(rid, status, None, None, phase, play)


def _play(instance: str, outcome: str, trajectory_ms: float | None) -> PlayOutcome:
    return PlayOutcome(
        instance_id=instance,
        play_id=instance.split("#")[0],
        lane=0,
        outcome=outcome,
        failed_request=None,
        first_release_ns=0,
        last_terminal_ns=None if trajectory_ms is None else int(trajectory_ms * MS),
        trajectory_ms=trajectory_ms,
    )


def _finalize(traces: list[FakeTrace], ids: list[str], driver: DriverReport | None):
    return finalize(
        journal_of(*traces), workload=workload_of(ids), meta=RunMeta(seed=0), driver=driver
    )


def test_driver_statuses_win_over_what_the_journal_shows() -> None:
    # "a" completed; "b" depended on a rejected request (skipped); "c" came after a stop
    # (never_issued); "d" was in flight when a profile's grace ended (cancelled), although
    # the engine went on with it.
    traces = [
        completed("a", arrival_ms=0, tokens_ms=[50, 60]),
        completed("d", arrival_ms=0, tokens_ms=[50, 60]),
    ]
    driver = DriverReport(
        requests=(
            _outcome("a", "completed"),
            _outcome("b", "skipped"),
            _outcome("c", "never_issued"),
            _outcome("d", "cancelled"),
        ),
        plays=(),
    )
    result = _finalize(traces, ["a", "b", "c", "d"], driver)
    assert [(r.request_id, r.status) for r in result.requests] == [
        ("a", "completed"),
        ("b", "skipped"),
        ("c", "never_issued"),
        ("d", "cancelled"),
    ]
    counts = result.summary.status_counts
    assert (counts["completed"], counts["skipped"], counts["cancelled"]) == (1, 1, 1)
    assert result.summary.completed == 1
    assert result.summary.ttft_ms.count == 1  # the cancelled request is not measured
    assert result.evidence.accounted == 4


def test_without_plays_the_summary_is_byte_identical_with_or_without_the_driver() -> None:
    traces = [completed("a", arrival_ms=0, tokens_ms=[50, 60])]
    driver = DriverReport(requests=(_outcome("a", "completed"),), plays=())
    plain = _finalize(traces, ["a"], None)
    with_driver = _finalize(traces, ["a"], driver)
    assert with_driver.summary.plays is None
    assert _dumps(summary_json(plain), indent=2) == _dumps(summary_json(with_driver), indent=2)
    assert "plays" not in summary_json(with_driver)


def test_play_instances_replace_their_corpus_requests_and_unreleased_ones_get_records() -> None:
    # Corpus play "P" ran once as instance "P#0": "P#0/x" completed, "P#0/y" was skipped
    # (never released, no trace); the corpus requests get no record of their own.
    workload_ids = ["P/x", "P/y"]
    traces = [completed("P#0/x", arrival_ms=0, tokens_ms=[50, 60])]
    driver = DriverReport(
        requests=(
            _outcome("P#0/x", "completed", play="P#0"),
            _outcome("P#0/y", "skipped", play="P#0"),
        ),
        plays=(_play("P#0", "failed", None),),
    )
    result = _finalize(traces, workload_ids, driver)
    assert [(r.request_id, r.status) for r in result.requests] == [
        ("P#0/x", "completed"),
        ("P#0/y", "skipped"),
    ]
    skipped = result.requests[1]
    assert (skipped.play_id, skipped.phase, skipped.input_length) == ("P#0", "measure", 0)
    assert result.summary.requests == 2


def test_plays_section_counts_outcomes_and_trajectory_percentiles() -> None:
    plays = (
        _play("A#0", "completed", 100.0),
        _play("B#0", "completed", 200.0),
        _play("C#0", "completed", 300.0),
        _play("D#0", "failed", None),
        _play("E#0", "incomplete", None),
    )
    driver = DriverReport(requests=(), plays=plays, cutoff_ms=5000.0)
    result = _finalize([], [], driver)
    section = result.summary.plays
    assert section is not None
    assert section.plays == 5
    assert dict(section.outcome_counts) == {"completed": 3, "failed": 1, "incomplete": 1}
    assert tuple(section.outcome_counts) == PLAY_OUTCOMES
    assert (section.trajectory_ms.p50, section.trajectory_ms.p90) == (200.0, 280.0)
    assert section.trajectory_ms.p99 == 298.0
    written = json.loads(_dumps(summary_json(result), indent=2))["plays"]
    assert written["plays"] == 5
    assert written["outcome_counts"] == {"completed": 3, "failed": 1, "incomplete": 1}
    assert written["trajectory_ms"]["p50"] == 200.0
    assert written["cutoff_ms"] == 5000.0
    assert written["outcomes"][0] == {
        "instance_id": "A#0",
        "play_id": "A",
        "lane": 0,
        "outcome": "completed",
        "failed_request": None,
        "first_release_ms": 0.0,
        "last_terminal_ms": 100.0,
        "trajectory_ms": 100.0,
    }
    table = format_table(result)
    assert "Plays:                                   5" in table
    assert "Trajectory P50 / P90 / P99 (ms):         200.00 / 280.00 / 298.00" in table
