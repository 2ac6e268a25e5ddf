"""Field validation shared by the readers (REFERENCE-workloads §0).

Integers must be JSON integers (``true`` and ``12.0`` are rejected), numbers must be
finite. Problems are phrased once here so every reader words them alike.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ._exceptions import TraceFormatError

__all__ = (
    "Located",
    "iter_json_lines",
    "render",
)

_MAX_RENDER = 40


def render(value: object) -> str:
    """Render a JSON value for an error message, shortened to a readable length."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):  # pragma: no cover - values come from json
        text = repr(value)
    if len(text) > _MAX_RENDER:
        text = text[: _MAX_RENDER - 3] + "..."
    return text


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a reader builds its columns and requests.

    A column-wise reader holds every row at once; the collector would walk them again
    and again as requests are allocated (a quarter of the reading time, bench/read.py).
    Nothing a reader builds is cyclic, so nothing is left for the collector afterwards.

    On the way out, what the reading built (a workload: long-lived, no cycles) is moved
    to the oldest generation in one step, as ``replay.run`` does with a run's objects:
    re-enabling would otherwise have the next allocation walk all of it in a young
    collection, then again in a middle one (a request with its own rule, dependency and
    identity is five tracked objects; 3 ms of an agentic reading, bench/read.py). It stays
    collectable by the next full collection. Skipped when the process froze objects of
    its own (``gc.freeze``): unfreezing would release them too.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def parse_json(text: str) -> object:
    """Parse one JSON document; NaN and Infinity parse to floats (rejected per field).

    That is ``json.loads``'s own behaviour; its shared decoder is used as is, since a
    decoder built per call costs a fifth of parsing a Mooncake row.
    """
    return json.loads(text)


def iter_json_lines(stream: IO[bytes], file: str) -> Iterator[tuple[int, object]]:
    """Yield ``(line number, parsed value)`` for each non-empty line of a JSONL stream.

    A UTF-8 BOM on the first line and blank lines are skipped; bad UTF-8 or bad JSON raise
    :class:`TraceFormatError` at the line with field ``-``.
    """
    for number, raw in enumerate(stream, start=1):
        data = raw[3:] if number == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
        if not data.strip():
            continue
        yield number, decode_json(data.rstrip(b"\r\n"), file, number)


