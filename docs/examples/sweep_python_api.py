"""A sweep from Python: a grid over a policy and an engine setting, run in two processes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from replay import LocalExecutor, SweepSpec, sweep

SYNTHETIC = (
    "count=120 arrivals=poisson(20) input=2000 output=20 prefix_groups=8 shared_prefix_ratio=0.9"
)

SPEC = SweepSpec(
    base={"workers": 4, "workload": {"synthetic": SYNTHETIC}},
    grid={
        "policy": ["round_robin", "kv_aware"],
        "engine.enable_prefix_caching": [True, False],  # a key inside the [engine] table
    },
    seeds=[7],
)


def main() -> None:
    for run in SPEC.runs()[:2]:
        print(run.run_id)
    with tempfile.TemporaryDirectory() as tmp:
        result = sweep(SPEC, output_dir=tmp, executor=LocalExecutor(jobs=2))
        print("swept:", result.swept, "| ran:", result.ran, "| failed:", len(result.failed))
        for row in result.rows:
            summary = json.loads((Path(tmp) / row.output_dir / "summary.json").read_text())
            reuse = summary["prefix_reuse"]["prefix_reuse_ratio"]
            caching = row.params["engine.enable_prefix_caching"]
            print(
                f"{row.params['policy']:>11}, caching {caching!s:5}: "
                f"mean TTFT {row.metrics['mean_ttft_ms']:6.1f} ms, prefix reuse {reuse:.0%}"
            )


if __name__ == "__main__":
    main()
