"""The column-wise reading of a well-formed CSV trace (``bench/read.py`` measures it).

The row-by-row reader builds a cell dictionary, runs a regular expression per cell and
draws each request's private ids separately: about 12 µs a row. A plain file (no
quotes, no carriage returns but in CRLF endings, every cell bare) is read here instead:
split once, each column checked by one regular expression over the whole column and
converted with numpy, the Azure timestamps decoded from their fixed-width digits, the
private ids drawn as one range. Anything this path is not certain about makes it return
None, and the row-by-row reader, which names the first bad cell exactly, reads the
file. Both give the same workload; a differential test compares them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Sequence
from itertools import repeat

import numpy as np
import numpy.typing as npt

from ._columns import roots
from ._fields import collector_paused
from ._intern import ContentInterner
from ._limits import MAX_IDS, MAX_INSTANT_MS, MAX_TOKENS
from ._request import Identity, requests_from_columns
from ._workload import Tolerated, Workload

__all__ = ("read_csv_fast",)

_SECONDS = re.compile(
    r"(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\n)*"
    r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
)
_FIELD_LIMIT = 131_072  # the csv module's default field size limit
_EPOCH = dt.date(1970, 1, 1).toordinal()
_NO_IDENTITY = Identity()

_COLUMNS: dict[str, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
}


def _table(data: bytes) -> tuple[list[str], list[int], list[list[str]]] | None:
    """The header names, each data row's line number, and each column's cells; None if
    not plain."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if '"' in text or "\r" in text or "\x00" in text:
        return None  # quoting, old Mac line ends, NUL: the csv module's own rules apply
    lines = text.split("\n")
    if max(map(len, lines)) >= _FIELD_LIMIT:
        return None
    names = [name.strip() for name in lines[0].split(",")]
    width = len(names)
    if len(set(names)) != width:
        return None
    numbers = [n for n, line in enumerate(lines[1:], start=2) if line.strip()]
    body = [lines[n - 1] for n in numbers] if len(numbers) < len(lines) - 2 else lines[1:]
    if len(body) > len(numbers):
        body.pop()  # the empty line after the last line break
    if not body or set(map(str.count, body, repeat(","))) != {width - 1}:
        return None
    # Every row holds width cells: the cells of all rows, in order, split at once.
    cells = ",".join(body).split(",")
    return names, numbers, [cells[at::width] for at in range(width)]


def _ints(column: Sequence[str], low: int) -> npt.NDArray[np.int64] | None:
    """Bare decimal integers in ``[low, MAX_TOKENS]``, else None."""
    if not (_digits_only(column) and max(map(len, column)) <= 9):
        return None
    values = np.fromiter(map(int, column), dtype=np.int64, count=len(column))
    if int(values.min()) < low or int(values.max()) > MAX_TOKENS:
        return None
    return values


def _seconds(column: Sequence[str]) -> npt.NDArray[np.float64] | None:
    """Bare finite decimal numbers ``>= 0``, else None."""
    if _digits_only([cell.replace(".", "", 1) for cell in column]):
        pass  # digits with at most one point each (and some digit): what the pattern takes
    elif not _SECONDS.fullmatch("\n".join(column)):
        return None
    values = np.fromiter(map(float, column), dtype=np.float64, count=len(column))
    return values if bool(np.isfinite(values).all()) else None


def _digits_only(cells: Sequence[str]) -> bool:
    """Whether every cell is one or more ASCII digits (checked on the cells joined, in C,
    rather than by a pattern per character)."""
    joined = "".join(cells)
    return joined.isascii() and joined.isdigit() and min(map(len, cells)) > 0


