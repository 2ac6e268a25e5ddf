"""Token instants held as runs of equal spacing.

A request's tokens come one per pass, and on an engine whose passes take equal time (a
steady decode run under fixed timing) their instants are equally spaced. :class:`TokenTimes`
keeps them as runs ``(start, step, count)`` instead of one Python int per token: an hour of
traffic holds a few runs per request instead of millions of ints, and a macro-stepped engine
adds a whole run in one step.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import overload

import numpy as np
import numpy.typing as npt

__all__ = ("TokenTimes", "arithmetic_runs")


def arithmetic_runs(times: Sequence[int]) -> list[tuple[int, int, int]]:
    """Split ``times`` into the runs :meth:`TokenTimes.append` would build from them."""
    out = TokenTimes()
    for t in times:
        out.append(t)
    return out.runs()


class TokenTimes(Sequence[int]):
    """Increasing token instants (integer ns), stored as runs of equal spacing.

    The runs are canonical: built greedily, each new instant extends the last run when it
    is one ``step`` after the run's last instant (a run of one instant takes any step), else
    starts a new run. So two equal sequences always have equal runs, however they were added.
    Reads like a list of ints (``len``, indexing, iteration, ``==`` with a list or tuple).
    """

    __slots__ = ("_counts", "_starts", "_steps", "_total")

    def __init__(self, times: Iterable[int] = ()) -> None:
        self._starts: list[int] = []
        self._steps: list[int] = []
        self._counts: list[int] = []
        self._total = 0
        for t in times:
            self.append(t)

    # -- adding ------------------------------------------------------------------------------

    def append(self, t: int) -> None:
        """Add the instant ``t`` (after every instant held)."""
        counts = self._counts
        self._total += 1
        if counts:
            c = counts[-1]
            if c == 1:
                self._steps[-1] = t - self._starts[-1]
                counts[-1] = 2
                return
            step = self._steps[-1]
            if t == self._starts[-1] + step * c:
                counts[-1] = c + 1
                return
        self._starts.append(t)
        self._steps.append(0)
        counts.append(1)

    @staticmethod
    def append_to_each(holders: Iterable[TokenTimes], t: int) -> None:
        """:meth:`append` ``t`` to each of ``holders`` (one pass's tokens, in one loop)."""
        # append's body, inlined: a pass of hundreds of decode steps calls no method per step
        for h in holders:
            counts = h._counts
            h._total += 1
            if counts:
                c = counts[-1]
                if c == 1:
                    h._steps[-1] = t - h._starts[-1]
                    counts[-1] = 2
                    continue
                if t == h._starts[-1] + h._steps[-1] * c:
                    counts[-1] = c + 1
                    continue
            h._starts.append(t)
            h._steps.append(0)
            counts.append(1)

    def extend(self, times: Iterable[int]) -> None:
        """Add each of ``times``, in order."""
        for t in times:
            self.append(t)

    def extend_run(self, start: int, step: int, count: int) -> None:
        """Add ``start, start + step, ..., start + (count - 1)·step`` (``count >= 1``), with
        the same runs as adding them one by one."""
        self.append(start)
        if count == 1:
            return
        counts = self._counts
        c = counts[-1]
        last_step = self._steps[-1]
        if c == 1 or last_step == step:
            # the new instants continue the last run (a fresh run, or one with this step)
            if c == 1:
                self._steps[-1] = step
            counts[-1] = c + count - 1
            self._total += count - 1
            return
        # the second instant breaks the last run: it starts a run that the rest continue
        self._starts.append(start + step)
        self._steps.append(step if count > 2 else 0)
        counts.append(count - 1)
        self._total += count - 1

    def extend_runs(self, runs: Iterable[tuple[int, int, int]]) -> None:
        """:meth:`extend_run` each ``(start, step, count)`` of ``runs``, in order."""
        # extend_run's body, with append's inlined: an engine whose passes take unequal
        # times (roofline timing) adds runs of one or two instants, many per commit
        starts = self._starts
        steps = self._steps
        counts = self._counts
        added = 0
        for start, step, count in runs:
            added += count
            if not counts:
                starts.append(start)
                steps.append(0)
                counts.append(1)
            else:
                c = counts[-1]
                if c == 1:
                    steps[-1] = start - starts[-1]
                    counts[-1] = 2
                elif start == starts[-1] + steps[-1] * c:
                    counts[-1] = c + 1
                else:
                    starts.append(start)
                    steps.append(0)
                    counts.append(1)
            if count == 1:
                continue
            c = counts[-1]
            if c == 1 or steps[-1] == step:
                if c == 1:
                    steps[-1] = step
                counts[-1] = c + count - 1
            else:
                starts.append(start + step)
                steps.append(step if count > 2 else 0)
                counts.append(count - 1)
        self._total += added

    # -- reading -----------------------------------------------------------------------------

    def runs(self) -> list[tuple[int, int, int]]:
        """The runs ``(start, step, count)``; ``step`` is 0 for a run of one instant."""
        return list(zip(self._starts, self._steps, self._counts, strict=True))

    def array(self) -> npt.NDArray[np.int64]:
        """Every instant as an int64 array."""
        if not self._counts:
            return np.zeros(0, dtype=np.int64)
        counts = np.array(self._counts, dtype=np.int64)
        starts = np.repeat(np.array(self._starts, dtype=np.int64), counts)
        steps = np.repeat(np.array(self._steps, dtype=np.int64), counts)
        offsets = np.arange(self._total, dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        out: npt.NDArray[np.int64] = starts + steps * offsets
        return out

    def __len__(self) -> int:
        return self._total

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return list(self)[index]
        n = self._total
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("token index out of range")
        if index == n - 1:
            c = self._counts[-1]
            return self._starts[-1] + self._steps[-1] * (c - 1)
        ends = list(accumulate(self._counts))
        r = bisect_right(ends, index)
        before = ends[r] - self._counts[r]
        return self._starts[r] + self._steps[r] * (index - before)

    def __iter__(self) -> Iterator[int]:
        for start, step, count in zip(self._starts, self._steps, self._counts, strict=True):
            yield from range(start, start + step * count, step) if step else (start,) * count

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenTimes):
            return self.runs() == other.runs()
        if isinstance(other, list | tuple):
            return len(other) == self._total and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TokenTimes(runs={self.runs()!r})"
