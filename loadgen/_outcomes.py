"""What became of each request: the outcome record, and the outcomes of a run kept as columns.

A timestamp run (no sessions, no lanes) accounts for every workload request at its position
in the workload. Once such a request settles outside a play, nothing about it can change, and
all its outcome holds beyond the workload request itself is a status and two instants: an
:class:`OutcomeLedger` keeps those three numbers per position (17 bytes), not an object. An
:class:`Outcomes` sequence shows a ledger as :class:`RequestOutcome` values, built when read,
equal to the ones the driver would have kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import attrs
import numpy as np
import numpy.typing as npt

from ._built_on_read import BuiltOnRead
from ._request import Request

__all__ = (
    "TERMINAL_STATUSES",
    "OutcomeLedger",
    "Outcomes",
    "RequestOutcome",
    "TerminalStatus",
)

TerminalStatus = Literal[
    "completed",
    "rejected",
    "unplaced",
    "incomplete",
    "failed",
    "cancelled",
    "skipped",
    "never_issued",
]
"""The one terminal state each request ends in.

The release driver settles ``completed``, ``rejected``, ``cancelled``, ``incomplete``,
``skipped`` and ``never_issued`` (§4.4); the replay report also tells ``unplaced`` (the
policy never placed it) and ``failed`` (its engine failed) from ``rejected``.
"""

TERMINAL_STATUSES: tuple[TerminalStatus, ...] = get_args(TerminalStatus)
"""Every terminal status, in the order reports list them (``replay`` exports this tuple)."""

_CODE: dict[str, int] = {status: code for code, status in enumerate(TERMINAL_STATUSES, start=1)}
# An instant column's None.
_NONE = np.iinfo(np.int64).min


@attrs.frozen
class RequestOutcome:
    """What became of one request.

    Attributes:
        request_id: its id (instance id for play instances).
        status: one of :data:`TERMINAL_STATUSES`.
        released_ns: when it was handed on, or None.
        terminal_ns: when its status was settled.
        phase: ``measure``, ``primer`` or ``warmup``.
        play_id: its play (instance) id, or None.
        request: the request as the driver ran it, or None when unknown. For a play
            instance it is the instance's request (§5.4): ids, conversation id, play id,
            lane and lineage in the ``P#k`` namespace; primers and warm-ups as built from
            their source request (§5.6). The report takes a record's identity from it.
    """

    request_id: str
    status: str
    released_ns: int | None
    terminal_ns: int | None
    phase: str
    play_id: str | None
    request: Request | None = None


def _instant(value: int | None) -> int:
    return _NONE if value is None else value


@attrs.define(eq=False)
class OutcomeLedger:
    """The settled outcomes of a run's workload requests, by workload position, as columns.

    State per position: *open* (code 0: not settled here; the request is still in the run,
    or was never taken into it) → *settled* (code ``1 + TERMINAL_STATUSES.index(status)``,
    with its release and terminal instants). A position is settled once.

    Attributes:
        requests: the workload's requests; position ``i`` is ``requests[i]``.
    """

    requests: Sequence[Request]
    _codes: npt.NDArray[np.uint8] = attrs.field(init=False, repr=False)
    _released: npt.NDArray[np.int64] = attrs.field(init=False, repr=False)
    _terminal: npt.NDArray[np.int64] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        n = len(self.requests)
        self._codes = np.zeros(n, dtype=np.uint8)
        self._released = np.full(n, _NONE, dtype=np.int64)
        self._terminal = np.full(n, _NONE, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.requests)

    def settle(
        self, position: int, status: str, released_ns: int | None, terminal_ns: int | None
    ) -> None:
        """Record the outcome of the request at ``position``."""
        self._codes[position] = _CODE[status]
        self._released[position] = _instant(released_ns)
        self._terminal[position] = _instant(terminal_ns)

    def settle_unreleased(
        self, positions: npt.NDArray[np.int64], status: str, terminal_ns: int
    ) -> None:
        """Record ``status`` at ``terminal_ns`` for requests never released, in one step."""
        self._codes[positions] = _CODE[status]
        self._released[positions] = _NONE
        self._terminal[positions] = terminal_ns

    def settled(self, position: int) -> bool:
        """Whether the request at ``position`` has its outcome here."""
        return bool(self._codes[position])

    def outcome(self, position: int) -> RequestOutcome | None:
        """The outcome settled at ``position``, or None while it is open."""
        code = self._codes.item(position)
        if not code:
            return None
        released = self._released.item(position)
        terminal = self._terminal.item(position)
        return _outcome_of(
            self.requests[position],
            TERMINAL_STATUSES[code - 1],
            None if released == _NONE else released,
            None if terminal == _NONE else terminal,
        )

    def copy(self) -> OutcomeLedger:
        """A ledger with the same outcomes that later settlements of this one leave as is."""
        other = OutcomeLedger(self.requests)
        other._codes = self._codes.copy()
        other._released = self._released.copy()
        other._terminal = self._terminal.copy()
        return other


_FIELDS = ("request_id", "status", "released_ns", "terminal_ns", "phase", "play_id", "request")
if tuple(f.name for f in attrs.fields(RequestOutcome)) != _FIELDS:  # pragma: no cover
    raise ImportError("the fields of RequestOutcome changed; update loadgen._outcomes")
_SET = tuple(RequestOutcome.__dict__[name].__set__ for name in _FIELDS)
_new = object.__new__


def _outcome_of(
    request: Request, status: str, released_ns: int | None, terminal_ns: int | None
) -> RequestOutcome:
    """``RequestOutcome(request.id, status, released_ns, terminal_ns, phase, play_id,
    request)``, its slots filled directly (outcomes are built again each time they are read)."""
    identity = request.identity
    s_id, s_status, s_released, s_terminal, s_phase, s_play, s_request = _SET
    outcome: RequestOutcome = _new(RequestOutcome)
    s_id(outcome, request.id)
    s_status(outcome, status)
    s_released(outcome, released_ns)
    s_terminal(outcome, terminal_ns)
    s_phase(outcome, identity.phase)
    s_play(outcome, identity.play_id)
    s_request(outcome, request)
    return outcome


class Outcomes(BuiltOnRead[RequestOutcome]):
    """The outcome of every workload request in workload order, built when read.

    Position ``i`` reads the ledger's outcome; where the ledger has none, the outcome given
    for ``i`` (a request still in the run, or one of a play); else the request was never taken
    into the run: ``never_issued``, with neither instant. Compares equal to any sequence of
    the same outcomes (a tuple, a list).

    Args:
        ledger: the settled outcomes (not changed afterwards).
        others: outcomes by position, for positions the ledger has none of.
    """

    __slots__ = ("_ledger", "_others")
    _item_name = "outcome"

    def __init__(self, ledger: OutcomeLedger, others: Mapping[int, RequestOutcome]) -> None:
        self._ledger = ledger
        self._others = others

    def __len__(self) -> int:
        return len(self._ledger)

    def _at(self, position: int) -> RequestOutcome:
        found = self._ledger.outcome(position)
        if found is not None:
            return found
        other = self._others.get(position)
        if other is not None:
            return other
        return _outcome_of(self._ledger.requests[position], "never_issued", None, None)

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))
