"""Statistics and service-level objectives for the replay report (REFERENCE-engine §8).

The functions here are pure: they take numbers and return frozen values. Which requests enter
which statistic is decided by :mod:`replay._report`; this module only knows how to summarise a
sample and how to parse and apply an SLO.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import numpy as np
import numpy.typing as npt

from loadgen import SLO, SLOError

__all__ = ("PERCENTILES", "SLO", "Distribution", "SLOError")

PERCENTILES: tuple[int, ...] = (50, 75, 90, 95, 99)
"""The percentiles every :class:`Distribution` reports, in this order."""

FloatArray = npt.NDArray[np.float64]


@attrs.frozen
class Distribution:
    """Summary statistics of one sample (REFERENCE-engine §8, "Statistics").

    ``std`` is the population standard deviation; percentiles use linear interpolation between
    order statistics (numpy's default method): with the sample sorted as ``x[0..m-1]``,
    ``r = p/100·(m-1)`` and the result ``x[floor(r)] + (x[ceil(r)] - x[floor(r)])·(r - floor(r))``.
    Every statistic is None for an empty sample.

    Attributes:
        count: the sample size.
        mean: the arithmetic mean.
        std: the population standard deviation.
        min: the smallest value.
        max: the largest value.
        p50: the median.
        p75: the 75th percentile.
        p90: the 90th percentile.
        p95: the 95th percentile.
        p99: the 99th percentile.
    """

    count: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: Iterable[float] | FloatArray) -> Distribution:
        """Summarise ``values`` (any order; every value must be finite).

        Raises:
            ValueError: a value is NaN or infinite.
        """
        sample = np.asarray(values if isinstance(values, np.ndarray) else list(values), np.float64)
        return cls._of(sample, owned=False)

    @classmethod
    def _of(
        cls, sample: FloatArray, *, owned: bool, percentiles: list[float] | None = None
    ) -> Distribution:
        """:meth:`of` a float64 array; an ``owned`` one (a temporary nobody else reads) is
        partitioned in place for its percentiles, after its mean and deviation are taken
        (their sums follow the array's order), instead of being copied first.
        ``percentiles``, when given, are the sample's (see :meth:`_of_runs`)."""
        if sample.size == 0:
            return cls(count=0)
        if not bool(np.isfinite(sample).all()):
            raise ValueError("Distribution.of: every value must be finite")
        low = float(sample.min())
        high = float(sample.max())
        if owned and percentiles is not None:
            # nothing reads the sample after this: numpy's mean and deviation, worked in
            # place (the same operations in the same order, so the same bits, without the
            # deviations' temporary the size of the sample and the second sum of it)
            n = sample.size
            mean_value = np.add.reduce(sample) / n
            np.subtract(sample, mean_value, out=sample)
            np.multiply(sample, sample, out=sample)
            mean = float(mean_value)
            std = float(np.sqrt(np.add.reduce(sample) / n))
        else:
            mean = float(sample.mean())
            std = float(sample.std())
        q = percentiles
        if q is None:
            q = [float(x) for x in np.percentile(sample, PERCENTILES, overwrite_input=owned)]
        return cls(
            count=int(sample.size),
            mean=mean,
            std=std,
            min=low,
            max=high,
            p50=q[0],
            p75=q[1],
            p90=q[2],
            p95=q[3],
            p99=q[4],
        )

    @classmethod
    def _of_runs(cls, values: FloatArray, weights: npt.NDArray[np.int64]) -> Distribution:
        """:meth:`of` the sample that holds ``values[i]`` ``weights[i]`` times, in order
        (``np.repeat(values, weights)``), with exactly the same results.

        The statistics are those of the sample spelled out, but for the percentiles: each is
        read off the sorted runs when the order statistics around its rank (the one below to
        the two above, which covers numpy's rounding of the rank) are all one value, as
        interpolating between equal values gives that value whatever the weights. Otherwise
        every percentile comes from numpy on the sample.
        """
        sample = np.repeat(values, weights)
        q = _tied_percentiles(values, weights, sample.size) if sample.size else None
        return cls._of(sample, owned=True, percentiles=q)

    def as_dict(self) -> dict[str, int | float | None]:
        """Return the statistics as a plain dict, in attribute order."""
        return {
            "count": self.count,
            "mean": self.mean,
            "std": self.std,
            "min": self.min,
            "max": self.max,
            "p50": self.p50,
            "p75": self.p75,
            "p90": self.p90,
            "p95": self.p95,
            "p99": self.p99,
        }


def _tied_percentiles(
    values: FloatArray, weights: npt.NDArray[np.int64], size: int
) -> list[float] | None:
    """Every percentile of :data:`PERCENTILES` of ``np.repeat(values, weights)`` (``size``
    values) when each one's neighbouring order statistics are equal and not zero, else
    ``None``."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    # the distinct values, ascending, and the end (exclusive) of each one's ranks
    firsts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.cumsum(np.add.reduceat(weights[order], firsts))
    last = size - 1
    out: list[float] = []
    for p in PERCENTILES:
        rank = int(last * p // 100)
        lo = max(rank - 1, 0)
        hi = min(rank + 2, last)
        group = int(np.searchsorted(ends, lo, side="right"))
        value = float(ordered[firsts[group]])
        # (numpy's interpolation between two zeros may turn -0.0 into 0.0: left to it)
        if int(ends[group]) <= hi or value == 0.0:
            return None
        out.append(value)
    return out
