"""Compare policies from Python: the sweep of compare_policies.toml, two of its runs side by
side, and their figures with the sweep's.

Run it from the repository's root: the sweep file names the policy file by a path relative to
the working directory, as ``simclock sweep`` takes it. Run with a directory to keep the figures
there.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from replay import LocalExecutor, compare, load_sweep, plot, sweep

SWEEP_FILE = Path(__file__).with_name("compare_policies.toml")
SHOWN = (
    "prefix_reuse.prefix_reuse_ratio",
    "distributions.ttft_ms.mean",
    "distributions.queueing_delay_ms.p99",
    "metrics.request_goodput",
)


def main(figures: Path | None = None) -> None:
    spec, _ = load_sweep(SWEEP_FILE)  # docs/examples/compare_policies.toml
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        result = sweep(spec, output_dir=out / "sweep", executor=LocalExecutor(jobs=1))
        print(f"{len(result.rows)} runs, {result.ran} run now, {len(result.failed)} failed")

        # the sweep figure's points: the mean over the seeds, per policy and pace
        ttft: defaultdict[tuple[str, int], list[float]] = defaultdict(list)
        for row in result.rows:
            key = (row.params["policy"], row.params["workload.speedup"])
            ttft[key].append(row.metrics["mean_ttft_ms"])
        for (policy, speedup), values in ttft.items():
            name = policy.rpartition(":")[2]
            print(f"{name:>11} x{speedup}: mean TTFT {sum(values) / len(values):6.1f} ms")

        # two runs of the sweep side by side: the same pace and seed, two policies
        chosen = [
            out / "sweep" / row.output_dir
            for row in result.rows
            if row.params["workload.speedup"] == 1 and row.seed == 0
        ]
        table = compare(chosen[1:])  # kv_aware, then PrefixFirst
        print("runs:", ", ".join(table.labels))
        for line in table.rows:
            if line.key in SHOWN:
                base, other = line.values
                print(f"{line.label} {base:.2f} -> {other:.2f} ({line.diff_pcts()[1]:+.1f}%)")

        drawn = plot([*chosen[1:], out / "sweep"], out / "plots", formats=["svg"])
        print("files:", " ".join(sorted(p.name for p in drawn.files)))
        for note in drawn.notes:
            print("note:", note.replace(str(out), "OUT"))
        if figures is not None:
            shutil.copy(out / "plots" / "ttft_cdf.svg", figures / "ttft_cdf.svg")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
