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

    __slots__ = ("_c", "_closed", "_counts", "_d", "_next", "_s", "_starts", "_steps")

    def __init__(self, times: Iterable[int] = ()) -> None:
        # the runs before the last, side by side, and how many instants they hold
        self._starts: list[int] = []
        self._steps: list[int] = []
        self._counts: list[int] = []
        self._closed = 0
        # the last run: start, step (0 while it holds one instant), count (0: no instant),
        # and the instant that would extend it (None while any instant would: no step yet)
        self._s = 0
        self._d = 0
        self._c = 0
        self._next: int | None = None
        for t in times:
            self.append(t)

    # -- adding ------------------------------------------------------------------------------

    def append(self, t: int) -> None:
        """Add the instant ``t`` (after every instant held)."""
        c = self._c
        if t == self._next:  # the last run goes on
            self._c = c + 1
            self._next = t + self._d
        elif c == 1:  # the second instant of the last run sets its step
            d = t - self._s
            self._d = d
            self._c = 2
            self._next = t + d
        else:  # _start, inlined
            if c:
                self._starts.append(self._s)
                self._steps.append(self._d)
                self._counts.append(c)
                self._closed += c
            self._s = t
            self._d = 0
            self._c = 1
            self._next = None

    def _start(self, t: int) -> None:
        """Close the last run (if any) and start one at ``t``."""
        c = self._c
        if c:
            self._starts.append(self._s)
            self._steps.append(self._d)
            self._counts.append(c)
            self._closed += c
        self._s = t
        self._d = 0
        self._c = 1
        self._next = None

    @staticmethod
    def append_to_each(holders: Iterable[TokenTimes], t: int) -> None:
        """:meth:`append` ``t`` to each of ``holders`` (one pass's tokens, in one loop)."""
        # append's body, inlined: a pass of hundreds of decode steps calls no method
        for h in holders:
            if t == h._next:  # the last run goes on
                h._c += 1
                h._next = t + h._d
                continue
            c = h._c
            if c == 1:  # the second instant of the last run sets its step
                d = t - h._s
                h._d = d
                h._c = 2
                h._next = t + d
                continue
            if c:  # close the last run
                h._starts.append(h._s)
                h._steps.append(h._d)
                h._counts.append(c)
                h._closed += c
            h._s = t
            h._d = 0
            h._c = 1
            h._next = None

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
        c = self._c
        if c == 1 or self._d == step:
            # the new instants continue the last run (a fresh run, or one with this step)
            self._d = step
            self._c = c + count - 1
            self._next = start + step * count
            return
        # the second instant breaks the last run: it starts a run that the rest continue
        self._start(start + step)
        if count > 2:
            self._d = step
            self._c = count - 1
            self._next = start + step * count

    def extend_runs(self, runs: Iterable[tuple[int, int, int]]) -> None:
        """:meth:`extend_run` each ``(start, step, count)`` of ``runs``, in order."""
        for start, step, count in runs:
            self.extend_run(start, step, count)

    # -- reading -----------------------------------------------------------------------------

    def runs(self) -> list[tuple[int, int, int]]:
        """The runs ``(start, step, count)``; ``step`` is 0 for a run of one instant."""
        out = list(zip(self._starts, self._steps, self._counts, strict=True))
        if self._c:
            out.append((self._s, self._d, self._c))
        return out

    def array(self) -> npt.NDArray[np.int64]:
        """Every instant as an int64 array."""
        runs = self.runs()
        if not runs:
            return np.zeros(0, dtype=np.int64)
        table = np.array(runs, dtype=np.int64)
        counts = table[:, 2]
        starts = np.repeat(table[:, 0], counts)
        steps = np.repeat(table[:, 1], counts)
        offsets = np.arange(len(self), dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        out: npt.NDArray[np.int64] = starts + steps * offsets
        return out

    def __len__(self) -> int:
        return self._closed + self._c

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return list(self)[index]
        n = self._closed + self._c
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("token index out of range")
        if index >= self._closed:  # in the last run
            return self._s + self._d * (index - self._closed)
        ends = list(accumulate(self._counts))
        r = bisect_right(ends, index)
        before = ends[r] - self._counts[r]
        return self._starts[r] + self._steps[r] * (index - before)

    def __iter__(self) -> Iterator[int]:
        for start, step, count in self.runs():
            yield from range(start, start + step * count, step) if step else (start,) * count

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenTimes):
            return self.runs() == other.runs()
        if isinstance(other, list | tuple):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TokenTimes(runs={self.runs()!r})"
