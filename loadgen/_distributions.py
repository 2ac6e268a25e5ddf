"""Arrival processes, length and think-time distributions (REFERENCE-workloads §3.1, §3.2).

Each is a frozen value that draws from a ``numpy.random.Generator`` it is given; none
holds randomness of its own. ``parse_*`` turn the short CLI / config spellings
(``poisson(5)``, ``lognormal(12035, 6909)``, ``{"kind": "gamma", "rate": 5.53, "cv": 1.094}``)
into values, with exact error messages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._exceptions import WorkloadConfigError

__all__ = (
    "ArrivalProcess",
    "Constant",
    "Exponential",
    "Fixed",
    "Gamma",
    "LengthDistribution",
    "Lognormal",
    "Poisson",
    "Uniform",
    "parse_arrivals",
    "parse_distribution",
)


def _positive(option: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WorkloadConfigError(f"{option}: {name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise WorkloadConfigError(f"{option}: {name} must be > 0, got {value!r}")
    return number


def _integer(option: str, name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadConfigError(
            f"{option}: {name} must be an integer >= {minimum}, got {value!r}"
        )
    return value


@attrs.frozen
class Poisson:
    """Poisson arrivals: exponential gaps with mean ``1000 / rate`` ms (unclipped)."""

    rate: float

    def gaps_ms(self, rng: np.random.Generator, count: int) -> npt.NDArray[np.float64]:
        """Draw ``count`` gaps in ms."""
        return rng.exponential(1000.0 / self.rate, size=count)


@attrs.frozen
class Gamma:
    """Gamma gaps with mean ``1000 / rate`` ms and coefficient of variation ``cv``.

    Shape ``k = 1 / cv**2``, scale ``1000 / (rate * k)``.
    """

    rate: float
    cv: float

    @property
    def shape(self) -> float:
        """The shape ``k``."""
        return 1.0 / (self.cv * self.cv)

    @property
    def scale_ms(self) -> float:
        """The scale ``θ`` in ms."""
        return 1000.0 / (self.rate * self.shape)

    def gaps_ms(self, rng: np.random.Generator, count: int) -> npt.NDArray[np.float64]:
        """Draw ``count`` gaps in ms."""
        return rng.gamma(self.shape, self.scale_ms, size=count)


@attrs.frozen
class Constant:
    """Evenly spaced arrivals, ``1000 / rate`` ms apart."""

    rate: float

    def gaps_ms(self, rng: np.random.Generator, count: int) -> npt.NDArray[np.float64]:
        """Return ``count`` equal gaps in ms (``rng`` is not used)."""
        del rng
        return np.full(count, 1000.0 / self.rate)


ArrivalProcess = Poisson | Gamma | Constant
"""An arrival process: ``gaps_ms(rng, count)`` gives the gaps; ``t_0 = 0``."""


@attrs.frozen
class Fixed:
    """Always ``value``."""

    value: float

    def draw(self, rng: np.random.Generator) -> float:
        """Return the value (``rng`` is not used)."""
        del rng
        return self.value


@attrs.frozen
class Uniform:
    """An integer uniform on ``[low, high]``, both included."""

    low: int
    high: int

    def draw(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        return float(rng.integers(self.low, self.high + 1))


@attrs.frozen
class Lognormal:
    """A lognormal with the given mean and median: ``mu = ln median``,
    ``sigma = sqrt(2 ln(mean / median))``; draws are rounded to integers (``rint``)."""

    mean: float
    median: float

    @property
    def mu(self) -> float:
        """``mu``."""
        return math.log(self.median)

    @property
    def sigma(self) -> float:
        """``sigma``."""
        return math.sqrt(2.0 * math.log(self.mean / self.median))

    def draw(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        return float(np.rint(rng.lognormal(self.mu, self.sigma)))


@attrs.frozen
class Exponential:
    """An exponential with the given mean (think times)."""

    mean: float

    def draw(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        return float(rng.exponential(self.mean))


LengthDistribution = Fixed | Uniform | Lognormal | Exponential
"""A scalar distribution: ``draw(rng)`` gives one value."""

_CALL = re.compile(r"\s*([a-z_]+)\s*\((.*)\)\s*")


def _call_form(option: str, text: str) -> dict[str, Any]:
    match = _CALL.fullmatch(text)
    if match is None:
        raise WorkloadConfigError(f"{option}: expected a form like name(args), got {text!r}")
    kind, inside = match.groups()
    args: list[float] = []
    for part in (p.strip() for p in inside.split(",")) if inside.strip() else ():
        try:
            value = float(part)
        except ValueError:
            raise WorkloadConfigError(f"{option}: {part!r} is not a number") from None
        args.append(int(value) if value.is_integer() and "." not in part else value)
    names = {
        "poisson": ("rate",),
        "gamma": ("rate", "cv"),
        "constant": ("rate",),
        "fixed": ("value",),
        "uniform": ("low", "high"),
        "lognormal": ("mean", "median"),
        "exponential": ("mean",),
    }.get(kind)
    if names is None:
        return {"kind": kind}
    if len(args) != len(names):
        raise WorkloadConfigError(
            f"{option}: {kind} takes {len(names)} argument(s) ({', '.join(names)}), got {len(args)}"
        )
    return {"kind": kind, **dict(zip(names, args, strict=True))}


def _as_mapping(option: str, spec: object) -> Mapping[str, Any]:
    if isinstance(spec, str):
        return _call_form(option, spec)
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return {"kind": "fixed", "value": spec}
    if isinstance(spec, Mapping):
        return spec
    raise WorkloadConfigError(f"{option}: expected a string or a table, got {spec!r}")


def parse_arrivals(spec: object, *, option: str = "arrivals") -> ArrivalProcess:
    """Parse an arrival process: ``poisson(rate)``, ``gamma(rate, cv)``, ``constant(rate)``
    or the same as a table ``{"kind": ..., "rate": ..., "cv": ...}``; an already built value
    is returned as is.

    Raises:
        WorkloadConfigError: an unknown kind or a bad parameter.
    """
    if isinstance(spec, (Poisson, Gamma, Constant)):
        return spec
    table = _as_mapping(option, spec)
    kind = table.get("kind")
    _unknown_keys(
        option, table, {"poisson": {"rate"}, "gamma": {"rate", "cv"}, "constant": {"rate"}}
    )
    if kind == "poisson":
        return Poisson(_positive(option, "rate", table.get("rate")))
    if kind == "gamma":
        return Gamma(
            _positive(option, "rate", table.get("rate")), _positive(option, "cv", table.get("cv"))
        )
    if kind == "constant":
        return Constant(_positive(option, "rate", table.get("rate")))
    raise WorkloadConfigError(
        f"{option}: unknown arrival process {kind!r} (known: poisson, gamma, constant)"
    )


def parse_distribution(
    spec: object, *, option: str, allow_exponential: bool = False
) -> LengthDistribution:
    """Parse a scalar distribution: a number (fixed), ``fixed(v)``, ``uniform(lo, hi)``,
    ``lognormal(mean, median)`` (and ``exponential(mean)`` for think times), or a table.

    Raises:
        WorkloadConfigError: an unknown kind or a bad parameter.
    """
    if isinstance(spec, (Fixed, Uniform, Lognormal, Exponential)):
        return spec
    table = _as_mapping(option, spec)
    kind = table.get("kind")
    _unknown_keys(
        option,
        table,
        {
            "fixed": {"value"},
            "uniform": {"low", "high"},
            "lognormal": {"mean", "median"},
            "exponential": {"mean"},
        },
    )
    if kind == "fixed":
        value = table.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise WorkloadConfigError(f"{option}: value must be a number >= 0, got {value!r}")
        return Fixed(float(value))
    if kind == "uniform":
        low = _integer(option, "low", table.get("low"), 0)
        high = _integer(option, "high", table.get("high"), 0)
        if high < low:
            raise WorkloadConfigError(f"{option}: high must be >= low, got {low} and {high}")
        return Uniform(low, high)
    if kind == "lognormal":
        mean = _positive(option, "mean", table.get("mean"))
        median = _positive(option, "median", table.get("median"))
        if mean < median:
            raise WorkloadConfigError(f"{option}: mean must be >= median, got {mean} and {median}")
        return Lognormal(mean, median)
    if kind == "exponential" and allow_exponential:
        return Exponential(_positive(option, "mean", table.get("mean")))
    known = "fixed, uniform, lognormal" + (", exponential" if allow_exponential else "")
    raise WorkloadConfigError(f"{option}: unknown distribution {kind!r} (known: {known})")


def _unknown_keys(option: str, table: Mapping[str, Any], allowed: Mapping[str, set[str]]) -> None:
    keys = allowed.get(str(table.get("kind")))
    if keys is None:
        return
    extra = sorted(set(table) - keys - {"kind"})
    if extra:
        raise WorkloadConfigError(f"{option}: unknown key(s) {', '.join(extra)}")
