"""The frontend tokenization stage: a FIFO pool of workers before routing (REFERENCE-engine §7).

A request spends ``service_ms = base_ms + per_input_token_us / 1000 · P`` in one of ``workers``
identical workers. Requests enter in arrival order (ties: trace order) and each takes the
earliest-free worker (ties: the lowest index); ``start = max(arrival, worker free)``,
``tokenized = start + service``. The request reaches the router at ``tokenized``; TTFT and E2E
still count from the arrival. The stage is off by default (zero cost: ``tokenized = arrival``).

:meth:`TokenizerStage.tokenized_ms` computes the times for a whole list at once (a pure
function); :class:`TokenizerPool` is the same queue as a component on the virtual clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs

import simclock

from ._timing import TimingConfigError, _finite_non_negative

__all__ = ("Tokenization", "TokenizerPool", "TokenizerStage")


def _workers(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TimingConfigError(f"TokenizerStage.workers must be an integer >= 1, got {value!r}")


def _check_length(input_length: object) -> int:
    if isinstance(input_length, bool) or not isinstance(input_length, int) or input_length < 0:
        raise TimingConfigError(f"input_length must be an integer >= 0, got {input_length!r}")
    return input_length


@attrs.frozen(kw_only=True)
class TokenizerStage:
    """The configuration of the tokenization stage (§7); off (zero cost) by default.

    Attributes:
        workers: identical workers serving the FIFO queue (integer ``>= 1``); default 1.
        base_ms: fixed cost per request, ms; default 0.
        per_input_token_us: cost per prompt token, µs; default 0.

    Raises:
        TimingConfigError: ``workers`` is not an integer ``>= 1`` or a cost is not a finite
            number ``>= 0``.
    """

    workers: int = attrs.field(default=1, validator=_workers)
    base_ms: float = attrs.field(default=0.0, validator=_finite_non_negative)
    per_input_token_us: float = attrs.field(default=0.0, validator=_finite_non_negative)

    @property
    def enabled(self) -> bool:
        """Whether tokenization costs anything (otherwise requests pass straight through)."""
        return self.base_ms > 0 or self.per_input_token_us > 0

    def service_ms(self, input_length: int) -> float:
        """``base_ms + per_input_token_us / 1000 · input_length``.

        Raises:
            TimingConfigError: ``input_length`` is not an integer ``>= 0``.
        """
        tokens = _check_length(input_length)
        return float(self.base_ms) + float(self.per_input_token_us) / 1000.0 * tokens

    def service_ns(self, input_length: int) -> int:
        """:meth:`service_ms` in integer nanoseconds, ``round(ms · 1e6)``."""
        return round(self.service_ms(input_length) * 1_000_000)

    def tokenized_ms(self, requests: Sequence[tuple[float, int]]) -> tuple[float, ...]:
        """When each request leaves the stage, in ms (a pure function of the whole list).

        Args:
            requests: ``(arrival_ms, input_length)`` per request, in trace order (the order
                that breaks arrival ties).

        Returns:
            ``tokenized_ms`` per request, in the order given.

        Raises:
            TimingConfigError: an arrival is not finite or an input length is negative.
        """
        for arrival, _ in requests:
            if isinstance(arrival, bool) or not math.isfinite(arrival):
                raise TimingConfigError(f"arrival_ms must be a finite number, got {arrival!r}")
        services = [self.service_ms(length) for _, length in requests]
        return tuple(_fifo([float(a) for a, _ in requests], services, self.workers))

    def tokenized_ns(self, requests: Sequence[tuple[int, int]]) -> tuple[int, ...]:
        """As :meth:`tokenized_ms`, in integer nanoseconds (service times rounded to ns).

        Args:
            requests: ``(arrival_ns, input_length)`` per request, in trace order.

        Returns:
            ``tokenized_ns`` per request, in the order given; equals what a
            :class:`TokenizerPool` yields for the same arrivals.
        """
        services = [self.service_ns(length) for _, length in requests]
        return tuple(_fifo([int(a) for a, _ in requests], services, self.workers))

    def pool(self) -> TokenizerPool:
        """Return a fresh, idle :class:`TokenizerPool` with this configuration."""
        return TokenizerPool(self)


_Time = TypeVar("_Time", int, float)


def _fifo(arrivals: list[_Time], services: list[_Time], workers: int) -> list[_Time]:
    """Serve requests FIFO by arrival (stable, so ties keep trace order) on the earliest-free
    worker (ties: lowest index); return each request's finish time, in the order given."""
    if not arrivals:
        return []
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i])
    idle_since = min(arrivals)  # every worker is idle before the first arrival
    free: list[tuple[_Time, int]] = [(idle_since, w) for w in range(workers)]
    done: list[_Time] = list(arrivals)
    for i in order:
        free_at, worker = heapq.heappop(free)
        finish = max(arrivals[i], free_at) + services[i]
        done[i] = finish
        heapq.heappush(free, (finish, worker))
    return done


@attrs.frozen
class Tokenization:
    """One request's pass through the stage.

    Attributes:
        worker: the worker index that served it.
        start_ns: when its service began (``tokenize_start``).
        done_ns: when it left the stage (``tokenized``).
    """

    worker: int
    start_ns: int
    done_ns: int


_IDLE_SINCE_NS = -(2**63)


@attrs.define(eq=False)
class TokenizerPool:
    """The tokenization queue as a component on the virtual clock.

    State: when each worker is next free (integer ns). :meth:`assign` books the
    earliest-free worker (ties: lowest index) for a request arriving at a given instant;
    :meth:`tokenize` does that at the current virtual instant and sleeps until the request is
    tokenized. Requests must be submitted in arrival order, ties in trace order — the order in
    which a driver releases them.

    Attributes:
        stage: the configuration.
    """

    stage: TokenizerStage
    _free_at_ns: list[tuple[int, int]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        # Every worker starts idle "since forever": a first request starts at its arrival.
        self._free_at_ns = [(_IDLE_SINCE_NS, w) for w in range(self.stage.workers)]

    def assign(self, arrival_ns: int, input_length: int) -> Tokenization:
        """Book a worker for a request arriving at ``arrival_ns`` (no waiting happens here).

        Args:
            arrival_ns: the request's arrival, integer ns (non-decreasing across calls).
            input_length: its prompt length ``P``.

        Returns:
            The worker and the start and end of the service.

        Raises:
            TimingConfigError: ``input_length`` is not an integer ``>= 0``.
        """
        service = self.stage.service_ns(input_length)
        free_at, worker = heapq.heappop(self._free_at_ns)
        start = max(arrival_ns, free_at)
        heapq.heappush(self._free_at_ns, (start + service, worker))
        return Tokenization(worker=worker, start_ns=start, done_ns=start + service)

    async def tokenize(self, input_length: int, *, waiter: str) -> Tokenization:
        """Queue a request arriving now and return once it is tokenized.

        Args:
            input_length: the prompt length ``P``.
            waiter: a name for the sleeping task (shown by the loop's diagnostics).

        Returns:
            The booking; the virtual clock reads ``done_ns`` on return.
        """
        now = simclock.now_ns()
        booking = self.assign(now, input_length)
        if booking.done_ns > now:
            await simclock.sleep_until_ns(booking.done_ns, waiter=waiter)
        return booking
