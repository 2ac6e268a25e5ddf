"""Parse a Mooncake-style JSONL trace into rows and columns at once (``bench/read.py``).

The column-wise readers (``mooncake``, ``mooncake-delta``, ``agentic``) parse every line
once and take each field as a column. Two things make that parse cheap:

- the ``hash_ids`` lists, most of a trace's bytes, are cut out of the text before it is
  parsed and read by numpy as one int64 column: no Python int is made per content id;
- the rest is parsed as one JSON array (the lines joined by commas): the decoder makes
  each key string once for the file, not once per line, and no Python loop runs per line.

Each shortcut is taken only where checks on the text prove it gives what parsing each
line alone gives (see :func:`_cut_ids` and :func:`_as_array`); otherwise the slower
equivalent runs. Anything that is not certainly a valid row makes :func:`row_columns`
return None, and the caller reads the file record by record, which names the first bad
record.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from itertools import chain, repeat
from operator import is_not
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ._limits import MAX_TOKENS

__all__ = (
    "ALIASES",
    "Numbers",
    "RowColumns",
    "cells",
    "id_column",
    "int_column",
    "number_column",
    "parse_objects",
    "row_columns",
)

Ids = npt.NDArray[np.int64]

_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_DECODE = json.JSONDecoder().decode
#: Field aliases only the record reader resolves: a file using one is read record by record.
ALIASES = frozenset(("created_time", "input_tokens", "output_tokens", "delay_ms"))
_NONE = type(None)
_KEY = b'"hash_ids"'
#: The spellings of a ``hash_ids`` list's opening that are cut out of the text.
_OPENINGS = (b'"hash_ids": [', b'"hash_ids":[')
#: What a cut list is replaced by: a value no list has, so a row that kept its list shows.
_PLACEHOLDER = b'"hash_ids": 0'
#: Ids cut out as text are below this (longer ones go through the JSON decoder).
_LIMIT = 10**18
#: What numpy reads as part of an integer list besides digits, commas and spaces: signs
#: and other white space (JSON's tab and carriage return are left to the JSON decoder).
_OTHER = (b"+", b"-", b"\t", b"\n", b"\r", b"\x0b", b"\x0c")


class Numbers(NamedTuple):
    """A column of numbers, some absent, as arrays."""

    values: npt.NDArray[np.float64]
    """Each cell as a float, 0.0 where absent."""
    given: npt.NDArray[np.bool_]
    """Where a cell is present."""

    def cells(self) -> list[float | None]:
        """Each cell as a float, or None where absent."""
        cells: list[float | None] = self.values.tolist()
        for index in np.flatnonzero(~self.given).tolist():
            cells[index] = None
        return cells


class RowColumns(NamedTuple):
    """Every row of a Mooncake-style file as parsed, and the columns all such readers take.

    ``values`` hold every field but ``hash_ids``; ``counts`` is each row's number of raw
    ids and ``raw`` all of them, concatenated.
    """

    values: list[dict[str, object]]
    lines: list[int]
    present: set[str]
    prompts: npt.NDArray[np.int64]
    outputs: npt.NDArray[np.int64]
    stamps: Numbers
    counts: Ids
    raw: Ids


def row_columns(data: bytes) -> RowColumns | None:
    """Parse every line and take the lengths, timestamps and content ids, or None when
    the record reader must read the file (a line that is not an object, a field alias, a
    cell out of range)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    parsed: tuple[list[dict[str, object]], list[int]] | None = None
    cut = _cut_ids(data)
    if cut is not None:
        rest, counts, raw = cut
        try:
            parsed = _parse(rest.decode("utf-8"))
        except UnicodeDecodeError:
            return None
        if parsed is not None:
            values, lines = parsed
            column = [v.get("hash_ids") for v in values]
            if len(values) != counts.size or column.count(0) != len(values):
                parsed = None  # some row kept its list, or has none
    if parsed is None:
        try:
            parsed = _parse(data.decode("utf-8"))
        except UnicodeDecodeError:
            return None
        if parsed is None:
            return None
        values, lines = parsed
        ids = _id_lists([v.get("hash_ids") for v in values])
        if ids is None:
            return None
        counts, raw = ids
    if not values:
        return None
    present: set[str] = set().union(*values)
    if present & ALIASES:
        return None
    prompts = int_column([v.get("input_length") for v in values], 1, MAX_TOKENS)
    outputs = int_column([v.get("output_length") for v in values], 0, MAX_TOKENS)
    stamps = number_column([v.get("timestamp") for v in values], float("inf"))
    if prompts is None or outputs is None or stamps is None:
        return None
    return RowColumns(values, lines, present, prompts, outputs, stamps, counts, raw)


