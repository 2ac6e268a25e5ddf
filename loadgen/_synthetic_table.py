"""A synthetic workload's requests held as columns, each request built when it is read.

A million requests of a synthetic workload cost about 380 bytes each as objects (the request,
its id, its arrival rule, its view of the content ids) and about 40 as numpy columns. A
:class:`SyntheticRequests` keeps the columns and builds request ``i`` each time it is read:
a new object every time, equal to the one before and to the one the eager generator makes
(it makes its requests here). Whatever reads a workload's requests (length, indexing,
iteration, equality) sees the same sequence as with a tuple of them;
:meth:`SyntheticRequests.positions` maps ids back to positions without a table of ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import attrs
import numpy as np
import numpy.typing as npt

from ._built_on_read import BuiltOnRead
from ._request import ArrivalRule, Dep, Identity, Request
from ._slo import SLO

__all__ = ("NO_IDENTITY", "SyntheticPositions", "SyntheticRequests")

#: The identity every request of an open-loop workload shares (identities are frozen).
NO_IDENTITY = Identity()

_FIELDS = (
    "id",
    "input_length",
    "output_length",
    "block_size",
    "hash_ids",
    "arrival",
    "identity",
    "model",
    "recorded_service_ms",
    "slo",
)
_SET = tuple(Request.__dict__[name].__set__ for name in _FIELDS)
_SET_NOT_BEFORE = ArrivalRule.__dict__["not_before_ms"].__set__
_SET_AFTER = ArrivalRule.__dict__["after"].__set__
if tuple(f.name for f in attrs.fields(ArrivalRule)) != (
    "not_before_ms",
    "after",
):  # pragma: no cover
    raise ImportError("the fields of ArrivalRule changed; update loadgen._synthetic_table")
_new = object.__new__
_OPEN_ID = re.compile(r"syn:(0|[1-9][0-9]*)")
_SESSION_ID = re.compile(r"syn:s(0|[1-9][0-9]*)/(0|[1-9][0-9]*)")

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


def _frozen(values: npt.ArrayLike, dtype: type) -> npt.NDArray[np.generic]:
    column: npt.NDArray[np.generic] = np.ascontiguousarray(values, dtype=dtype)
    column.flags.writeable = False
    return column


class SyntheticRequests(BuiltOnRead[Request]):
    """The requests of a synthetic workload (REFERENCE-workloads §3) as columns.

    Request ``i`` is turn ``turns[i]`` of session ``sessions[i]``: id ``syn:<s>`` (open loop)
    or ``syn:s<s>/<k>`` (sessions); ``input_lengths[i]`` and ``output_lengths[i]`` tokens;
    content ids ``content[ends[i-1]:ends[i]]`` (a read-only view); a root at
    ``not_before_ms[i]`` (turn 0) or released ``think_ms[i]`` after the previous turn
    completes; identity ``Identity(conversation_id=syn:s<s>, turn_index=k)`` in sessions,
    else the shared empty one.

    Args:
        input_lengths, output_lengths: tokens.
        block_size: tokens per content id ``T``.
        content: every request's content ids, one after the other.
        ends: where each request's ids end in ``content``.
        not_before_ms: each root's release time (ignored for later turns).
        sessions: None in the open loop (request ``i`` is session ``i``, its only turn);
            else ``(session, turn, think_ms)`` columns: each request's session and turn,
            and its delay after the previous turn completes (ignored for first turns).
        slo: every request's own SLO, or None.
    """

    __slots__ = (
        "_block",
        "_content",
        "_ends",
        "_firsts",
        "_inputs",
        "_not_before",
        "_outputs",
        "_sessioned",
        "_sessions",
        "_slo",
        "_think",
        "_turns",
    )
    _item_name = "request"

    def __init__(
        self,
        *,
        input_lengths: npt.ArrayLike,
        output_lengths: npt.ArrayLike,
        block_size: int,
        content: npt.ArrayLike,
        ends: npt.ArrayLike,
        not_before_ms: npt.ArrayLike,
        sessions: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike] | None = None,
        slo: SLO | None = None,
    ) -> None:
        self._inputs = _frozen(input_lengths, np.int64)
        self._outputs = _frozen(output_lengths, np.int64)
        self._block = block_size
        self._content = _frozen(content, np.int64)
        self._ends = _frozen(ends, np.int64)
        self._not_before = _frozen(not_before_ms, np.float64)
        self._sessioned = sessions is not None
        self._slo = slo
        none: npt.NDArray[np.generic] = np.zeros(0, dtype=np.int64)
        self._sessions = self._turns = self._firsts = self._think = none
        columns = [self._inputs, self._outputs, self._ends, self._not_before]
        if sessions is not None:
            self._sessions = _frozen(sessions[0], np.int64)
            self._turns = _frozen(sessions[1], np.int64)
            self._think = _frozen(sessions[2], np.float64)
            columns += [self._sessions, self._turns, self._think]
            # each session's first turn (sessions are generated one after another)
            self._firsts = _frozen(np.flatnonzero(self._turns == 0), np.int64)
        if any(len(column) != len(self._inputs) for column in columns):
            raise ValueError("SyntheticRequests: columns of different lengths")

    def __len__(self) -> int:
        return len(self._inputs)

    def _at(self, i: int) -> Request:
        start = self._ends.item(i - 1) if i else 0
        stop = self._ends.item(i)
        if self._sessioned:
            s = self._sessions.item(i)
            k = self._turns.item(i)
            base = f"syn:s{s}"
            rid = f"{base}/{k}"
            identity = Identity(conversation_id=base, turn_index=k)
        else:
            k = 0
            base = rid = f"syn:{i}"
            identity = NO_IDENTITY
        # the rule's slots filled directly: ArrivalRule(not_before_ms, after)
        arrival: ArrivalRule = _new(ArrivalRule)
        if k == 0:
            _SET_NOT_BEFORE(arrival, self._not_before.item(i))
            _SET_AFTER(arrival, ())
        else:
            _SET_NOT_BEFORE(arrival, None)
            _SET_AFTER(arrival, (Dep(f"{base}/{k - 1}", "completion", self._think.item(i)),))
        s_id, s_in, s_out, s_block, s_ids, s_arrival, s_identity, s_model, s_service, s_slo = _SET
        request: Request = _new(Request)
        s_id(request, rid)
        s_in(request, self._inputs.item(i))
        s_out(request, self._outputs.item(i))
        s_block(request, self._block)
        s_ids(request, self._content[start:stop])
        s_arrival(request, arrival)
        s_identity(request, identity)
        s_model(request, None)
        s_service(request, None)
        s_slo(request, self._slo)
        return request

    def __repr__(self) -> str:
        return f"SyntheticRequests(<{len(self)} requests>)"

    def content_ids_stop(self) -> int:
        """One more than the largest content id of any request (0 when there is none)."""
        return int(self._content.max()) + 1 if self._content.size else 0

    def replayable(self) -> bool:
        """Whether every request passes preparation unchanged, checked on the columns.

        True when each request has exactly ``ceil(input_length / block_size)`` content ids,
        ``input_length >= 1`` and ``output_length >= 0`` (with ``block_size >= 1``), a first
        turn's release time and a later turn's delay are finite and >= 0, and the sessions
        come one after another, each with turns ``0, 1, ...`` (so ids are unique and every
        dependency names the turn before). ``replay.prepare`` then keeps the requests as
        they are, their :meth:`positions` as the id table; when False, it checks them one by
        one (and names the first problem).
        """
        if self._block < 1 or not len(self):
            return self._block >= 1
        counts = np.diff(self._ends, prepend=0)
        inputs = self._inputs.astype(np.int64, copy=False)
        need = -(-inputs // self._block)
        if (
            self._inputs.min() < 1
            or self._outputs.min() < 0
            or not np.array_equal(counts, need)
            or self._ends[-1] > len(self._content)
        ):
            return False
        if not self._sessioned:
            return bool(np.isfinite(self._not_before).all() and self._not_before.min() >= 0)
        first = self._turns == 0
        firsts = self._firsts
        # sessions 0, 1, ... one after another, each with turns 0, 1, ...
        lengths = np.diff(np.append(firsts, len(self)))
        if not (
            first[0]
            and np.array_equal(self._sessions, np.repeat(np.arange(len(firsts)), lengths))
            and np.array_equal(self._turns, np.arange(len(self)) - np.repeat(firsts, lengths))
        ):
            return False
        roots = self._not_before[first]
        delays = self._think[~first]
        return bool(
            np.isfinite(roots).all()
            and roots.min() >= 0
            and np.isfinite(delays).all()
            and (delays.size == 0 or delays.min() >= 0)
        )

    def positions(self) -> SyntheticPositions:
        """Request id → position, read off the id (no table of ids)."""
        return SyntheticPositions(self)

    def position(self, request_id: str) -> int | None:
        """The position of ``request_id``, or None when no request has that id."""
        if self._sessioned:
            match = _SESSION_ID.fullmatch(request_id)
            if match is None:
                return None
            s, k = int(match[1]), int(match[2])
            if s >= len(self._firsts):
                return None
            position = self._firsts.item(s) + k
            if position >= len(self) or self._sessions.item(position) != s:
                return None
            return int(position)
        match = _OPEN_ID.fullmatch(request_id)
        if match is None:
            return None
        position = int(match[1])
        return position if position < len(self) else None


class SyntheticPositions(Mapping[str, int]):
    """Request id → position of a :class:`SyntheticRequests`, computed from the id."""

    __slots__ = ("_requests",)

    def __init__(self, requests: SyntheticRequests) -> None:
        self._requests = requests

    def __getitem__(self, request_id: str) -> int:
        position = self._requests.position(request_id) if isinstance(request_id, str) else None
        if position is None:
            raise KeyError(request_id)
        return position

    def get(self, request_id: str, default: int | None = None) -> int | None:  # type: ignore[override]
        position = self._requests.position(request_id) if isinstance(request_id, str) else None
        return default if position is None else position

    def __contains__(self, request_id: object) -> bool:
        return isinstance(request_id, str) and self._requests.position(request_id) is not None

    def __iter__(self) -> Iterator[str]:
        return (r.id for r in self._requests)

    def __len__(self) -> int:
        return len(self._requests)
