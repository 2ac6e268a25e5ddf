"""The same sweep on Ray and in this process: the same files, byte for byte.

``RayExecutor()`` starts a local Ray instance (or uses the one this process started);
``RayExecutor(address="auto")`` joins the cluster this machine belongs to.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from replay import LocalExecutor, RayExecutor, SweepSpec, sweep

SPEC = SweepSpec(
    base={"workers": 2, "workload": {"synthetic": "count=40 arrivals=poisson(20) output=20"}},
    grid={"policy": ["random", "least_loaded"]},
    seeds=[0, 1],
)


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*.*")}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        on_ray = sweep(SPEC, output_dir=Path(tmp, "ray"), executor=RayExecutor(num_cpus=2))
        sweep(SPEC, output_dir=Path(tmp, "local"), executor=LocalExecutor())
        for row in on_ray.rows:
            print(row.run_id, row.status, f"median TTFT {row.metrics['median_ttft_ms']:.1f} ms")
        same = files(Path(tmp, "ray")) == files(Path(tmp, "local"))
        print(len(files(Path(tmp, "ray"))), "files, identical to the local run:", same)


if __name__ == "__main__":
    main()
