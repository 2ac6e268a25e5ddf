"""Fast reading of Weka ``hash_ids`` lists straight from the JSON bytes (§1.4.5).

The WEKA archive holds 63 M content ids, almost all of them repeating the previous
call's list of the same conversation. Parsing every id into a Python int and then into an
array costs seconds; instead each ``"hash_ids": [...]`` list is cut out of the bytes,
compared byte for byte with an earlier list that starts the same way, and only its new
tail is parsed. The list is replaced by a placeholder string that the validating walk
resolves. Lists the scanner is not sure about make it give up, and the whole document is
read the ordinary way, so the result and every error message stay those of the plain
reader.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from ._intern import ContentInterner, LocalScope

__all__ = ("PLACEHOLDER", "ScannedIds", "scan_hash_ids")

PLACEHOLDER = "\x00hash_ids:"
"""Prefix of the placeholder string that replaces a scanned list."""

_KEY = b'"hash_ids"'
_NUMBER = rb"(?:0|[1-9][0-9]{0,17})"
_LIST = re.compile(rb"(?:" + _NUMBER + rb"(?:[ \t\r\n]*,[ \t\r\n]*" + _NUMBER + rb")*)?")
_TAIL = re.compile(rb"(?:[ \t\r\n]*,[ \t\r\n]*" + _NUMBER + rb")+")
_WS = b" \t\r\n"
_KEY_BYTES = 48

Ids = npt.NDArray[np.int64]


class ScannedIds:
    """The lists cut out of one document: interned ids and the raw count of each.

    Attributes:
        ids: per placeholder index, the interned ids of the whole raw list.
    """

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: list[Ids] = []


def scan_hash_ids(
    data: bytes, interner: ContentInterner, scope: LocalScope
) -> tuple[bytes, ScannedIds] | None:
    """Cut every ``hash_ids`` list out of ``data`` and intern it in ``scope``.

    Lists are interned in text order, exactly as interning each list's ids one by one
    would. Returns the document with each list replaced by a placeholder string, and the
    lists; or None (and the interner rolled back) when a list is not a plain list of
    non-negative integers, so the caller reads the document the ordinary way.
    """
    if b"\\u0000hash_ids" in data:  # a look-alike placeholder: read it the plain way
        return None
    start_id = interner.next_id
    out: list[bytes] = []
    scanned = ScannedIds()
    recent: dict[bytes, tuple[bytes, Ids]] = {}
    position = 0
    size = len(data)
    while True:
        key = data.find(_KEY, position)
        if key < 0:
            break
        cursor = key + len(_KEY)
        while cursor < size and data[cursor] in _WS:
            cursor += 1
        if cursor >= size or data[cursor] != 0x3A:  # ':' - a value, not a key
            out.append(data[position:cursor])
            position = cursor
            continue
        cursor += 1
        while cursor < size and data[cursor] in _WS:
            cursor += 1
        if cursor >= size or data[cursor] != 0x5B:  # '[' - not a list: leave it
            out.append(data[position:cursor])
            position = cursor
            continue
        close = data.find(b"]", cursor)
        if close < 0:
            interner.next_id = start_id
            return None
        segment = data[cursor + 1 : close].strip(_WS)
        ids = _ids_of(segment, recent, scope)
        if ids is None:
            interner.next_id = start_id
            return None
        out.append(data[position:cursor])
        out.append(b'"\\u0000hash_ids:%d"' % len(scanned.ids))
        scanned.ids.append(ids)
        position = close + 1
    out.append(data[position:])
    return b"".join(out), scanned


def _ids_of(
    segment: bytes, recent: dict[bytes, tuple[bytes, Ids]], scope: LocalScope
) -> Ids | None:
    head = segment[:_KEY_BYTES]
    earlier = recent.get(head)
    ids: Ids | None = None
    if earlier is not None:
        before, before_ids = earlier
        if segment == before:
            ids = before_ids
        else:
            shared = _common_prefix(segment, before)
            if shared == len(before) and before:
                cut, kept = shared, before_ids.size
            else:
                # The last comma both lists have at the same place ends the shared ids.
                cut = segment.rfind(b",", 0, shared)
                kept = segment.count(b",", 0, cut) + 1 if cut >= 0 else 0
            rest = segment[cut:] if kept else b""
            if kept and _TAIL.fullmatch(rest):
                tail = [int(x) for x in rest.split(b",")[1:]]
                new = scope.intern_ints(np.array(tail, dtype=np.int64))
                ids = np.concatenate((before_ids[:kept], new))
    if ids is None:
        if not _LIST.fullmatch(segment):
            return None
        raw = [int(x) for x in segment.split(b",")] if segment else []
        ids = scope.intern_ints(np.array(raw, dtype=np.int64))
    ids.flags.writeable = False
    recent[head] = (segment, ids)
    return ids


def _common_prefix(a: bytes, b: bytes) -> int:
    """Return the length of the longest common prefix of two byte strings."""
    size = min(len(a), len(b))
    if a[:size] == b[:size]:
        return size
    differ = np.frombuffer(a, np.uint8, size) != np.frombuffer(b, np.uint8, size)
    return int(differ.argmax())
