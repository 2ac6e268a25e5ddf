"""Records in record order, as requests settle: the columns, and the lines of ``requests.jsonl``.

``requests.jsonl`` lists the workload's requests in workload order, then the requests only
the run knew of (play instances) — not in the order requests settle. A :class:`RecordStream`
takes each record as its request settles, at its *position* in that order, and passes it on
as soon as every earlier position is done: its row to the summary's columns, its line to the
output, its record to the kept list (when records are kept).

Records that settle ahead of their turn wait in a reorder buffer. Their rows are small; their
lines, the bulk, stay in memory up to ``spill_bytes`` and beyond that go to an anonymous
temporary file (deleted by the operating system however the process ends), to be copied out
when their turn comes. So memory stays bounded even when one early request is in flight to
the end of the run, and an open-loop run, whose requests settle roughly in arrival order,
writes every line once, straight to the output.

Rules:

1. Positions ``0 .. n-1`` are the workload's requests (:meth:`RecordStream.position`); later
   ones are given out in order by :meth:`RecordStream.next_extra`.
2. Every position gets exactly one :meth:`~RecordStream.put` or :meth:`~RecordStream.skip`
   (a workload request without a record); :meth:`~RecordStream.close` then checks that
   nothing is left waiting.
3. Whatever the settle order, the rows, lines and kept records come out in position order,
   so the output is the same bytes as writing every record at the end.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import BinaryIO

import attrs

import simclock
from loadgen import Request

from ._columns import RequestColumns, Row, row_of
from ._records import TERMINAL_STATUSES, RequestRecord, Settled, TokenTimesMode, request_line

__all__ = ("SPILL_BYTES", "RecordStream")

SPILL_BYTES = 32 * 1024 * 1024
"""Lines waiting for their turn beyond this many bytes go to a temporary file."""


@attrs.define(eq=False)
class _Waiting:
    """A record that settled ahead of its turn."""

    row: Row
    line: bytes | None  # None: no line is written, or it was spilled
    spilled: bool = False  # the line is in the spill file at (offset, size)
    offset: int = 0
    size: int = 0
    record: RequestRecord | None = None


@attrs.define(eq=False)
class RecordStream:
    """Takes records by position as requests settle; passes them on in position order.

    State: ``_next``, the first position not yet passed on; ``_waiting``, the records that
    came before their turn (and ``_skipped``, positions with no record ahead of ``_next``);
    the spill file once lines overflowed ``spill_bytes``.

    Attributes:
        requests: the workload's requests: position ``i`` is ``requests[i]``.
        columns: receives every record's row, in position order.
        keep: keep the records (:meth:`close` returns them).
        write: receives every record's ``requests.jsonl`` line, in position order; None to
            write none.
        token_times: how the lines hold token times.
        spill_bytes: waiting lines held in memory before they go to a temporary file.
        spill_dir: where that file goes (default: the system's temporary directory).
        positions: request id -> position of ``requests``, when the caller already has that
            table (a replay's :class:`PreparedWorkload` does); else built when first needed.
    """

    requests: Sequence[Request]
    columns: RequestColumns = attrs.field(factory=RequestColumns, kw_only=True)
    keep: bool = attrs.field(default=True, kw_only=True)
    write: Callable[[bytes], object] | None = attrs.field(default=None, kw_only=True)
    token_times: TokenTimesMode = attrs.field(default="full", kw_only=True)
    spill_bytes: int = attrs.field(default=SPILL_BYTES, kw_only=True)
    spill_dir: str | None = attrs.field(default=None, kw_only=True)
    positions: Mapping[str, int] | None = attrs.field(default=None, kw_only=True)
    kept: list[RequestRecord] = attrs.field(factory=list, init=False)
    _settled: bytearray = attrs.field(factory=bytearray, init=False)
    _next: int = attrs.field(default=0, init=False)
    _extra: int = attrs.field(default=-1, init=False)
    _waiting: dict[int, _Waiting | None] = attrs.field(factory=dict, init=False)
    _held_bytes: int = attrs.field(default=0, init=False)
    _spill: BinaryIO | None = attrs.field(default=None, init=False)
    _spill_end: int = attrs.field(default=0, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._settled = bytearray(len(self.requests))
        self._extra = len(self.requests)

    # -- positions ---------------------------------------------------------------------------

    def position(self, request_id: str) -> int | None:
        """The position of a workload request, None for a request not in the workload."""
        positions = self.positions
        if positions is None:
            positions = self.positions = {r.id: i for i, r in enumerate(self.requests)}
        return positions.get(request_id)

    def next_extra(self) -> int:
        """The next position after the workload's (rule 1)."""
        position = self._extra
        self._extra += 1
        return position

    def settled(self, position: int) -> bool:
        """Whether the workload request at ``position`` already has its record."""
        return position < len(self._settled) and self._settled[position] != 0

    def settled_status(self, position: int) -> str | None:
        """The status of the record taken for workload position ``position``, if any."""
        code = self._settled[position] if position < len(self._settled) else 0
        return None if code == 0 else TERMINAL_STATUSES[code - 1]

    # -- taking records ----------------------------------------------------------------------

    def put(self, position: int, settled: Settled) -> None:
        """Take the record of ``position`` (once per position).

        Raises:
            simclock.InternalError: the position was already taken or passed on.
        """
        if position < self._next or position in self._waiting:
            raise simclock.InternalError(f"record position {position} given twice")
        record = settled.record
        if position < len(self._settled):
            self._settled[position] = 1 + TERMINAL_STATUSES.index(record.status)
        line = None if self.write is None else request_line(record, token_times=self.token_times)
        if position == self._next:
            self._emit(row_of(settled), line, record if self.keep else None)
            self._next += 1
            self._drain()
            return
        waiting = _Waiting(row_of(settled), line, record=record if self.keep else None)
        self._waiting[position] = waiting
        if line is not None:
            self._held_bytes += len(line)
            if self._held_bytes > self.spill_bytes:
                self._spill_waiting()

    def skip(self, position: int) -> None:
        """Mark ``position`` as having no record."""
        if position < self._next or position in self._waiting:
            raise simclock.InternalError(f"record position {position} given twice")
        if position == self._next:
            self._next += 1
            self._drain()
        else:
            self._waiting[position] = None

    def close(self) -> tuple[RequestRecord, ...]:
        """Check that every position was passed on (rule 2); return the kept records.

        Raises:
            simclock.InternalError: a position is still waiting for an earlier one.
        """
        if self._waiting:
            first = min(self._waiting)
            raise simclock.InternalError(
                f"record position {first} waits for position {self._next}, never given"
            )
        self._close_spill()
        self._closed = True
        kept = tuple(self.kept)
        self.kept = []
        return kept

    def discard(self) -> None:
        """Drop whatever is waiting and the spill file (a run that is abandoned)."""
        self._waiting.clear()
        self._close_spill()

    # -- internals ---------------------------------------------------------------------------

    def _emit(self, row: Row, line: bytes | None, record: RequestRecord | None) -> None:
        self.columns.append(row)
        if line is not None and self.write is not None:
            self.write(line)
        if record is not None:
            self.kept.append(record)

    def _drain(self) -> None:
        waiting = self._waiting
        while self._next in waiting:
            item = waiting.pop(self._next)
            self._next += 1
            if item is None:
                continue
            line = item.line
            if item.spilled:
                line = self._unspill(item)
            elif line is not None:
                self._held_bytes -= len(line)
            self._emit(item.row, line, item.record)

    def _spill_waiting(self) -> None:
        """Move every waiting line to the spill file."""
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(dir=self.spill_dir)  # noqa: SIM115
        spill = self._spill
        spill.seek(self._spill_end)
        for item in self._waiting.values():
            if item is None or item.line is None:
                continue
            item.offset = self._spill_end
            item.size = len(item.line)
            spill.write(item.line)
            self._spill_end += item.size
            item.line = None
            item.spilled = True
        self._held_bytes = 0

    def _unspill(self, item: _Waiting) -> bytes:
        spill = self._spill
        if spill is None:  # pragma: no cover - a spilled line always has its file
            raise simclock.InternalError("a spilled record line has no spill file")
        spill.seek(item.offset)
        return spill.read(item.size)

    def _close_spill(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
            self._spill_end = 0
