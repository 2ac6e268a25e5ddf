"""Readers for CSV traces: ``azure``, ``burstgpt`` and ``vidur`` (REFERENCE-workloads §2.5).

Each data row is one standalone request; content ids are all private (these traces
carry no prefix information). Arrivals are shifted so the earliest is 0.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import re
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Literal

import attrs

from ._compressed import open_binary
from ._csvfast import read_csv_fast
from ._exceptions import TraceFormatError, WorkloadConfigError
from ._fields import source_label
from ._intern import ContentInterner
from ._limits import (
    MAX_IDS,
    MAX_INSTANT_MS,
    MAX_TOKENS,
    ids_problem,
    instant_problem,
    tokens_problem,
)
from ._mooncake import check_block_size
from ._request import ArrivalRule, Request
from ._workload import Tolerated, Workload, check_source

__all__ = ("read_azure", "read_burstgpt", "read_vidur")

_INT = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_AZURE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
)
_EPOCH = dt.date(1970, 1, 1).toordinal()


@attrs.define(eq=False)
class _Row:
    """A CSV data row: its first line number and its cells by column name."""

    file: str
    line: int
    cells: dict[str, str]

    def error(self, column: str, problem: str) -> TraceFormatError:
        return TraceFormatError(self.file, self.line, column, problem)

    def integer(self, column: str, minimum: int) -> int:
        text = self.cells[column].strip()
        if not _INT.fullmatch(text):
            raise self.error(column, f"must be an integer >= {minimum}, got {text!r}")
        digits = text.lstrip("+-").lstrip("0") or "0"
        if len(digits) > 30:  # past any limit; int() of a huge text is slow, or refused
            if text.startswith("-"):
                size = f"a negative {len(digits)}-digit number"
                raise self.error(column, f"must be an integer >= {minimum}, got {size}")
            raise self.error(column, tokens_problem(10 ** (len(digits) - 1)))
        value = int(digits) * (-1 if text.startswith("-") else 1)
        if value < minimum:
            raise self.error(column, f"must be an integer >= {minimum}, got {text!r}")
        if value > MAX_TOKENS:
            raise self.error(column, tokens_problem(value))
        return value

    def seconds(self, column: str) -> float:
        text = self.cells[column].strip()
        if not _NUMBER.fullmatch(text):
            raise self.error(column, f"must be a number >= 0, got {text!r}")
        value = float(text)
        if not math.isfinite(value) or value < 0:
            raise self.error(column, f"must be a finite number >= 0, got {text!r}")
        return value


def _rows(path: str | Path, header: tuple[str, ...]) -> Iterator[_Row]:
    """Yield the data rows of a CSV file whose header holds every column of ``header``."""
    file = str(path)
    with open_binary(path) as binary:
        reader = csv.reader(_decoded(binary, file))
        try:
            names = next(reader)
        except StopIteration:
            raise TraceFormatError(file, 1, "-", "empty file; expected a CSV header") from None
        except csv.Error as exc:
            raise TraceFormatError(file, 1, "-", f"invalid CSV ({exc})") from None
        names = [n.strip() for n in names]
        if names and names[0].startswith("\ufeff"):
            names[0] = names[0][1:]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise TraceFormatError(file, 1, "-", f"duplicate column {name!r} in the header")
        missing = [c for c in header if c not in names]
        if missing:
            raise TraceFormatError(
                file, 1, "-", f"header lacks {', '.join(missing)}; expected {','.join(header)}"
            )
        position = {c: names.index(c) for c in header}
        last = reader.line_num
        rows = 0
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                if not rows:
                    problem = "no requests (a header and no rows)"
                    raise TraceFormatError(file, 1, "-", problem) from None
                return
            except csv.Error as exc:
                raise TraceFormatError(file, last + 1, "-", f"invalid CSV ({exc})") from None
            line = last + 1
            last = reader.line_num
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if len(cells) != len(names):
                raise TraceFormatError(
                    file, line, "-", f"expected {len(names)} columns, got {len(cells)}"
                )
            rows += 1
            yield _Row(file, line, {c: cells[i] for c, i in position.items()})


def _decoded(binary: io.BufferedReader, file: str) -> Iterator[str]:
    for number, raw in enumerate(binary, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = f"invalid UTF-8 at byte {exc.start}"
            raise TraceFormatError(file, number, "-", problem) from None


def _build(
    fmt: str,
    file: str,
    src: str,
    block: int,
    ids: ContentInterner,
    rows: list[tuple[int, int | float, int, int]],
    scale: float,
    tolerated: Tolerated,
) -> Workload:
    origin = min((r[1] for r in rows), default=0)
    column = "TIMESTAMP" if fmt == "azure" else "Timestamp" if fmt == "burstgpt" else "arrived_at"
    prompt_column = {"azure": "ContextTokens", "burstgpt": "Request tokens"}.get(
        fmt, "num_prefill_tokens"
    )
    for line, _, prompt, _ in rows:
        if -(-prompt // block) > MAX_IDS:
            raise TraceFormatError(file, line, prompt_column, ids_problem(prompt, block))
    for line, when, _, _ in rows:
        if (when - origin) / scale > MAX_INSTANT_MS:
            what = " after the trace's first arrival"
            raise TraceFormatError(
                file, line, column, instant_problem((when - origin) / scale, what)
            )
    requests = tuple(
        Request(
            id=f"{src}:{line}",
            input_length=prompt,
            output_length=output,
            block_size=block,
            hash_ids=ids.privates(-(-prompt // block)),
            arrival=ArrivalRule(not_before_ms=(when - origin) / scale),
        )
        for line, when, prompt, output in rows
    )
    return Workload(requests=requests, source=src, format=fmt, tolerated=tolerated)


def _bytes(path: str | Path) -> bytes:
    with open_binary(path) as stream:
        return stream.read()


def _setup(
    path: str | Path, source: str | None, block_size: int, interner: ContentInterner | None
) -> tuple[str, int, ContentInterner]:
    src = check_source(source if source is not None else source_label(path))
    return (
        src,
        check_block_size(block_size),
        interner if interner is not None else ContentInterner(),
    )


def read_azure(
    path: str | Path,
    *,
    source: str | None = None,
    block_size: int = 64,
    interner: ContentInterner | None = None,
) -> Workload:
    """Read an Azure LLM inference trace (2023 CSV, §2.5).

    ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS[.f…]``, no zone) is parsed to integer 100 ns
    ticks; arrival = ``(ticks - min) / 10**4`` ms. ``ContextTokens`` is the prompt,
    ``GeneratedTokens`` the output.

    Args:
        path: the CSV file.
        source: the source label (default: the file name up to its first dot).
        block_size: tokens per (private) content id.
        interner: the run's content interner.

    Raises:
        TraceFormatError: a bad header or row.
        WorkloadConfigError: a bad source label or block size.
    """
    src, block, ids = _setup(path, source, block_size, interner)
    fast = read_csv_fast("azure", _bytes(path), src, block, ids)
    if fast is not None:
        return fast
    rows: list[tuple[int, int | float, int, int]] = []
    for row in _rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        ticks = _azure_ticks(row)
        prompt = row.integer("ContextTokens", 1)
        output = row.integer("GeneratedTokens", 0)
        rows.append((row.line, ticks, prompt, output))
    return _build("azure", str(path), src, block, ids, rows, 10_000.0, Tolerated())


def _azure_ticks(row: _Row) -> int:
    text = row.cells["TIMESTAMP"].strip()
    match = _AZURE_TIME.fullmatch(text)
    problem = f"must be YYYY-MM-DD HH:MM:SS[.fraction], got {text!r}"
    if match is None:
        raise row.error("TIMESTAMP", problem)
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    try:
        days = dt.date(year, month, day).toordinal() - _EPOCH
    except ValueError:
        raise row.error("TIMESTAMP", problem) from None
    if hour > 23 or minute > 59 or second > 59:
        raise row.error("TIMESTAMP", problem)
    fraction = (match.group(7) or "")[:7].ljust(7, "0")
    seconds = ((days * 24 + hour) * 60 + minute) * 60 + second
    return seconds * 10_000_000 + int(fraction)


def read_burstgpt(
    path: str | Path,
    *,
    source: str | None = None,
    block_size: int = 64,
    failures: Literal["drop", "prefill_only"] = "drop",
    models: Collection[str] | None = None,
    log_types: Collection[str] | None = None,
    interner: ContentInterner | None = None,
) -> Workload:
    """Read a BurstGPT trace (CSV, §2.5).

    ``Timestamp`` is seconds from the trace start; ``Request tokens`` the prompt,
    ``Response tokens`` the output. A response of 0 tokens marks a failed request:
    dropped and counted by default, or kept as prefill-only with ``failures="prefill_only"``.

    Args:
        path: the CSV file.
        source: the source label.
        block_size: tokens per (private) content id.
        failures: ``"drop"`` or ``"prefill_only"``.
        models: keep only rows whose ``Model`` is listed (None keeps all).
        log_types: keep only rows whose ``Log Type`` is listed (None keeps all).
        interner: the run's content interner.

    Raises:
        TraceFormatError: a bad header or row.
        WorkloadConfigError: an unknown ``failures`` value.
    """
    if failures not in ("drop", "prefill_only"):
        raise WorkloadConfigError(f"failures: must be 'drop' or 'prefill_only', got {failures!r}")
    src, block, ids = _setup(path, source, block_size, interner)
    fast = read_csv_fast(
        "burstgpt",
        _bytes(path),
        src,
        block,
        ids,
        drop_failures=failures == "drop",
        models=models,
        log_types=log_types,
    )
    if fast is not None:
        return fast
    header = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
    rows: list[tuple[int, int | float, int, int]] = []
    dropped = filtered = 0
    for row in _rows(path, header):
        when = row.seconds("Timestamp")
        prompt = row.integer("Request tokens", 1)
        output = row.integer("Response tokens", 0)
        if (models is not None and row.cells["Model"].strip() not in models) or (
            log_types is not None and row.cells["Log Type"].strip() not in log_types
        ):
            filtered += 1
            continue
        if output == 0 and failures == "drop":
            dropped += 1
            continue
        rows.append((row.line, when, prompt, output))
    tolerated = Tolerated(dropped_failures=dropped, filtered_rows=filtered)
    if not rows:
        why = f"{dropped} failed (0 response tokens) and dropped, {filtered} filtered out"
        raise TraceFormatError(str(path), 1, "-", f"no requests left: {why}")
    return _build("burstgpt", str(path), src, block, ids, rows, 1e-3, tolerated)


def read_vidur(
    path: str | Path,
    *,
    source: str | None = None,
    block_size: int = 64,
    interner: ContentInterner | None = None,
) -> Workload:
    """Read a Vidur request trace (CSV, §2.5).

    ``arrived_at`` is seconds; ``num_prefill_tokens`` the prompt, ``num_decode_tokens``
    the output. (Vidur's time scale factor is a speedup here, §4.1.)

    Args:
        path: the CSV file.
        source: the source label.
        block_size: tokens per (private) content id.
        interner: the run's content interner.

    Raises:
        TraceFormatError: a bad header or row.
        WorkloadConfigError: a bad source label or block size.
    """
    src, block, ids = _setup(path, source, block_size, interner)
    fast = read_csv_fast("vidur", _bytes(path), src, block, ids)
    if fast is not None:
        return fast
    rows: list[tuple[int, int | float, int, int]] = []
    for row in _rows(path, ("arrived_at", "num_prefill_tokens", "num_decode_tokens")):
        when = row.seconds("arrived_at")
        prompt = row.integer("num_prefill_tokens", 1)
        output = row.integer("num_decode_tokens", 0)
        rows.append((row.line, when, prompt, output))
    return _build("vidur", str(path), src, block, ids, rows, 1e-3, Tolerated())
