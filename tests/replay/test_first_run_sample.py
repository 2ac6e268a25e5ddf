"""The first-run sample (``simclock replay`` with no TRACE) shows what a prefix-aware policy
buys: ``kv_aware`` reuses far more of the prompts than ``round_robin`` and answers sooner."""

from __future__ import annotations

import json
from pathlib import Path

from replay._cli import EXIT_OK, main


def _summary(tmp_path: Path, policy: str) -> dict[str, object]:
    out = tmp_path / policy
    options = ["--quiet", "--progress", "none", "--output-dir", str(out)]
    assert main(["replay", "--policy", policy, *options]) == EXIT_OK
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    return summary


def test_kv_aware_reuses_over_twice_the_prefix_round_robin_does(tmp_path: Path) -> None:
    rr, kv = _summary(tmp_path, "round_robin"), _summary(tmp_path, "kv_aware")
    reuse = {
        name: s["prefix_reuse"]["prefix_reuse_ratio"]  # type: ignore[index]
        for name, s in (("round_robin", rr), ("kv_aware", kv))
    }
    assert round(reuse["round_robin"], 4) == 0.1570
    assert round(reuse["kv_aware"], 4) == 0.4063
    assert reuse["kv_aware"] > 2.5 * reuse["round_robin"]
    ttft = {
        name: s["metrics"]["mean_ttft_ms"]  # type: ignore[index]
        for name, s in (("round_robin", rr), ("kv_aware", kv))
    }
    assert ttft["kv_aware"] < 0.7 * ttft["round_robin"]
    # the figures docs/how-to/replay-a-trace.md shows
    assert (round(ttft["round_robin"], 2), round(ttft["kv_aware"], 2)) == (487.01, 313.92)
    assert (
        rr["workload"]
        == kv["workload"]
        == {
            "source": "mooncake_sample",
            "format": "mooncake",
            "requests": 199,
        }
    )