def decode_json(data: bytes, file: str, line: int) -> object:
    """Decode a UTF-8 JSON document, raising :class:`TraceFormatError` on failure."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(file, line, "-", f"invalid UTF-8 at byte {exc.start}") from None
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        problem = f"invalid JSON ({exc.msg} at column {exc.colno})"
        raise TraceFormatError(file, exc.lineno + line - 1, "-", problem) from None
    except RecursionError:
        raise TraceFormatError(file, line, "-", "invalid JSON (nested too deeply)") from None


class Located:
    """A JSON object with where it came from, and typed accessors that raise on bad input.

    Args:
        file: the file name for messages.
        line: the object's first line.
        value: the parsed value (must be an object, else the constructor raises).
        path: the JSON path prefix of the object's fields, e.g. ``requests[3].``.
    """

    __slots__ = ("file", "line", "obj", "path")

    def __init__(self, file: str, line: int, value: object, path: str = "") -> None:
        self.file = file
        self.line = line
        self.path = path
        if not isinstance(value, dict):
            field = path[:-1] if path else "-"
            raise TraceFormatError(file, line, field, f"expected a JSON object, got {_kind(value)}")
        self.obj: dict[str, Any] = value

    def error(self, key: str, problem: str) -> TraceFormatError:
        """Return the error for field ``key`` of this object (``""`` = the object itself)."""
        field = self.path + key if key else (self.path[:-1] or "-")
        return TraceFormatError(self.file, self.line, field, problem)

    def has(self, key: str) -> bool:
        """Whether ``key`` is present (``null`` counts as absent)."""
        return self.obj.get(key) is not None

    def alias(self, key: str, other: str) -> str | None:
        """Return which spelling of a field is present, rejecting both at once."""
        a, b = self.has(key), self.has(other)
        if a and b:
            raise self.error(key, f"{key} and {other} are both set")
        return key if a else other if b else None

    def integer(self, key: str, *, minimum: int | None = 0, default: int | None = None) -> int:
        """Return an integer field ``>= minimum``; ``default`` when absent (else required)."""
        value = self.obj.get(key)
        if value is None:
            if default is None:
                raise self.error(key, "required")
            return default
        return check_int(value, minimum, lambda p: self.error(key, p))

    def number(self, key: str, *, default: float | None = None) -> float:
        """Return a finite number field ``>= 0``; ``default`` when absent (else required)."""
        value = self.obj.get(key)
        if value is None:
            if default is None:
                raise self.error(key, "required")
            return default
        return check_number(value, lambda p: self.error(key, p))

    def optional_number(self, key: str) -> float | None:
        """Return a finite number field ``>= 0``, or None when absent."""
        value = self.obj.get(key)
        if value is None:
            return None
        return check_number(value, lambda p: self.error(key, p))

    def string(self, key: str, *, required: bool = True) -> str | None:
        """Return a non-empty string field; None when absent and not required."""
        value = self.obj.get(key)
        if value is None:
            if required:
                raise self.error(key, "required")
            return None
        if not isinstance(value, str) or not value:
            raise self.error(key, f"must be a non-empty string, got {render(value)}")
        return value

    def required_string(self, key: str) -> str:
        """Return a required non-empty string field."""
        value = self.string(key)
        if value is None:  # pragma: no cover - string() raised already
            raise self.error(key, "required")
        return value

    def id_string(self, key: str, *, required: bool = True) -> str | None:
        """Return a non-empty string, or an int made a string (session ids)."""
        value = self.obj.get(key)
        if value is None:
            if required:
                raise self.error(key, "required")
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str) or not value:
            raise self.error(key, f"must be a non-empty string or an integer, got {render(value)}")
        return value

    def required_id(self, key: str) -> str:
        """Return a required non-empty string (or an int made a string)."""
        value = self.id_string(key)
        if value is None:  # pragma: no cover - id_string raised already
            raise self.error(key, "required")
        return value

    def id_list(self, key: str, *, minimum: int | None = 0) -> npt.NDArray[np.int64]:
        """Return a required list of integers as an int64 array."""
        value = self.obj.get(key)
        if value is None:
            raise self.error(key, "required")
        return check_id_list(value, minimum, lambda p, i: self.error(_item(key, i), p))

    def sub(self, key: str, value: object) -> Located:
        """Return the nested object ``value`` found at field ``key``."""
        return Located(self.file, self.line, value, f"{self.path}{key}.")


def _item(key: str, index: int | None) -> str:
    return key if index is None else f"{key}[{index}]"


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def check_int(value: object, minimum: int | None, fail: Any) -> int:
    """Validate a JSON integer ``>= minimum``; ``fail(problem)`` builds the error."""
    if type(value) is not int:
        bound = "" if minimum is None else f" >= {minimum}"
        raise fail(f"must be an integer{bound}, got {render(value)}")
    if minimum is not None and value < minimum:
        raise fail(f"must be an integer >= {minimum}, got {value}")
    return value


def check_number(value: object, fail: Any) -> float:
    """Validate a finite JSON number ``>= 0``; ``fail(problem)`` builds the error."""
    if type(value) not in (int, float):
        raise fail(f"must be a number >= 0, got {render(value)}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise fail(f"must be a finite number, got {render(value)}")
    if number < 0:
        raise fail(f"must be a number >= 0, got {render(value)}")
    return number


_INT64_MAX = 2**63 - 1


def check_id_list(value: object, minimum: int | None, fail: Any) -> npt.NDArray[np.int64]:
    """Validate a JSON list of integers (``>= minimum``) and return it as int64.

    ``fail(problem, index)`` builds the error; ``index`` is None for the list itself.
    """
    if not isinstance(value, list):
        raise fail(f"must be a list of integers, got {render(value)}", None)
    if not value:
        return np.empty(0, dtype=np.int64)
    if set(map(type, value)) != {int}:
        for index, item in enumerate(value):
            if type(item) is not int:
                bound = "" if minimum is None else f" >= {minimum}"
                raise fail(f"must be an integer{bound}, got {render(item)}", index)
    try:
        arr = np.array(value, dtype=np.int64)
    except OverflowError:
        for index, item in enumerate(value):
            if not -_INT64_MAX - 1 <= item <= _INT64_MAX:
                raise fail(f"out of the 64-bit range, got {render(item)}", index) from None
        raise  # pragma: no cover - numpy overflowed on an in-range value
    if minimum is not None and arr.size and int(arr.min()) < minimum:
        index = int(np.argmax(arr < minimum))
        raise fail(f"must be an integer >= {minimum}, got {int(arr[index])}", index)
    return arr


def source_label(path: str | Path) -> str:
    """Return the default source label: the file name up to its first ``.``."""
    name = Path(path).name
    return name.split(".", 1)[0]


def fmt_number(value: float) -> str:
    """Format a number for a message: integers without a decimal point."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def fit_ids(
    raw: npt.NDArray[np.int64],
    input_length: int,
    block_size: int,
    where: Located,
    field: str = "hash_ids",
) -> tuple[npt.NDArray[np.int64], int, bool]:
    """Apply the length rule of §1.4.2 to a request's raw content ids.

    Args:
        raw: the ids as read.
        input_length: the prompt length ``P``.
        block_size: the trace block size ``T``.
        where: the record, for the error.
        field: the field named in the error.

    Returns:
        ``(kept ids, surplus count, whether a private tail id must be appended)``.
    """
    n = int(raw.size)
    full = input_length // block_size
    need = -(-input_length // block_size)
    if n >= need:
        return raw[:need], n - need, False
    if n == full:
        return raw, 0, True
    raise where.error(
        field,
        f"{n} ids cover at most {n * block_size} tokens at block_size {block_size}; "
        f"input_length {input_length} needs at least {full}",
    )
