"""The table timing model: interpolation in measured pass times (REFERENCE-engine §5.6)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._pass import DecodeRun, PassShape, per_pass_times_ms
from ._timing import TimingConfigError, _entry_sums

__all__ = ("TableTiming",)


def _axis(values: Sequence[float]) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in values)
    except (TypeError, ValueError) as error:
        raise TimingConfigError(f"a table axis must be a sequence of numbers: {error}") from None


def _grid(values: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    try:
        return tuple(tuple(float(v) for v in row) for row in values)
    except (TypeError, ValueError) as error:
        raise TimingConfigError(f"decode_ms must be a grid of numbers: {error}") from None


def _increasing(
    instance: object, attribute: attrs.Attribute[Any], value: tuple[float, ...]
) -> None:
    name = f"{type(instance).__name__}.{attribute.name}"
    if len(value) < 2:
        raise TimingConfigError(f"{name} needs at least 2 points, got {len(value)}")
    if not all(math.isfinite(v) for v in value):
        raise TimingConfigError(f"{name} must be finite, got {value!r}")
    if any(b <= a for a, b in pairwise(value)):
        raise TimingConfigError(f"{name} must be strictly increasing, got {value!r}")


def _times(instance: object, attribute: attrs.Attribute[Any], value: tuple[float, ...]) -> None:
    name = f"{type(instance).__name__}.{attribute.name}"
    if not all(math.isfinite(v) and v >= 0 for v in value):
        raise TimingConfigError(f"{name} must be finite numbers >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class TableTiming:
    """Interpolates measured pass times (§5.6)::

        T = prefill(N_p)·[N_p > 0] + decode(B_d, K_d / B_d)·[B_d > 0]

    ``N_p`` is the prefill positions of the pass, ``B_d`` its decode entries and ``K_d`` the
    KV positions ``Σ (c_r + n_r)`` of its decode entries, so ``K_d / B_d`` is the mean decode
    context. ``prefill`` is piecewise linear in tokens; ``decode`` is bilinear on
    (batch, mean context). Outside a grid each part extrapolates linearly from the edge
    segment (edge cell); each part is clamped at 0. A prefill-role engine drops the decode
    part, a decode-role engine has only decode entries.

    Attributes:
        prefill_tokens: the prefill grid, tokens (strictly increasing, at least 2 points).
        prefill_ms: measured prefill times at those points, ms (``>= 0``).
        decode_batch: the batch-size grid (strictly increasing, at least 2 points).
        decode_context: the mean-context grid, tokens (strictly increasing, at least 2 points).
        decode_ms: measured decode times, one row per batch size, one column per context, ms.

    Raises:
        TimingConfigError: a grid is too short, not increasing or not finite; a time is
            negative or not finite; the shapes do not match.
    """

    prefill_tokens: tuple[float, ...] = attrs.field(converter=_axis, validator=_increasing)
    prefill_ms: tuple[float, ...] = attrs.field(converter=_axis, validator=_times)
    decode_batch: tuple[float, ...] = attrs.field(converter=_axis, validator=_increasing)
    decode_context: tuple[float, ...] = attrs.field(converter=_axis, validator=_increasing)
    decode_ms: tuple[tuple[float, ...], ...] = attrs.field(converter=_grid)

    def __attrs_post_init__(self) -> None:
        if len(self.prefill_ms) != len(self.prefill_tokens):
            raise TimingConfigError(
                f"TableTiming.prefill_ms has {len(self.prefill_ms)} values for "
                f"{len(self.prefill_tokens)} prefill_tokens"
            )
        rows, cols = len(self.decode_batch), len(self.decode_context)
        if len(self.decode_ms) != rows or any(len(row) != cols for row in self.decode_ms):
            shape = f"{len(self.decode_ms)}x{'/'.join(str(len(r)) for r in self.decode_ms)}"
            raise TimingConfigError(
                f"TableTiming.decode_ms must be {rows}x{cols} (decode_batch x decode_context), "
                f"got {shape}"
            )
        for row in self.decode_ms:
            if not all(math.isfinite(v) and v >= 0 for v in row):
                raise TimingConfigError(
                    f"TableTiming.decode_ms must be finite numbers >= 0, got {row!r}"
                )

    def prefill_time_ms(self, tokens: float) -> float:
        """The prefill part for ``tokens`` prefill positions (0 for none), clamped at 0."""
        if tokens <= 0:
            return 0.0
        ys = self.prefill_ms
        i, f = _segment(self.prefill_tokens, float(tokens))
        return max(0.0, ys[i] + f * (ys[i + 1] - ys[i]))

    def decode_time_ms(self, batch: float, mean_context: float) -> float:
        """The decode part for ``batch`` decode entries at ``mean_context``, clamped at 0."""
        if batch <= 0:
            return 0.0
        i, u = _segment(self.decode_batch, float(batch))
        j, v = _segment(self.decode_context, float(mean_context))
        low, high = self.decode_ms[i], self.decode_ms[i + 1]
        value = (
            (1 - u) * (1 - v) * low[j]
            + u * (1 - v) * high[j]
            + (1 - u) * v * low[j + 1]
            + u * v * high[j + 1]
        )
        return max(0.0, value)

    def pass_time_ms(self, shape: PassShape) -> float:
        """Return ``prefill(N_p) + decode(B_d, K_d / B_d)`` for the pass, in milliseconds.

        Args:
            shape: the scheduled pass.

        Returns:
            The pass duration (``0.0`` for an empty pass).
        """
        sums = _entry_sums(shape)
        if sums is None:
            return 0.0
        tokens, batch, _, decode_kv, _ = sums
        total = self.prefill_time_ms(float(tokens))
        if batch:
            total += self.decode_time_ms(batch, float(decode_kv) / batch)
        return total

    def decode_run_ms(self, run: DecodeRun) -> npt.NDArray[np.float64]:
        """Durations of every pass of a run of decode steps (see :meth:`pass_time_ms`), with
        the same operations in the same order, one array at a time: no prefill part, and
        ``B_d`` entries at mean context ``K_d / B_d``, with ``K_d = Σc_r + (i+1)·B_d`` in
        pass ``i``."""
        if run.role == "prefill" or (run.role != "decode" and bool((run.output_before < 1).any())):
            return per_pass_times_ms(self, run)
        sizes = run.batch_sizes()
        index = np.arange(1, run.passes + 1, dtype=np.int64)
        batch = sizes.astype(np.float64)
        mean = (run.live_sums(run.computed) + index * sizes).astype(np.float64) / batch
        i, u = _segments(self.decode_batch, batch)
        j, v = _segments(self.decode_context, mean)
        table = np.asarray(self.decode_ms, dtype=np.float64)
        value = (
            (1 - u) * (1 - v) * table[i, j]
            + u * (1 - v) * table[i + 1, j]
            + (1 - u) * v * table[i, j + 1]
            + u * v * table[i + 1, j + 1]
        )
        total: npt.NDArray[np.float64] = self.prefill_time_ms(0.0) + np.maximum(0.0, value)
        return total


def _segments(
    xs: tuple[float, ...], x: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """:func:`_segment` of each of ``x``."""
    grid = np.asarray(xs, dtype=np.float64)
    i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(xs) - 2)
    fraction: npt.NDArray[np.float64] = (x - grid[i]) / (grid[i + 1] - grid[i])
    return i, fraction


def _segment(xs: tuple[float, ...], x: float) -> tuple[int, float]:
    """The grid segment ``[xs[i], xs[i+1]]`` used for ``x`` (the edge one outside the grid) and
    the fraction of the way along it (below 0 or above 1 when extrapolating)."""
    i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])
