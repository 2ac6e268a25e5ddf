"""bench/read.py runs: a case with no timed round is left out instead of failing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "read.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_read", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_read"] = module
    spec.loader.exec_module(module)
    return module


def test_zero_rounds_leave_the_case_out(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    assert (
        bench.main(["--weka-repeat", "0", "--repeat", "1", "--only", "weka", "--only", "azure"])
        == 0
    )
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:-1]]
    assert rows == ["azure"]


def test_negative_rounds_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _bench().main(["--weka-repeat", "-1"])
    assert stop.value.code == 2
    assert "--weka-repeat: must be >= 0, got -1" in capsys.readouterr().err
