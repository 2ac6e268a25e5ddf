"""The command line answers --version and --help, also as ``python -m simclock``."""

from __future__ import annotations

import subprocess
import sys

import simclock


def test_version_flag_prints_the_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "simclock", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"simclock {simclock.__version__}"


def test_help_flag_describes_the_tool() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "simclock", "--help"], capture_output=True, text=True, check=True
    )
    assert "virtual clock" in out.stdout
