"""Ctrl-C and SIGTERM: exit 130 / 143, one line naming the virtual time reached, no traceback
or asyncio warning, and the files of a previous run left exactly as they were."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import replay._cli as cli
import simclock.__main__ as entry
from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import PolicyContext, RequestStream
from replay import OUTPUT_FILES, Aggregated, ReplayInterrupted, run
from replay._cli import EXIT_INTERRUPTED, main

TOPOLOGY = Aggregated(
    workers=1,
    engine=EngineConfig(num_blocks=64, block_size=64),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)


class InterruptedAt:
    """Places requests on engine 0 and is interrupted (as by Ctrl-C) at ``at_ms``."""

    name = "interrupted"

    def __init__(self, at_ms: float) -> None:
        self.at_ms = at_ms

    async def run(self, stream: RequestStream, ctx: PolicyContext) -> None:
        async def interrupt() -> None:
            await ctx.sleep_ms(self.at_ms)
            raise KeyboardInterrupt

        ctx.spawn(interrupt(), name="ctrl-c")
        async for request in stream:
            await ctx.dispatch(request, 0)


def _workload() -> Workload:
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=64,
            output_length=50,
            block_size=64,
            hash_ids=[i],
            arrival=ArrivalRule(not_before_ms=100.0 * i),
        )
        for i in range(20)
    )
    return Workload(requests=requests, source="t", format="synthetic")


def test_an_interrupted_run_raises_replay_interrupted_with_the_virtual_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ReplayInterrupted) as info:
        run(_workload(), topology=TOPOLOGY, policy=InterruptedAt(1234.5))
    assert isinstance(info.value, KeyboardInterrupt)
    assert info.value.virtual_time_ns == 1_234_500_000
    gc.collect()
    captured = capsys.readouterr()
    assert captured.err == captured.out == ""  # no "Task was destroyed", nothing at all


def test_the_command_line_says_where_it_was_interrupted_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in OUTPUT_FILES:
        (out / name).write_text(f"previous {name}")
    real_execute = cli._execute

    def interrupted_execute(workload: Workload, *args: object, **options: object) -> object:
        options["policy"] = InterruptedAt(1234.5)
        options["topology"] = TOPOLOGY
        return real_execute(_workload(), *args, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(cli, "_execute", interrupted_execute)
    assert main(["replay", "--output-dir", str(out)]) == EXIT_INTERRUPTED
    captured = capsys.readouterr()
    assert captured.err == "simclock: interrupted at virtual time 1.234 s\n"
    assert captured.out == ""
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        name: f"previous {name}" for name in OUTPUT_FILES
    }


@pytest.mark.parametrize(
    ("signum", "status", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_signal_during_a_replay_is_one_quiet_line(
    tmp_path: Path, signum: int, status: int, word: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in OUTPUT_FILES:
        (out / name).write_text(f"previous {name}")
    argv = ["replay", "mooncake-conversation", "--progress", "plain", "--output-dir", str(out)]
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # show any warning, do not hide it
    process = subprocess.Popen(
        [sys.executable, "-m", "simclock", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stderr is not None
    first = process.stderr.readline()  # the progress line printed when the replay starts
    assert first.startswith("virtual "), first
    process.send_signal(signum)
    stdout, rest = process.communicate(timeout=300)
    lines = [first.rstrip("\n"), *rest.splitlines()]
    assert process.returncode == status, lines
    assert lines[-1].startswith(f"simclock: {word} at virtual time "), lines
    assert lines[-1].endswith(" s")
    assert all(line.startswith("virtual ") for line in lines[:-1]), lines  # progress only
    assert stdout == ""
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        name: f"previous {name}" for name in OUTPUT_FILES
    }


class _InterruptImport:
    """A meta-path finder that interrupts the import of one module, as Ctrl-C would."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == self.name:
            raise KeyboardInterrupt


def test_an_interrupt_while_the_command_line_loads_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "replay._cli")
    monkeypatch.setattr(sys, "meta_path", [_InterruptImport("replay._cli"), *sys.meta_path])
    assert entry.main() == 130
    assert capsys.readouterr().err == "simclock: interrupted while starting\n"
