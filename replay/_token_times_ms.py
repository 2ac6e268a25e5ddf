"""A record's token instants in milliseconds, computed when first read.

A run's records hold their token instants as the runs of equal spacing the engines keep
(:class:`engines.TokenTimes`); :class:`TokenTimesMs` reads as the tuple of milliseconds those
runs stand for and makes its floats only when it is read, so a run that keeps a million
token instants per thousand requests does not hold them as Python floats until someone asks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

__all__ = ("TokenTimesMs",)

_NS_PER_MS = 1_000_000


class TokenTimesMs(Sequence[float]):
    """Token instants in milliseconds, held as runs ``(start_ns, step_ns, count)``.

    Reads as the tuple of floats it stands for — ``t / 1e6`` in float64 for every instant
    ``t = start + k·step`` (``k < count``), as numpy divides an int64 array — for ``len``,
    indexing, slicing, iteration, ``==`` and ``hash`` (equal to that tuple, and to each other
    when their instants are equal). The floats are made once, when first read.

    Args:
        runs: the runs of integer-ns instants, in order (``step`` is ignored in a run of one).
    """

    __slots__ = ("_len", "_runs", "_values")

    def __init__(self, runs: Sequence[tuple[int, int, int]] = ()) -> None:
        self._runs = tuple(runs)
        self._len = sum(count for _, _, count in self._runs)
        self._values: tuple[float, ...] | None = None

    @property
    def runs_ns(self) -> tuple[tuple[int, int, int], ...]:
        """The runs ``(start_ns, step_ns, count)`` the instants are made from."""
        return self._runs

    def values(self) -> tuple[float, ...]:
        """Every instant in milliseconds, as a tuple."""
        values = self._values
        if values is None:
            values = self._values = _expand(self._runs, self._len)
        return values

    def tolist(self) -> list[float]:
        """Every instant in milliseconds, as a list."""
        return list(self.values())

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[float, ...]: ...
    def __getitem__(self, index: int | slice) -> float | tuple[float, ...]:
        return self.values()[index]

    def __iter__(self) -> Iterator[float]:
        return iter(self.values())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenTimesMs):
            return self._len == other._len and (
                self._runs == other._runs or self.values() == other.values()
            )
        if isinstance(other, tuple):
            return self._len == len(other) and self.values() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        return repr(self.values())

    def __reduce__(self) -> tuple[type[TokenTimesMs], tuple[tuple[tuple[int, int, int], ...]]]:
        return (TokenTimesMs, (self._runs,))


def _expand(runs: tuple[tuple[int, int, int], ...], total: int) -> tuple[float, ...]:
    if not total:
        return ()
    if len(runs) == 1:
        start, step, count = runs[0]
        times = start + step * np.arange(count, dtype=np.int64)
    else:
        held = np.array(runs, dtype=np.int64).reshape(-1, 3)
        starts, steps, counts = held[:, 0], held[:, 1], held[:, 2]
        offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        times = np.repeat(starts, counts) + np.repeat(steps, counts) * offsets
    return tuple((times / _NS_PER_MS).tolist())
