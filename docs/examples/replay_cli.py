"""The command line from a script: a TOML config, a flag that overrides it, and the outputs.

Equivalent shell commands::

    simclock replay small.jsonl --config run.toml --policy kv_aware --output-dir out --quiet
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from loadgen import dataset_path, open_binary

CONFIG = """\
workers = 2
policy = "round_robin"          # overridden by --policy below
seed = 1
slo = "ttft=2000,tpot=100"

[timing]
type = "fixed"
prefill_ms = 50
decode_ms = 10
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trace = work / "small.jsonl"  # the first 20 requests of the Mooncake trace
        with open_binary(dataset_path("mooncake-conversation")) as rows:
            trace.write_bytes(b"".join(itertools.islice(rows, 20)))
        (work / "run.toml").write_text(CONFIG)
        command = [sys.executable, "-m", "simclock", "replay", str(trace)]  # = `simclock replay`
        command += ["--config", str(work / "run.toml"), "--policy", "kv_aware"]
        command += ["--output-dir", str(work / "out"), "--quiet"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        print("exit status", done.returncode)
        print("files:", sorted(p.name for p in (work / "out").iterdir()))
        summary = json.loads((work / "out" / "summary.json").read_text())
        config = json.loads((work / "out" / "config.json").read_text())
        print("policy:", config["policy"], "| workers:", config["topology"]["workers"])
        print("completed:", summary["status_counts"]["completed"])
        metrics = summary["metrics"]
        for name in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "request_goodput"):
            print(f"{name}: {metrics[name]:.2f}")


if __name__ == "__main__":
    main()
