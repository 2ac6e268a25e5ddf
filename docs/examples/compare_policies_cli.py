"""Compare policies from the command line: every command of docs/how-to/compare-policies.md.

The commands run as written, in a scratch directory that holds a copy of this directory's
policy file and sweep file at ``docs/examples/`` (the paths the guide uses from the
repository's root). Run with a directory to copy the guide's two figures there.
"""

from __future__ import annotations

import csv
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OWN = "docs/examples/compare_prefix_first.py:PrefixFirst"
RUNS = (
    "simclock replay --policy kv_aware --max-requests 80 --series --quiet --output-dir out/kv",
    f"simclock replay --policy {OWN} --max-requests 80 --series --quiet --output-dir out/pf",
)
COMPARE = "simclock compare out/kv out/pf"
SWEEP = "simclock sweep docs/examples/compare_policies.toml --plots"
SWEEP_AGAIN = "simclock sweep docs/examples/compare_policies.toml"
SWEEP_MORE = "simclock sweep docs/examples/compare_policies.toml --jobs 2"
PLOT = "simclock plot out/kv out/pf compare-out --output out/plots --format svg"
COMMANDS = (*RUNS, COMPARE, SWEEP, SWEEP_AGAIN, SWEEP_MORE, PLOT)

# the edit between SWEEP_AGAIN and SWEEP_MORE: a fourth policy, appended to the first axis
POLICIES = f'policy = ["random", "kv_aware", "{OWN}"]'
MORE_POLICIES = f'policy = ["random", "kv_aware", "{OWN}", "least_loaded"]'
# the guide's figures: (what the commands drew, the file in docs/how-to)
FIGURES = (
    ("out/plots/ttft_cdf.svg", "compare-policies-ttft-cdf.svg"),
    ("out/plots/sweep_mean_ttft_ms.svg", "compare-policies-sweep-mean-ttft.svg"),
)


def simclock(work: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run one ``simclock ...`` command line in ``work``; print it and its exit status."""
    argv = [sys.executable, "-m", "simclock", *shlex.split(command)[1:]]  # = `simclock ...`
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
    print(f"$ {command}  -> exit {done.returncode}")
    return done


def main(figures: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "docs" / "examples").mkdir(parents=True)
        for name in ("compare_prefix_first.py", "compare_policies.toml"):
            shutil.copy(HERE / name, work / "docs" / "examples" / name)

        for command in RUNS:
            simclock(work, command)
        print(simclock(work, COMPARE).stdout, end="")

        done = simclock(work, SWEEP)
        print(*done.stderr.splitlines()[:2], "...", *done.stderr.splitlines()[-3:], sep="\n")
        print("compare-out:", sorted(p.name for p in (work / "compare-out").iterdir()))
        with (work / "compare-out" / "sweep.csv").open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        print("columns:", ", ".join(list(rows[0])[:7]), "...")
        for row in rows:
            if row["seed"] == "0":
                print(
                    f"{row['policy'].rpartition(':')[2]:>11} x{row['workload.speedup']}: "
                    f"mean TTFT {float(row['mean_ttft_ms']):6.1f} ms, "
                    f"p99 TTFT {float(row['p99_ttft_ms']):7.1f} ms, "
                    f"goodput {float(row['request_goodput']):.2f} req/s"
                )

        print(simclock(work, SWEEP_AGAIN).stderr.splitlines()[-1])
        sweep_file = work / "docs" / "examples" / "compare_policies.toml"
        text = sweep_file.read_text()
        assert POLICIES in text
        sweep_file.write_text(text.replace(POLICIES, MORE_POLICIES))
        done = simclock(work, SWEEP_MORE)
        lines = done.stderr.splitlines()
        print(f"{sum('done before' in line for line in lines)} lines 'done before'")
        ran = [line.split("  ", 1)[1] for line in lines if "  ok  median" in line]
        print(*sorted(ran), sep="\n")  # sorted: with two jobs, runs finish in any order
        print(lines[-1])

        print(simclock(work, PLOT).stdout, end="")
        for directory in ("out/plots", "compare-out/plots"):
            names = sorted(p.name for p in (work / directory).iterdir())
            print(f"{directory}:", " ".join(n for n in names if not n.endswith(".png")))
        if figures is not None:
            for drawn, name in FIGURES:
                shutil.copy(work / drawn, figures / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
