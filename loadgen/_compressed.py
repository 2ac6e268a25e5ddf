"""Reading xz- and gzip-compressed trace files transparently.

Every single-file reader opens its trace through :func:`open_binary`: a file whose first bytes
are the xz or gzip magic number is decompressed as it is read, in bounded memory (one buffer at a
time), whatever its name. A damaged stream is reported as a :class:`TraceFormatError` at the line
reached, like any other broken record. Format detection looks through a ``.xz`` or ``.gz``
suffix (:func:`uncompressed_name`): ``trace.jsonl.xz`` is detected as a ``.jsonl`` file.
"""

from __future__ import annotations

import gzip
import io
import lzma
import zlib
from pathlib import Path
from typing import IO

from ._exceptions import TraceFormatError

__all__ = ("COMPRESSED_SUFFIXES", "open_binary", "uncompressed_name")

COMPRESSED_SUFFIXES: tuple[str, ...] = (".xz", ".gz")
"""Name suffixes that :func:`uncompressed_name` looks through."""

_XZ_MAGIC = b"\xfd7zXZ\x00"
_GZIP_MAGIC = b"\x1f\x8b"


class _Decompressed(io.RawIOBase):
    """A raw stream over a decompressor that reports damage as a ``TraceFormatError``."""

    def __init__(self, inner: io.BufferedIOBase, stream: IO[bytes], file: str, kind: str) -> None:
        super().__init__()
        self._inner = inner
        self._stream = stream
        self._file = file
        self._kind = kind
        self._lines = 1  # the 1-based line the next byte belongs to

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        try:
            data = self._inner.read(len(buffer))
        except (lzma.LZMAError, gzip.BadGzipFile, zlib.error, EOFError) as exc:
            problem = f"damaged {self._kind} data ({exc or type(exc).__name__})"
            raise TraceFormatError(self._file, self._lines, "-", problem) from None
        size = len(data)
        buffer[:size] = data
        self._lines += data.count(b"\n")
        return size

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._stream.close()
            super().close()


def open_binary(path: str | Path) -> io.BufferedReader:
    """Open a trace file for reading bytes, decompressing xz or gzip content transparently.

    Args:
        path: the trace file.

    Returns:
        A buffered binary stream of the (decompressed) content; close it when done.

    Raises:
        OSError: the file cannot be opened.
    """
    stream = open(path, "rb")  # noqa: SIM115 - handed to the caller, who closes it
    try:
        head = stream.peek(len(_XZ_MAGIC))[: len(_XZ_MAGIC)]
        inner: io.BufferedIOBase
        if head.startswith(_XZ_MAGIC):
            inner, kind = lzma.LZMAFile(stream), "xz"  # noqa: SIM115 - closed with the reader
        elif head.startswith(_GZIP_MAGIC):
            inner, kind = gzip.GzipFile(fileobj=stream, mode="rb"), "gzip"
        else:
            return stream
    except BaseException:
        stream.close()
        raise
    return io.BufferedReader(_Decompressed(inner, stream, str(path), kind))


def uncompressed_name(path: str | Path) -> str:
    """Return a path's file name without a trailing ``.xz`` or ``.gz`` (kept for ``.tar.*``).

    ``trace.jsonl.xz`` gives ``trace.jsonl``; ``corpus.tar.xz`` stays ``corpus.tar.xz``, an
    archive that :func:`loadgen.read_weka` opens itself.
    """
    name = Path(path).name
    lower = name.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if lower.endswith(suffix) and not lower.removesuffix(suffix).endswith(".tar"):
            return name[: -len(suffix)]
    return name