def _azure_ticks(column: Sequence[str]) -> npt.NDArray[np.int64] | None:
    """``YYYY-MM-DD HH:MM:SS[.f…]`` of one width as 100 ns ticks since 1970, else None."""
    width = len(column[0])
    digits = width - 20
    if not (width == 19 or 1 <= digits <= 7):
        return None
    if set(map(len, column)) != {width}:
        return None
    try:
        raw = np.array(column, dtype=f"S{width}")
    except UnicodeEncodeError:
        return None
    cells = raw.view(np.uint8).reshape(len(column), width)
    layout = np.full(width, 0, dtype=np.uint8)  # 0: a digit, else that exact byte
    for at, mark in ((4, "-"), (7, "-"), (10, " "), (13, ":"), (16, ":"), (19, ".")):
        if at < width:
            layout[at] = ord(mark)
    fixed = layout != 0
    if not (cells[:, fixed] == layout[fixed]).all():
        return None
    numeric = cells[:, ~fixed]
    if not ((numeric >= ord("0")) & (numeric <= ord("9"))).all():
        return None
    values = cells.astype(np.int64) - ord("0")

    def field(start: int, stop: int) -> npt.NDArray[np.int64]:
        out = np.zeros(len(column), dtype=np.int64)
        for at in range(start, stop):
            out = out * 10 + values[:, at]
        return out

    hour, minute, second = field(11, 13), field(14, 16), field(17, 19)
    if int(hour.max()) > 23 or int(minute.max()) > 59 or int(second.max()) > 59:
        return None
    dates, inverse = np.unique(
        field(0, 4) * 10_000 + field(5, 7) * 100 + field(8, 10), return_inverse=True
    )
    try:
        days = np.array(
            [
                dt.date(d // 10_000, d // 100 % 100, d % 100).toordinal() - _EPOCH
                for d in dates.tolist()
            ],
            dtype=np.int64,
        )
    except ValueError:
        return None
    fraction = field(20, width) * 10 ** (7 - digits) if digits > 0 else 0
    seconds = ((days[inverse.reshape(-1)] * 24 + hour) * 60 + minute) * 60 + second
    ticks: npt.NDArray[np.int64] = seconds * 10_000_000 + fraction
    return ticks


def read_csv_fast(
    fmt: str,
    data: bytes,
    src: str,
    block: int,
    ids: ContentInterner,
    *,
    drop_failures: bool = False,
    models: Collection[str] | None = None,
    log_types: Collection[str] | None = None,
) -> Workload | None:
    """Read a plain CSV trace column-wise if every cell is certainly valid, else None.

    Args:
        fmt: ``azure``, ``burstgpt`` or ``vidur``.
        data: the file's bytes.
        src: the source label.
        block: tokens per private content id.
        ids: the run's interner; untouched when None is returned.
        drop_failures: drop rows with 0 output tokens (BurstGPT's failed requests).
        models: keep only these ``Model`` values (BurstGPT).
        log_types: keep only these ``Log Type`` values (BurstGPT).

    Returns:
        The workload the row-by-row reader returns for the file, or None.
    """
    with collector_paused():
        return _read(fmt, data, src, block, ids, drop_failures, models, log_types)


def _read(
    fmt: str,
    data: bytes,
    src: str,
    block: int,
    ids: ContentInterner,
    drop_failures: bool,
    models: Collection[str] | None,
    log_types: Collection[str] | None,
) -> Workload | None:
    table = _table(data)
    if table is None:
        return None
    names, lines, columns = table
    time_name, in_name, out_name = _COLUMNS[fmt]
    if fmt == "burstgpt" and not {"Model", "Log Type"} <= set(names):
        return None
    if not {time_name, in_name, out_name} <= set(names):
        return None
    prompts = _ints(columns[names.index(in_name)], 1)
    outputs = _ints(columns[names.index(out_name)], 0)
    when: npt.NDArray[np.int64] | npt.NDArray[np.float64] | None
    if fmt == "azure":
        when = _azure_ticks(columns[names.index(time_name)])
    else:
        when = _seconds(columns[names.index(time_name)])
    if prompts is None or outputs is None or when is None:
        return None
    keep = np.ones(len(lines), dtype=np.bool_)
    filtered = dropped = 0
    if models is not None:
        keep &= np.array([m.strip() in models for m in columns[names.index("Model")]])
    if log_types is not None:
        keep &= np.array([t.strip() in log_types for t in columns[names.index("Log Type")]])
    filtered = int((~keep).sum())
    if drop_failures:
        failed = keep & (outputs == 0)
        dropped = int(failed.sum())
        keep &= ~failed
    if not keep.any():
        return None
    if not keep.all():
        lines = [line for line, kept in zip(lines, keep.tolist(), strict=True) if kept]
        prompts, outputs, when = prompts[keep], outputs[keep], when[keep]
    scale = 10_000.0 if fmt == "azure" else 1e-3
    arrivals = (when - when.min()) / scale
    if float(arrivals.max()) > MAX_INSTANT_MS:
        return None
    sizes = -(-prompts // block)
    if int(sizes.max()) > MAX_IDS:
        return None
    ends = np.cumsum(sizes)
    content = np.arange(ids.next_id, ids.next_id + int(ends[-1]), dtype=np.int64)
    content.flags.writeable = False
    ids.next_id += int(ends[-1])
    starts = (ends - sizes).tolist()
    # Rows with the same arrival share one (frozen) rule; arrivals are >= 0, never -0.0.
    instants, inverse = np.unique(arrivals, return_inverse=True)
    made = roots(instants.tolist())
    requests = requests_from_columns(
        [f"{src}:{line}" for line in lines],
        prompts.tolist(),
        outputs.tolist(),
        block,
        [content[a:b] for a, b in zip(starts, ends.tolist(), strict=True)],
        [made[at] for at in inverse.reshape(-1).tolist()],
        [_NO_IDENTITY] * len(lines),
    )
    tolerated = Tolerated(dropped_failures=dropped, filtered_rows=filtered)
    return Workload(requests=requests, source=src, format=fmt, tolerated=tolerated)
