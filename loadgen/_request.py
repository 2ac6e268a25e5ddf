"""The request record every reader and generator produces (REFERENCE-workloads §1)."""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np
import numpy.typing as npt

from ._blank import blank
from ._slo import SLO

__all__ = ("ArrivalRule", "Dep", "Identity", "Lineage", "Request", "as_hash_ids")

HashIds = npt.NDArray[np.int64]


def as_hash_ids(values: object) -> HashIds:
    """Return ``values`` as a read-only, contiguous ``int64`` array of content ids.

    An array that already is one (read-only, contiguous, one-dimensional ``int64``) is
    returned as it is, so readers that build their arrays once do not pay for a copy.
    """
    if (
        isinstance(values, np.ndarray)
        and values.dtype == np.int64
        and values.ndim == 1
        and values.flags.c_contiguous
        and not values.flags.writeable
    ):
        return values
    arr = np.array(values, dtype=np.int64, copy=True)
    if arr.ndim != 1:
        # only then: a reshaped array is a second object viewing the first (twice the memory
        # for the few ids a request has)
        arr = arr.reshape(-1)
    arr.flags.writeable = False
    return arr


def _hash_ids_eq(a: HashIds, b: HashIds) -> bool:
    return bool(np.array_equal(a, b))


@attrs.frozen
class Dep:
    """A dependency of one request on another (REFERENCE-workloads §1.1).

    Attributes:
        request_id: the id of the request depended on.
        on: ``"completion"`` (released ``delay_ms`` after it completes) or ``"start"``
            (``delay_ms`` after it was released).
        delay_ms: the delay as authored, before any speedup, in milliseconds (>= 0).
    """

    request_id: str
    on: Literal["completion", "start"] = "completion"
    delay_ms: float = 0.0


@attrs.frozen
class ArrivalRule:
    """When a request may be released (REFERENCE-workloads §1.1).

    ``release = max(O + not_before_ms / s, max(event(d) + d.delay_ms / s for d in after))``;
    a missing term is dropped. Roots have ``not_before_ms`` and no ``after``.
    """

    not_before_ms: float | None = 0.0
    after: tuple[Dep, ...] = ()


@attrs.frozen
class Lineage:
    """Conversation lineage shared by every request of a conversation (§6)."""

    root_conversation_id: str
    parent_conversation_id: str | None = None
    schema: str = "conversation-lineage"
    version: int = 1


@attrs.frozen
class Identity:
    """Who a request belongs to (REFERENCE-workloads §1.2)."""

    conversation_id: str | None = None
    turn_index: int | None = None
    play_id: str | None = None
    lane: int | None = None
    phase: Literal["measure", "primer", "warmup"] = "measure"
    lineage: Lineage | None = None


@attrs.frozen
class Request:
    """One model call of a workload (REFERENCE-workloads §1).

    Attributes:
        id: unique in the workload, deterministic (never random).
        input_length: prompt tokens ``P`` (>= 1).
        output_length: tokens to generate ``N`` (>= 0; 0 means prefill only).
        block_size: tokens per content id ``T`` of ``hash_ids``.
        hash_ids: run-unique content ids, ``ceil(P / T)`` of them, as a read-only int64
            array; id ``i`` covers prompt tokens ``[i*T, min(P, (i+1)*T))``.
        arrival: when the request may be released.
        identity: session, conversation, play and lineage.
        model: the source's model name (reports only).
        recorded_service_ms: the source's measured latency, informational.
        slo: the request's own service-level objective (from its trace or synthetic spec),
            or None: the run's SLO (``--slo``) then applies. The report judges the request
            against it (``meets_slo``, goodput); policies may read it.
    """

    id: str
    input_length: int
    output_length: int
    block_size: int
    hash_ids: HashIds = attrs.field(
        converter=as_hash_ids, eq=attrs.cmp_using(eq=_hash_ids_eq), hash=False, repr=False
    )
    arrival: ArrivalRule = ArrivalRule()
    identity: Identity = Identity()
    model: str | None = None
    recorded_service_ms: float | None = None
    slo: SLO | None = None

    @property
    def arrival_ms(self) -> float:
        """The absolute release time of a root request (``not_before_ms``, 0 if unset)."""
        return 0.0 if self.arrival.not_before_ms is None else self.arrival.not_before_ms


_BLANK = blank(Request)


def requests_from_columns(
    ids: list[str],
    input_lengths: list[int],
    output_lengths: list[int],
    block_size: int,
    hash_ids: list[HashIds],
    arrivals: list[ArrivalRule],
    identities: list[Identity],
) -> tuple[Request, ...]:
    """Build many requests from validated columns, as ``Request(...)`` would, faster.

    A reader that has validated whole columns builds its requests here: each is made as a
    blank and filled with plain stores (:mod:`loadgen._blank`), skipping the per-field
    ``__init__`` machinery (half the instructions of setting each slot through its
    descriptor, bench/read.py). Every ``hash_ids`` must already be what
    :func:`as_hash_ids` returns unchanged (a read-only contiguous one-dimensional int64
    array); it is not checked. ``model``, ``recorded_service_ms`` and ``slo`` are None.
    """
    columns = zip(ids, input_lengths, output_lengths, hash_ids, arrivals, identities, strict=True)
    if _BLANK is None:  # pragma: no cover - CPython allows the blanks
        return tuple(
            Request(rid, prompt, output, block_size, content, arrival, identity)
            for rid, prompt, output, content, arrival, identity in columns
        )
    made, cls = _BLANK, Request
    out: list[Request] = []
    append = out.append
    for rid, prompt, output, content, arrival, identity in columns:
        request: Any = made()
        request.id = rid
        request.input_length = prompt
        request.output_length = output
        request.block_size = block_size
        request.hash_ids = content
        request.arrival = arrival
        request.identity = identity
        request.model = None
        request.recorded_service_ms = None
        request.slo = None
        request.__class__ = cls
        append(request)
    return tuple(out)
