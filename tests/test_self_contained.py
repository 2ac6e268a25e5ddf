"""The project needs nothing outside its own tree: no file points at a data folder beside the
checkout, every documentation link stays inside the repository, and the data-reading tests pass
from a copy of the repository placed where no such folder exists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Spelled in pieces so that this file does not match its own check.
OUTSIDE = ("../" + "shared", "/work/" + "shared", "shared/" + "data")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".json", ".yaml", ".yml", ""}
SKIPPED_DIRS = {".git", "__pycache__", ".venv", "venv", ".mypy_cache", ".ruff_cache", "build"}
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _project_files() -> list[Path]:
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(
            d for d in dirs if d not in SKIPPED_DIRS and not d.endswith((".egg-info", "_cache"))
        )
        for name in sorted(files):
            path = Path(root, name)
            if path.suffix in TEXT_SUFFIXES or name == "run":
                found.append(path)
    return found


def test_no_project_file_points_at_data_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {needle}"
        for path in _project_files()
        for needle in OUTSIDE
        if needle in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert offenders == []


def test_every_documentation_link_stays_inside_the_repository() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    outside = [
        f"{page.relative_to(REPO)} -> {target}"
        for page in pages
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "mailto:"))
        and not (page.parent / target).resolve().is_relative_to(REPO)
    ]
    assert outside == []


def test_data_tests_pass_from_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    # A lone copy at tmp_path/lone/repo: nothing but the copy sits beside it.
    copy = tmp_path / "lone" / "repo"
    shutil.copytree(
        REPO,
        copy,
        ignore=shutil.ignore_patterns(*SKIPPED_DIRS, "*.egg-info", "*_cache", "*.pyc"),
    )
    assert not (copy.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = str(copy)  # the copy's packages, not the checkout's
    tests = [
        "tests/loadgen/test_datasets.py",
        "tests/replay/test_cli_datasets.py",
        "tests/replay/test_e2e_traces.py::test_cli_replays_a_slice_of_the_mooncake_trace",
        "tests/loadgen/test_datasets.py::"
        "test_the_sample_is_whole_early_conversations_by_the_documented_rule",
        "tests/docs/test_docs_links.py",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *tests],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout
    # The copy's own packages were the ones imported.
    where = subprocess.run(
        [sys.executable, "-c", "import loadgen; print(loadgen.dataset_path('azure-conv-2023'))"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(copy)
