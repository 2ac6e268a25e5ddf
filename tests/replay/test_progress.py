"""Progress lines: content, throttling, modes."""

from __future__ import annotations

import io

import pytest

from engines import EventKind, LifecycleEvent
from replay._progress import Progress, format_virtual_time, make_progress

S = 1_000_000_000


class FakeWall:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def finished(t_ns: int, rid: str) -> LifecycleEvent:
    return LifecycleEvent(t_ns, EventKind.FINISHED, rid, 0)


def test_virtual_time_is_hours_minutes_seconds_milliseconds() -> None:
    assert format_virtual_time(0) == "0:00:00.000"
    assert format_virtual_time(3_723_456_999_999) == "1:02:03.456"
    assert format_virtual_time(100 * 3600 * S) == "100:00:00.000"


def test_lines_are_throttled_to_the_minimum_wall_interval() -> None:
    out = io.StringIO()
    wall = FakeWall()
    progress = Progress(out, total_requests=4, min_interval_s=0.25, wall_clock=wall)
    progress.on_event(LifecycleEvent(0, EventKind.ARRIVED, "a"))
    for i, step_s in enumerate([0.1, 0.1, 0.1, 0.3]):
        wall.now_s += step_s
        progress.on_event(finished((i + 1) * 10 * S, f"r{i}"))
    assert progress.lines_written == 2
    assert out.getvalue().splitlines() == [
        "virtual 0:00:30.000  done 3/4 (completed 3)  wall 0.3 s  10 req/s  100x",
        "virtual 0:00:40.000  done 4/4 (completed 4)  wall 0.6 s  7 req/s  67x",
    ]


def test_close_writes_a_final_line_once() -> None:
    out = io.StringIO()
    wall = FakeWall()
    progress = Progress(out, wall_clock=wall)
    progress.on_event(LifecycleEvent(5 * S, EventKind.REJECTED, "a", 0))
    wall.now_s += 2.0
    progress.close()
    progress.close()
    assert out.getvalue() == (
        "virtual 0:00:05.000  done 1 (completed 0)  wall 2.0 s  0 req/s  2x\n"
    )


def test_terminal_mode_rewrites_one_line_and_ends_it() -> None:
    out = Terminal()
    wall = FakeWall()
    progress = make_progress("auto", stream=out, total_requests=1)
    assert progress is not None and progress.rewrite
    progress.wall_clock = wall
    progress.on_event(finished(S, "a"))
    wall.now_s += 1.0
    progress.close()
    assert out.getvalue() == (
        "\r\x1b[2Kvirtual 0:00:01.000  done 1/1 (completed 1)  wall 1.0 s  1 req/s  1x\n"
    )


def test_modes_choose_by_terminal() -> None:
    assert make_progress("auto", stream=io.StringIO()) is None
    assert make_progress("none", stream=Terminal()) is None
    plain = make_progress("plain", stream=io.StringIO())
    assert plain is not None and not plain.rewrite


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError) as info:
        make_progress("fancy")  # type: ignore[arg-type]
    assert str(info.value) == "progress must be auto, plain or none, not 'fancy'"


def test_a_cancelled_request_counts_as_done() -> None:
    out = io.StringIO()
    progress = Progress(out, total_requests=2, wall_clock=FakeWall())
    progress.on_event(finished(10 * S, "a"))
    progress.on_event(LifecycleEvent(20 * S, EventKind.CANCELLED, "b", 0))
    assert (progress.done, progress.completed) == (2, 1)