def _parse(text: str) -> tuple[list[dict[str, object]], list[int]] | None:
    """Every non-blank line's object and line number, or None if any line is not one."""
    values = _as_array(text)
    if values is None:
        return parse_objects(text)
    return values, list(range(1, len(values) + 1))


def _as_array(text: str) -> list[dict[str, object]] | None:
    """Parse ``text`` as one JSON array of its lines, if that is certainly each line's
    object in order; else None (the caller parses line by line).

    The lines are joined by commas. When every ``}`` of the text ends a line and every
    line ends with one, and the array holds one object per line, each object holds
    exactly one ``}`` (its own closing brace, so none in a string or nested object), which
    ends its line: the separators are the joins, and each line is exactly one object.
    """
    body = text[:-1] if text.endswith("\n") else text
    # Every line break follows a brace when none is left once those are replaced; the
    # replacement is one character longer, so the lengths count the lines.
    joined = body.replace("}\n", "}, ")
    lines = len(joined) - len(body) + 1
    if "\n" in joined or not body.endswith("}") or body.count("}") != lines:
        return None
    try:
        values = _DECODE("[" + joined + "]")
    except (ValueError, RecursionError):
        return None
    if len(values) != lines or set(map(type, values)) != {dict}:
        return None
    return values  # type: ignore[no-any-return]  # a list of dicts, checked above


def parse_objects(text: str) -> tuple[list[dict[str, object]], list[int]] | None:
    """Every non-blank line's JSON object and line number, or None if any is not one."""
    values: list[dict[str, object]] = []
    numbers: list[int] = []
    scan = _SCAN
    try:
        for number, raw in enumerate(text.split("\n"), start=1):
            # Only JSON whitespace is stripped: a line the record reader would see
            # differently fails the scan and sends the file to that reader.
            body = raw.strip(" \t\r")
            if not body:
                continue
            value, end = scan(body, 0)
            if end != len(body) or type(value) is not dict:
                return None
            values.append(value)
            numbers.append(number)
    except (StopIteration, ValueError, RecursionError):
        return None
    return values, numbers


def _cut_ids(data: bytes) -> tuple[bytes, Ids, Ids] | None:
    """The file with every ``hash_ids`` list replaced by ``0``, each list's id count and
    all ids; None if the lists cannot all be cut out and read as text.

    Without a backslash in the file no key is spelled with an escape and no string holds
    a quote, so each ``"hash_ids"`` is a key; when each was followed by a list of plain
    integers (checked by :func:`_digit_lists`) and each row has the key with value ``0``
    after the cut (checked by the caller), the lists are the rows' lists, in order. The
    cut works on bytes: a list holds ASCII only, and the rest is decoded (so checked as
    UTF-8) by the caller.
    """
    if b"\\" in data:
        return None
    for opening in _OPENINGS:
        pieces = data.split(opening)
        if len(pieces) > 1:
            break
    else:
        return None
    bodies: list[bytes] = []
    rests = [pieces[0]]
    add_body, add_rest = bodies.append, rests.append
    for piece in pieces[1:]:
        body, close, rest = piece.partition(b"]")
        if not close:
            return None
        add_body(body)
        add_rest(rest)
    del pieces
    cut = _PLACEHOLDER.join(rests)
    if cut.count(_KEY) != len(bodies):
        return None  # another spelling, or a list that is not cut
    ids = _digit_lists(bodies)
    if ids is None:
        return None
    return cut, *ids


