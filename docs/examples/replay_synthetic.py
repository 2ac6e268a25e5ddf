"""A synthetic workload, replayed twice: from Python, and from the command line with a
``[workload]`` table that a flag overrides.

Equivalent shell command for the second part::

    simclock replay --config run.toml --speedup 2 --output-dir out --quiet
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from engines import EngineConfig, FixedTiming
from loadgen import LoadMode, generate_synthetic, parse_synthetic
from policies import RoundRobin
from replay import Aggregated, run

SPEC = "count=40 arrivals=poisson(4) input=lognormal(3000,2000) output=uniform(10,60)"

CONFIG = f"""\
workers = 2
seed = 7

[timing]
type = "fixed"

[workload]
synthetic = "{SPEC}"
speedup = 1                      # overridden by --speedup below
max_requests = 30                # the last 10 sessions are never issued
"""


def from_python() -> None:
    workload = generate_synthetic(parse_synthetic(SPEC), seed=7)
    result = run(
        workload,
        topology=Aggregated(
            workers=2,
            engine=EngineConfig(num_blocks=2048),
            timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
        ),
        policy=RoundRobin(),
        seed=7,
        load=LoadMode(speedup=2.0),
    )
    first = result.requests[0]
    print(
        f"python: {len(workload.requests)} requests, first {first.request_id} "
        f"({first.input_length} in, {first.output_length} out)"
    )
    print("python: statuses", {k: v for k, v in result.summary.status_counts.items() if v})


def from_the_command_line() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "run.toml").write_text(CONFIG)
        command = [sys.executable, "-m", "simclock", "replay"]  # = `simclock replay`
        command += ["--config", str(work / "run.toml"), "--speedup", "2"]
        command += ["--output-dir", str(work / "out"), "--quiet"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        print("cli: exit status", done.returncode)
        summary = json.loads((work / "out" / "summary.json").read_text())
        config = json.loads((work / "out" / "config.json").read_text())
        print("cli: workload", summary["workload"])
        print("cli: statuses", {k: v for k, v in summary["status_counts"].items() if v})
        print("cli: [workload] echoed", config["config"]["workload"])


if __name__ == "__main__":
    from_python()
    from_the_command_line()
