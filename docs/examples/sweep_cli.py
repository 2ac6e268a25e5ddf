"""A sweep from the command line: run it, read its table, run it again (nothing to do).

Equivalent shell commands::

    simclock sweep docs/examples/sweep_policies.toml --output-dir out --jobs 2
    simclock sweep docs/examples/sweep_policies.toml --output-dir out --quiet
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SWEEP_FILE = Path(__file__).with_name("sweep_policies.toml")


def sweep(out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "simclock", "sweep", str(SWEEP_FILE)]  # = `simclock sweep`
    command += ["--output-dir", str(out), *options]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        done = sweep(out, "--jobs", "2")
        print("exit status", done.returncode)
        print("files:", sorted(p.name for p in out.iterdir()), len(list((out / "runs").iterdir())))
        print("progress lines:", len(done.stderr.splitlines()))
        table = json.loads((out / "sweep.json").read_text())
        print("swept:", table["swept"])
        with (out / "sweep.csv").open(newline="") as handle:
            for row in csv.DictReader(handle):
                print(
                    f"{row['policy']:>8} x{row['workload.speedup']} seed {row['seed']}: "
                    f"median TTFT {float(row['median_ttft_ms']):7.1f} ms, "
                    f"goodput {float(row['request_goodput']):.2f} req/s"
                )
        again = sweep(out)
        print(again.stderr.splitlines()[0])
        print(again.stderr.splitlines()[-1].replace(str(out), "out"))


if __name__ == "__main__":
    main()
