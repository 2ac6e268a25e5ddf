"""The messages of a virtual run that cannot go on: end of virtual time, threads, Ctrl-C."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ._exceptions import VirtualTimeLimitError
from ._inspect import describe_task_wait

__all__ = ("interrupt_note", "thread_notes", "time_limit_error")

_NS_PER_S = 1_000_000_000


def _task_lines(tasks: Sequence[asyncio.Task[Any]]) -> tuple[str, ...]:
    return tuple(f"{t.get_name()!r} waits in {describe_task_wait(t)}" for t in tasks)


def thread_notes(blocked: Sequence[str], refusals: Sequence[str]) -> str:
    """Lines that explain a wait on a real thread, for deadlock and time-limit errors."""
    notes = ""
    if any("run_sync_in_worker_thread" in line for line in blocked):
        notes += (
            "\n  anyio.to_thread.run_sync() hands its function to a real worker thread, "
            "which the virtual clock never waits for: call the function directly, or use "
            "asyncio.to_thread() or loop.run_in_executor(), which run it inline"
        )
    for refusal in refusals[:3]:
        notes += f"\n  refused: {refusal} (real threads cannot call into a virtual loop)"
    return notes


def time_limit_error(
    tasks: Sequence[asyncio.Task[Any]],
    now_ns: int,
    end_ns: int,
    next_ns: int,
    refusals: Sequence[str],
    *,
    range_end: bool,
) -> VirtualTimeLimitError:
    """The error of a clock that would jump from ``now_ns`` to ``next_ns``, past ``end_ns``.

    ``range_end`` says that ``end_ns`` is the end of the clock's range, not a chosen end.
    """
    blocked = _task_lines(tasks)
    where = "the end of the clock's range" if range_end else f"end_ns={end_ns}"
    head = (
        f"virtual time limit: the clock would jump from {now_ns} ns to the next "
        f"event at {next_ns} ns, past {where} ({end_ns / _NS_PER_S:g} s)"
    )
    if tasks:
        noun = "task is" if len(tasks) == 1 else "tasks are"
        message = f"{head}; {len(tasks)} {noun} unfinished:\n" + "\n".join(
            f"  {line}" for line in blocked
        )
    else:
        message = f"{head}; no task is unfinished"
    return VirtualTimeLimitError(
        message + thread_notes(blocked, refusals),
        now_ns=now_ns,
        end_ns=end_ns,
        next_ns=next_ns,
        blocked=blocked,
    )


def interrupt_note(tasks: Sequence[asyncio.Task[Any]], now_ns: int) -> str:
    """Where an interrupted run was: the virtual time and every unfinished task."""
    noun = "task" if len(tasks) == 1 else "tasks"
    lines = [
        f"simclock: interrupted at virtual time {now_ns} ns ({now_ns / _NS_PER_S:.9f} s), "
        f"{len(tasks)} unfinished {noun}" + (":" if tasks else "")
    ]
    lines += [f"  {line}" for line in _task_lines(tasks)]
    return "\n".join(lines)
