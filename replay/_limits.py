"""The documented limits of a replay's options, checked before anything is read or run.

Virtual time is an int64 count of nanoseconds (about 292 years); an option whose value
would put an instant past it, or make the run build an absurd number of components, is
refused up front with a one-line error naming where it was set. The limits are listed in
``docs/reference/errors.md``.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen import LoadMode, Workload, nominal_release_ms

from ._exceptions import ConfigError

__all__ = (
    "CLOCK_RANGE_S",
    "MAX_COUNT",
    "MAX_RATE",
    "MAX_WORKERS",
    "MIN_KV_BANDWIDTH_GBPS",
    "MIN_RATE",
    "check_count",
    "check_rate",
    "check_schedule",
    "check_virtual_time",
)

CLOCK_RANGE_S = (2**63 - 1) / 1e9
"""The virtual clock's range in seconds (int64 nanoseconds, about 292 years)."""
MAX_WORKERS = 4096
"""The most engines one pool (``workers``, ``prefill_workers``, ``decode_workers``) may have."""
MAX_COUNT = 1_000_000
"""The largest ``concurrency``, ``lanes`` and ``warmup_repeats``."""
MIN_RATE = 1e-6
"""The smallest ``speedup`` and ``target_rate`` (per second)."""
MAX_RATE = 1e9
"""The largest ``speedup`` and ``target_rate`` (per second)."""
MIN_KV_BANDWIDTH_GBPS = 1e-6
"""The smallest KV-link bandwidth, in GB/s (1 kB/s)."""


def _number(value: object) -> float | None:
    """``value`` as a float when it is an int or float (not a bool), else ``None``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def check_count(value: object, *, where: str, maximum: int) -> None:
    """Refuse an integer count above ``maximum`` (the caller checks the type and minimum)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > maximum:
        raise ConfigError(f"{where}: must be at most {maximum:,}, got {value}")


def check_rate(value: object, *, where: str, minimum: float, maximum: float) -> None:
    """Refuse a finite positive number outside ``[minimum, maximum]`` (the caller refuses
    other values with its own message)."""
    number = _number(value)
    if number is not None and 0 < number < math.inf and not minimum <= number <= maximum:
        raise ConfigError(f"{where}: must be between {minimum:g} and {maximum:g}, got {value}")


def check_virtual_time(value: object, *, where: str) -> None:
    """Refuse a virtual time in seconds past the clock's range."""
    number = _number(value)
    if number is not None and number > CLOCK_RANGE_S:
        raise ConfigError(
            f"{where}: must be at most {CLOCK_RANGE_S:.4g} s (the virtual clock's range), "
            f"got {value}"
        )


def check_schedule(workload: Workload, load: LoadMode, *, where: str) -> None:
    """Refuse a load mode that would release a request past the clock's range.

    The nominal schedule (every request completing the instant it is released) is scaled by
    ``speedup``, or by the pace ``target_rate`` sets; closed-loop and lane modes take their
    pace from completions and are not checked here.

    Args:
        workload: the requests.
        load: the load mode.
        where: where the pace was set (``--speedup``, ``run.toml: workload.target_rate``).

    Raises:
        ConfigError: the last nominal release would be past :data:`CLOCK_RANGE_S`.
    """
    if load.concurrency is not None or load.lanes is not None or not workload.requests:
        return
    release_ms = nominal_release_ms(workload.requests)
    last_ms = float(np.max(release_ms))
    speedup = load.speedup
    if load.target_rate is not None:
        roots = [r.arrival.not_before_ms or 0.0 for r in workload.requests if not r.arrival.after]
        span_s = (max(roots) - min(roots)) / 1000 if roots else 0.0
        if span_s <= 0:
            return  # the driver reports a schedule with no span itself
        speedup = load.target_rate / (len(roots) / span_s)
    last_s = last_ms / 1000 / speedup
    if not last_s <= CLOCK_RANGE_S:
        raise ConfigError(
            f"{where}: the last request would be released at {last_s:.4g} s of virtual time, "
            f"past the virtual clock's range ({CLOCK_RANGE_S:.4g} s)"
        )