def _digit_lists(bodies: list[bytes]) -> tuple[Ids, Ids] | None:
    """Each body's number of ids and all ids, if every body is the inside of a JSON list
    of integers below ``10**18``, commas and spaces; else None (such lists, and lists with
    a space before a comma, are read by the JSON decoder).

    numpy reads the bodies joined by commas; what it would take and such a list would
    not is ruled out around it without a pass over the text in numpy (each would allocate
    megabytes, bench/read.py): a sign or other white space, an item of spaces only (no
    `` ,``, no space last; an empty item, as in ``,,``, stops numpy, and a comma last
    leaves it one value short), and leading zeros (with every item holding digits, the
    values read have fewer digits than the text if any has one).
    """
    joined = b",".join(filter(None, bodies))
    if not joined:
        return np.zeros(len(bodies), dtype=np.int64), np.empty(0, dtype=np.int64)
    if any(char in joined for char in _OTHER) or b" ," in joined or joined.endswith(b" "):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            raw = np.fromstring(joined, dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning):
        return None  # a character no integer has, or two integers without a comma
    counts = np.fromiter(map(bytes.count, bodies, repeat(b",")), np.int64, len(bodies))
    counts += np.fromiter(map(bool, bodies), dtype=np.bool_, count=len(bodies))
    commas = int(counts.sum()) - 1
    if raw.size != commas + 1 or int(raw.min()) < 0 or int(raw.max()) >= _LIMIT:
        return None
    digits = raw.size  # of the values read: one each, one more per power of ten reached
    power = 10
    while power <= int(raw.max()):
        digits += int(np.count_nonzero(raw >= power))
        power *= 10
    if digits != len(joined) - commas - joined.count(b" "):
        return None  # a leading zero
    return counts, raw


def _id_lists(column: list[object]) -> tuple[Ids, Ids] | None:
    """Each cell's number of ids and all ids, if every cell is a list of JSON integers
    >= 0 (the parsed lists, when they could not be cut out as text)."""
    if set(map(type, column)) != {list}:
        return None
    lists: list[list[object]] = column  # type: ignore[assignment]  # checked above
    counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    flat = list(chain.from_iterable(lists))
    raw = int_column(flat, 0, 2**63 - 1) if flat else np.empty(0, dtype=np.int64)
    return None if raw is None else (counts, raw)


def cells(values: list[dict[str, object]], key: str) -> list[object]:
    """Each row's value of ``key`` (None where absent): ``[v.get(key) for v in values]``
    in a C loop."""
    return list(map(dict.get, values, repeat(key)))


def int_column(column: list[object], low: int, high: int) -> npt.NDArray[np.int64] | None:
    """The column as int64 if every cell is a JSON integer in ``[low, high]``."""
    if set(map(type, column)) != {int}:
        return None
    try:
        arr = np.array(column, dtype=np.int64)
    except OverflowError:
        return None
    if arr.size and (int(arr.min()) < low or int(arr.max()) > high):
        return None
    return arr


def number_column(column: list[object], high: float) -> Numbers | None:
    """The column as floats if every cell is a finite number in ``[0, high]`` or absent
    (None)."""
    kinds = set(map(type, column))
    if not kinds <= {int, float, _NONE}:
        return None
    count = len(column)
    gaps = _NONE in kinds
    present = [v for v in column if v is not None] if gaps else column
    try:
        arr = np.fromiter(present, dtype=np.float64, count=len(present))
    except OverflowError:
        return None
    if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0 and arr.max() <= high):
        return None
    if not gaps:
        return Numbers(arr, np.ones(count, dtype=np.bool_))
    given = np.fromiter(map(is_not, column, repeat(None)), dtype=np.bool_, count=count)
    values = np.zeros(count, dtype=np.float64)
    values[given] = arr
    return Numbers(values, given)


def id_column(column: list[object]) -> list[str | None] | None:
    """The column as strings (None kept) if every cell is a non-empty string or an integer."""
    kinds = set(map(type, column))
    if not kinds <= {str, int, _NONE} or "" in column:
        return None
    if int not in kinds:
        return column  # type: ignore[return-value]  # str or None, checked above
    return [v if v is None or type(v) is str else str(v) for v in column]
