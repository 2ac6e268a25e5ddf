"""Outputs are written as a set and checked before the run: no run lost, no output destroyed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import replay._cli as cli
import replay._output as output_module
from replay import OUTPUT_FILES, OutputError, Timeline, write_outputs
from replay._cli import EXIT_OK, EXIT_USAGE, main
from tests.datasets import MOONCAKE, head_lines

from .test_output import _result

OLD = {name: f"previous run's {name}\n".encode() for name in OUTPUT_FILES}


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_text(head_lines(MOONCAKE, 10))
    return path


@pytest.fixture
def previous(tmp_path: Path) -> Path:
    """An output directory holding a previous run's three files."""
    out = tmp_path / "out"
    out.mkdir()
    for name, data in OLD.items():
        (out / name).write_bytes(data)
    return out


def _contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_failed_rename_puts_the_previous_runs_files_back(
    previous: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_replace = os.replace
    renames: list[str] = []

    def failing_replace(src: str, dst: str) -> None:
        if str(src).endswith(".tmp"):
            renames.append(str(dst))
            if len(renames) == 3:
                raise PermissionError(13, "Permission denied", str(src), None, str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(output_module.os, "replace", failing_replace)
    with pytest.raises(OutputError) as info:
        write_outputs(_result(), previous)
    # The message names the user's file, not the temporary name the error carried.
    assert str(info.value) == f"{previous / 'config.json'}: cannot write report: Permission denied"
    assert _contents(previous) == OLD  # both files already renamed are back, nothing else


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failure_while_writing_leaves_the_previous_files_untouched(
    previous: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    calls: list[bytes] = []

    def failing_write(handle: object, data: bytes) -> None:
        calls.append(data)
        if len(calls) == 3:
            raise failure
        handle.write(data)  # type: ignore[attr-defined]

    monkeypatch.setattr(output_module, "_write", failing_write)
    with pytest.raises(type(failure)):
        write_outputs(_result(), previous)
    assert _contents(previous) == OLD


def test_a_successful_write_replaces_all_three_and_leaves_nothing_else(previous: Path) -> None:
    write_outputs(_result(), previous)
    got = _contents(previous)
    assert sorted(got) == sorted(OUTPUT_FILES)
    assert all(got[name] != OLD[name] for name in OUTPUT_FILES)


def test_a_timeline_that_cannot_be_written_leaves_an_existing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "t.json"
    target.write_text("old timeline")

    def broken(self: Timeline, out: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Timeline, "_dump", broken)
    with pytest.raises(OutputError) as info:
        Timeline(events=()).write(target)
    assert str(info.value) == f"{target}: cannot write timeline: No space left on device"
    assert _contents(tmp_path) == {"t.json": b"old timeline"}


def test_timeline_and_report_files_have_the_same_mode(small_trace: Path, tmp_path: Path) -> None:
    out, timeline = tmp_path / "out", tmp_path / "deeper" / "t.json"  # its directory is created
    argv = ["replay", str(small_trace), "--quiet", "--output-dir", str(out)]
    assert main([*argv, "--timeline", str(timeline)]) == EXIT_OK
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (timeline, *out.iterdir())}
    assert modes == dict.fromkeys(["t.json", *OUTPUT_FILES], 0o666 & ~umask)


def test_a_timeline_write_failure_keeps_the_printed_and_written_report(
    small_trace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def broken(self: Timeline, out: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Timeline, "_dump", broken)
    out, timeline = tmp_path / "out", tmp_path / "t.json"
    argv = ["replay", str(small_trace), "--output-dir", str(out), "--timeline", str(timeline)]
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "Replay Result" in captured.out
    assert captured.err == (
        f"simclock replay: error: {timeline}: cannot write timeline: No space left on device\n"
    )
    assert sorted(os.listdir(out)) == sorted(OUTPUT_FILES)
    assert not timeline.exists()


def _refused_before_the_run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the replay ran")

    monkeypatch.setattr(cli, "_read_workload", no_run)
    monkeypatch.setattr(cli, "_execute", no_run)
    assert main(argv) == EXIT_USAGE
    return capsys.readouterr().err


def test_a_directory_where_a_report_file_goes_is_refused_before_the_run(
    previous: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (previous / "summary.json").unlink()
    (previous / "summary.json").mkdir()
    err = _refused_before_the_run(["replay", "--output-dir", str(previous)], monkeypatch, capsys)
    assert err == (
        f"simclock replay: error: {previous / 'summary.json'}: is a directory, expected a file\n"
    )


def test_an_output_dir_below_a_file_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    wanted = tmp_path / "file" / "out"
    err = _refused_before_the_run(["replay", "--output-dir", str(wanted)], monkeypatch, capsys)
    assert err == (
        f"simclock replay: error: {wanted}: cannot create --output-dir: "
        f"{tmp_path / 'file'} is not a directory\n"
    )


def test_a_timeline_that_is_a_directory_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused_before_the_run(["replay", "--timeline", str(tmp_path)], monkeypatch, capsys)
    assert err == (
        f"simclock replay: error: {tmp_path}: --timeline is a directory, expected a file\n"
    )


def test_a_timeline_below_a_file_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    wanted = tmp_path / "file" / "t.json"
    err = _refused_before_the_run(["replay", "--timeline", str(wanted)], monkeypatch, capsys)
    assert err == (
        f"simclock replay: error: {wanted}: cannot create the --timeline directory: "
        f"{tmp_path / 'file'} is not a directory\n"
    )


def test_a_timeline_over_a_report_file_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["replay", "--output-dir", str(out), "--timeline", str(out / "summary.json")]
    err = _refused_before_the_run(argv, monkeypatch, capsys)
    assert err == (
        f"simclock replay: error: {out / 'summary.json'}: --timeline would overwrite a "
        "report file\n"
    )
    assert not out.exists()
