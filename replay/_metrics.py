"""Statistics and service-level objectives for the replay report (REFERENCE-engine §8).

The functions here are pure: they take numbers and return frozen values. Which requests enter
which statistic is decided by :mod:`replay._report`; this module only knows how to summarise a
sample and how to parse and apply an SLO.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

import attrs
import numpy as np
import numpy.typing as npt

from simclock import SimulationError

__all__ = ("PERCENTILES", "SLO", "Distribution", "SLOError")

PERCENTILES: tuple[int, ...] = (50, 75, 90, 95, 99)
"""The percentiles every :class:`Distribution` reports, in this order."""

FloatArray = npt.NDArray[np.float64]


class SLOError(SimulationError, ValueError):
    """An SLO specification is malformed (unknown metric, bad number, repeated key)."""


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
    def _of(cls, sample: FloatArray, *, owned: bool) -> Distribution:
        """:meth:`of` a float64 array; an ``owned`` one (a temporary nobody else reads) is
        partitioned in place for its percentiles, after its mean and deviation are taken
        (their sums follow the array's order), instead of being copied first."""
        if sample.size == 0:
            return cls(count=0)
        if not bool(np.isfinite(sample).all()):
            raise ValueError("Distribution.of: every value must be finite")
        mean = float(sample.mean())
        std = float(sample.std())
        low = float(sample.min())
        high = float(sample.max())
        q = np.percentile(sample, PERCENTILES, overwrite_input=owned)
        return cls(
            count=int(sample.size),
            mean=mean,
            std=std,
            min=low,
            max=high,
            p50=float(q[0]),
            p75=float(q[1]),
            p90=float(q[2]),
            p95=float(q[3]),
            p99=float(q[4]),
        )

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


def _check_bound(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise SLOError(f"slo: {name} must be a finite number >= 0 (ms), got {value!r}")


def _bound_validator(
    instance: object, attribute: attrs.Attribute[float | None], value: object
) -> None:
    """attrs validator: None, or a finite number ``>= 0``."""
    if value is not None:
        _check_bound(attribute.name, value)


@attrs.frozen
class SLO:
    """Service-level objectives that define goodput (REFERENCE-engine §8).

    A completed request is *good* when it meets every configured bound; bounds are inclusive.
    The TPOT bound is skipped for a request that produced fewer than two tokens. A bound left
    None is not checked. vLLM's benchmark calls the E2E bound ``e2el``; both spellings parse.

    Attributes:
        ttft_ms: upper bound on time to first token, in milliseconds.
        tpot_ms: upper bound on time per output token (per-request mean gap), in milliseconds.
        e2e_ms: upper bound on end-to-end latency, in milliseconds.

    Raises:
        SLOError: a bound is not a finite number ``>= 0``.
    """

    ttft_ms: float | None = attrs.field(default=None, validator=_bound_validator)
    tpot_ms: float | None = attrs.field(default=None, validator=_bound_validator)
    e2e_ms: float | None = attrs.field(default=None, validator=_bound_validator)

    @classmethod
    def parse(cls, text: str) -> SLO:
        """Parse ``"ttft=200,tpot=50,e2e=2000"`` or vLLM's ``--goodput`` form
        ``"ttft:200 tpot:50 e2el:2000"`` (milliseconds; any subset, any order).

        Items are separated by commas or whitespace; each is ``key=number`` or
        ``key:number`` (spaces around the separator are allowed). Keys: ``ttft``, ``tpot``,
        ``e2e`` (alias ``e2el``, vLLM's name). An empty string means no SLO.

        Raises:
            SLOError: an item is not ``key=number`` or ``key:number``, a key is unknown or
                repeated, or a number is not finite and ``>= 0``.
        """
        bounds: dict[str, float] = {}
        for item in _SEPARATOR.sub(r"\1", text).replace(",", " ").split():
            match = _ITEM.fullmatch(item)
            if match is None:
                raise SLOError(f"slo: {item!r} is not key=milliseconds or key:milliseconds")
            key, number = match.group(1), match.group(2)
            field = _SLO_KEYS.get(key)
            if field is None:
                raise SLOError(f"slo: unknown metric {key!r} (expected ttft, tpot, e2e)")
            if field in bounds:
                raise SLOError(f"slo: {key} is given twice")
            try:
                value = float(number)
            except ValueError:
                raise SLOError(f"slo: {key}: {number!r} is not a number") from None
            _check_bound(key, value)
            bounds[field] = value
        return cls(**bounds)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], *, where: str = "slo") -> SLO:
        """Build an SLO from a config-file table such as ``{"ttft": 200, "tpot": 50}``.

        Raises:
            SLOError: a key is unknown or a value is not a finite number ``>= 0``.
        """
        bounds: dict[str, float] = {}
        for key, value in values.items():
            field = _SLO_KEYS.get(key)
            if field is None:
                raise SLOError(f"{where}: unknown metric {key!r} (expected ttft, tpot, e2e)")
            if field in bounds:
                raise SLOError(f"{where}: {key} is given twice")
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise SLOError(f"{where}: {key} must be a finite number >= 0 (ms), got {value!r}")
            bounds[field] = float(value)
        return cls(**bounds)

    @property
    def is_empty(self) -> bool:
        """True when no bound is configured."""
        return self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None

    def met(self, *, ttft_ms: float, tpot_ms: float | None, e2e_ms: float) -> bool:
        """Whether one completed request meets every configured bound (inclusive).

        Args:
            ttft_ms: the request's time to first token.
            tpot_ms: its time per output token, None when it produced fewer than two tokens
                (the TPOT bound is then skipped).
            e2e_ms: its end-to-end latency.
        """
        if self.ttft_ms is not None and ttft_ms > self.ttft_ms:
            return False
        if self.tpot_ms is not None and tpot_ms is not None and tpot_ms > self.tpot_ms:
            return False
        return not (self.e2e_ms is not None and e2e_ms > self.e2e_ms)

    def as_text(self) -> str:
        """The canonical ``ttft=..,tpot=..,e2e=..`` form of the configured bounds."""
        parts = [
            f"{key}={_number_text(value)}"
            for key, value in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2e", self.e2e_ms))
            if value is not None
        ]
        return ",".join(parts)

    def as_dict(self) -> dict[str, float]:
        """The configured bounds as ``{"ttft_ms": .., ...}`` (unset bounds left out)."""
        return {
            key: value
            for key, value in (
                ("ttft_ms", self.ttft_ms),
                ("tpot_ms", self.tpot_ms),
                ("e2e_ms", self.e2e_ms),
            )
            if value is not None
        }


_SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms", "e2el": "e2e_ms"}
# spaces around an item's separator are dropped before items are split on commas and spaces
_SEPARATOR = re.compile(r"\s*([=:])\s*")
_ITEM = re.compile(r"([^=:]*)[=:](.*)")


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
