"""Output directories made for a run's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay import OutputError
from replay._files import make_directories


def test_a_directory_made_meanwhile_by_another_process_is_taken_as_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = Path.mkdir

    def racing_mkdir(self: Path, *args: object, **kwargs: object) -> None:
        real_mkdir(self)  # the other process wins the race ...
        raise FileExistsError(17, "File exists", str(self))  # ... and this one sees it

    monkeypatch.setattr(Path, "mkdir", racing_mkdir)
    target = tmp_path / "out" / "runs" / "r000"
    assert make_directories(target) == []  # none of them made by this call
    assert target.is_dir()
    monkeypatch.setattr(Path, "mkdir", real_mkdir)
    (tmp_path / "file").write_text("x")

    def racing_file(self: Path, *args: object, **kwargs: object) -> None:
        raise FileExistsError(17, "File exists", str(self))

    monkeypatch.setattr(Path, "mkdir", racing_file)
    with pytest.raises(OutputError, match="cannot create output directory"):
        make_directories(tmp_path / "file" / "sub")
