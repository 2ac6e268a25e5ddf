"""Writing output files as a set, and checking where they go before a run starts.

Rules (the command line and :func:`replay.write_outputs` follow them):

1. Every file is created with mode ``0o666`` less the process umask (``0644`` under the usual
   umask ``022``), the same for the report files and the timeline.
2. A set of files is first written to temporary names beside their final names; only when all
   of them are complete are they renamed over the final names. The file a final name held
   before is kept under a hard link (or a copy) until every rename has succeeded, so a failure
   at any step, including an interrupt, puts the previous files back, byte for byte, and
   leaves no temporary file behind.
3. Errors name the user's path (the final file or directory), never a temporary name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from simclock import SimulationError

__all__ = (
    "FILE_MODE",
    "OutputError",
    "Writer",
    "check_destinations",
    "make_directories",
    "remove_directories",
    "temp_name",
    "write_file_set",
)

FILE_MODE = 0o666
"""The mode every output file is created with, before the umask applies."""

Writer = Callable[[BinaryIO], None]
"""Writes one file's content to an open binary stream."""


class OutputError(SimulationError, OSError):
    """The report could not be written (the output location is unusable)."""


def temp_name(final: Path, kind: str) -> Path:
    """A hidden name beside ``final`` for a file on its way there (``kind``: tmp, old)."""
    # The random part only keeps names unique between concurrent writers.
    return final.parent / f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.{kind}"


def _keep(final: Path) -> Path | None:
    """Keep the current content of ``final`` under a backup name; ``None`` if it has none."""
    if not final.exists():
        return None
    backup = temp_name(final, "old")
    try:
        os.link(final, backup)
    except OSError:
        shutil.copy2(final, backup)  # a filesystem without hard links
    return backup


def write_file_set(files: Sequence[tuple[Path, Writer | Path]], *, what: str) -> None:
    """Write every file of ``files``, all or none (rule 2 of the module docstring).

    Args:
        files: ``(final path, writer)`` pairs; each final path's directory must exist. A
            writer may instead be the path of a complete temporary file beside the final
            name (a file written while the run went on): it is renamed with the others, or
            removed with them on failure.
        what: what the files are, for messages (``report``, ``timeline``).

    Raises:
        OutputError: a file cannot be written or renamed; the message names its final path.
    """
    temps: list[tuple[Path, Path]] = []
    backups: list[tuple[Path, Path | None]] = []
    current = files[0][0] if files else Path()
    try:
        for final, writer in files:
            current = final
            if isinstance(writer, Path):
                temps.append((writer, final))
                continue
            temp = temp_name(final, "tmp")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            temps.append((temp, final))
            with os.fdopen(fd, "wb") as handle:
                writer(handle)
        for temp, final in temps:
            current = final
            backups.append((final, _keep(final)))
            os.replace(temp, final)
    except BaseException as exc:
        _roll_back(temps, backups)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(f"{current}: cannot write {what}: {exc.strerror or exc}") from exc
        raise
    for _, backup in backups:
        if backup is not None:
            with contextlib.suppress(OSError):
                backup.unlink()


def _roll_back(temps: list[tuple[Path, Path]], backups: list[tuple[Path, Path | None]]) -> None:
    """Put back what the final names held, and remove every temporary file."""
    for final, backup in reversed(backups):
        with contextlib.suppress(OSError):
            if backup is None:
                final.unlink(missing_ok=True)
            else:
                os.replace(backup, final)
                # Renaming a hard link over its twin does nothing: the name still exists.
                backup.unlink(missing_ok=True)
    for temp, _ in temps:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")  # pragma: no cover - a relative path's parents end at "."


def _check_creatable_directory(directory: Path, shown: str, what: str, *, given: bool) -> None:
    """``directory`` is a writable directory, or can be created under a writable one.

    ``given``: the user named ``directory`` itself (rather than a file inside it).
    """
    existing = _nearest_existing(directory)
    if not existing.is_dir():
        if given and existing == directory:
            raise OutputError(f"{shown}: {what} is not a directory")
        raise OutputError(f"{shown}: cannot create {what}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{shown}: cannot write {what}: {existing} is not writable")


def check_destinations(
    *,
    output_dir: str | os.PathLike[str] | None,
    output_files: Sequence[str],
    timeline: str | os.PathLike[str] | None,
) -> None:
    """Check, before a run, that its outputs can be written where they are asked to go.

    The output directory must be a writable directory or creatable under one, with no
    directory where one of ``output_files`` goes; the timeline must be a file path (not a
    directory, not one of the report files) whose directory exists or can be created.

    Raises:
        OutputError: a location is unusable; the message names the path as given.
    """
    if output_dir is not None:
        directory = Path(output_dir)
        _check_creatable_directory(directory, os.fspath(output_dir), "--output-dir", given=True)
        for name in output_files:
            if (directory / name).is_dir():
                raise OutputError(f"{directory / name}: is a directory, expected a file")
    if timeline is not None:
        target = Path(timeline)
        shown = os.fspath(timeline)
        if target.is_dir():
            raise OutputError(f"{shown}: --timeline is a directory, expected a file")
        if output_dir is not None and target.resolve() in {
            (Path(output_dir) / name).resolve() for name in output_files
        }:
            raise OutputError(f"{shown}: --timeline would overwrite a report file")
        _check_creatable_directory(target.parent, shown, "the --timeline directory", given=False)


def make_directories(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; return those created, outermost first.

    Raises:
        OutputError: a directory cannot be created (the message names ``directory``).
    """
    created: list[Path] = []
    try:
        for parent in reversed((directory, *directory.parents)):
            if not parent.exists():
                try:
                    parent.mkdir()
                except FileExistsError:
                    # made meanwhile by another process (a sweep's workers share runs/)
                    if not parent.is_dir():
                        raise
                    continue
                created.append(parent)
        if not directory.is_dir():
            raise OutputError(f"{directory}: not a directory")
    except OSError as exc:
        remove_directories(created)
        if isinstance(exc, OutputError):
            raise
        raise OutputError(f"{directory}: cannot create output directory: {exc.strerror}") from exc
    return created


def remove_directories(created: list[Path]) -> None:
    """Remove the directories :func:`make_directories` created, innermost first, if empty."""
    for path in reversed(created):
        with contextlib.suppress(OSError):
            path.rmdir()
