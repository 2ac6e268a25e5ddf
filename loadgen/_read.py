"""``read_trace``: one entry point for every format, with ``format="auto"`` (§2)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from ._agentic import read_agentic
from ._compressed import open_binary, uncompressed_name
from ._csvformats import read_azure, read_burstgpt, read_vidur
from ._exceptions import TraceFormatError, WorkloadConfigError
from ._fields import decode_json
from ._mooncake import read_mooncake, read_mooncake_delta
from ._weka import read_weka
from ._workload import Workload

__all__ = ("FORMATS", "FormatChoice", "detect_format", "read_trace")

FORMATS: tuple[str, ...] = (
    "mooncake",
    "mooncake-delta",
    "agentic",
    "weka",
    "azure",
    "burstgpt",
    "vidur",
)
"""Every format name ``read_trace`` accepts (besides ``"auto"``)."""

_READERS: dict[str, Callable[..., Workload]] = {
    "mooncake": read_mooncake,
    "mooncake-delta": read_mooncake_delta,
    "agentic": read_agentic,
    "weka": read_weka,
    "azure": read_azure,
    "burstgpt": read_burstgpt,
    "vidur": read_vidur,
}

CSV_HEADERS: dict[str, tuple[str, ...]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": (
        "Timestamp",
        "Model",
        "Request tokens",
        "Response tokens",
        "Total tokens",
        "Log Type",
    ),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
}


@attrs.frozen
class FormatChoice:
    """What ``format="auto"`` picked and why.

    Attributes:
        name: the format name.
        reason: why, e.g. ``a .json file``.
    """

    name: str
    reason: str

    @property
    def note(self) -> str:
        """The log line ``format auto: <name> (<reason>)``."""
        return f"format auto: {self.name} ({self.reason})"


def detect_format(path: str | Path) -> FormatChoice:
    """Pick a trace's format from its path and content (§2).

    A directory or ``.tar*`` archive is ``weka``, so is ``.json``; a ``.jsonl`` whose first
    object has ``requests`` is ``weka``, else ``agentic`` if any row has ``wait_for``, else
    ``mooncake``; a ``.csv`` goes by its header. ``mooncake-delta`` is never detected.
    A file that fits two formats is refused, naming both: a ``.jsonl`` whose first object
    has ``requests`` and also ``hash_ids`` or ``output_length`` (weka and mooncake), or
    ``requests`` first and ``wait_for`` later (weka and agentic); a CSV header holding the
    columns of two formats.
    A trailing ``.xz`` or ``.gz`` is looked through: ``trace.jsonl.xz`` is a ``.jsonl`` file.

    Raises:
        TraceFormatError: a ``.jsonl`` line is not JSON, a CSV header is unknown, or the
            file fits two formats.
        WorkloadConfigError: the path has no recognised kind.
    """
    p = Path(path)
    name = uncompressed_name(p).lower()  # trace.jsonl.xz is a .jsonl file
    if p.is_dir():
        return FormatChoice("weka", "a directory")
    if ".tar" in name and (name.endswith(".tar") or ".tar." in name):
        return FormatChoice("weka", "a .tar archive")
    if name.endswith(".json"):
        return FormatChoice("weka", "a .json file")
    if name.endswith(".jsonl"):
        return _detect_jsonl(p)
    if name.endswith(".csv"):
        return _detect_csv(p)
    raise WorkloadConfigError(
        f"format: cannot tell the format of {str(path)!r} "
        "(expected a directory, .tar*, .json, .jsonl or .csv); name it with format="
    )


def _detect_jsonl(path: Path) -> FormatChoice:
    file = str(path)
    first: FormatChoice | None = None  # what the first object says
    seen_first = False
    with open_binary(path) as stream:
        for number, raw in enumerate(stream, start=1):
            data = raw[3:] if number == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
            if not data.strip():
                continue
            # Only the first object and rows that mention wait_for need parsing.
            if seen_first and b"wait_for" not in data:
                continue
            value = decode_json(data.rstrip(b"\r\n"), file, number)
            if isinstance(value, dict):
                if not seen_first and "requests" in value:
                    first = FormatChoice("weka", "first object has requests")
                    if "hash_ids" in value or "output_length" in value:
                        other = FormatChoice("mooncake", "first object has hash_ids")
                        raise _ambiguous(file, number, first, other)
                if "wait_for" in value:
                    agentic = FormatChoice("agentic", f"line {number} has wait_for")
                    if first is not None:
                        raise _ambiguous(file, number, first, agentic)
                    return agentic
            seen_first = True
    return first or FormatChoice("mooncake", "no requests and no wait_for")


def _ambiguous(file: str, line: int, a: FormatChoice, b: FormatChoice) -> TraceFormatError:
    problem = (
        f"fits two formats, {a.name} ({a.reason}) and {b.name} ({b.reason}); name one with format="
    )
    return TraceFormatError(file, line, "-", problem)


def _detect_csv(path: Path) -> FormatChoice:
    with open_binary(path) as stream:
        raw = stream.readline()
    text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
    try:
        header = next(csv.reader(io.StringIO(text)), [])
    except csv.Error as exc:
        raise TraceFormatError(str(path), 1, "-", f"invalid CSV ({exc})") from None
    columns = {c.strip() for c in header}
    fits = [
        FormatChoice(name, f"CSV header has {','.join(expected)}")
        for name, expected in CSV_HEADERS.items()
        if set(expected) <= columns
    ]
    if len(fits) > 1:
        raise _ambiguous(str(path), 1, fits[0], fits[1])
    if fits:
        return fits[0]
    listed = " | ".join(",".join(h) for h in CSV_HEADERS.values())
    raise TraceFormatError(str(path), 1, "-", f"unknown CSV header; expected one of: {listed}")


def read_trace(
    path: str | Path, *, format: str = "auto", source: str | None = None, **options: Any
) -> Workload:
    """Read a trace of any supported format into a :class:`Workload`.

    Args:
        path: the trace file, directory or archive.
        format: a name from :data:`FORMATS`, or ``"auto"`` to detect it; the choice and
            its reason are kept in :attr:`Workload.format_note`.
        source: the source label ``<src>`` (default: the file name up to its first dot).
        **options: passed to the format's reader (``block_size``, ``interner``, ...).

    Returns:
        The workload.

    Raises:
        TraceFormatError: a record breaks the format.
        WorkloadConfigError: an unknown format or option.
    """
    note: str | None = None
    if format == "auto":
        choice = detect_format(path)
        format, note = choice.name, choice.note
    reader = _READERS.get(format)
    if reader is None:
        known = ", ".join(("auto", *FORMATS))
        raise WorkloadConfigError(f"format: unknown format {format!r} (known: {known})")
    try:
        workload = reader(path, source=source, **options)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise WorkloadConfigError(f"options: {exc}") from None
        raise
    return attrs.evolve(workload, format_note=note) if note else workload
