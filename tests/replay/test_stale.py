"""Stale information (``Faults.view_delay_ms``, ``view_period_ms``, ``kv_event_delay_ms``):
what a policy reads lags exactly as declared, and nothing else changes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engines import EngineConfig, FixedTiming, KVEvent
from loadgen import Request
from policies import PolicyContext, RequestStream, StaleView
from replay import Aggregated, Faults, run
from replay._cli import main

from ..policies.support import req, workload

MS = 1_000_000


class Sampler:
    """Round robin (reads no view to place); a side task reads every view at ``at_ms``."""

    def __init__(self, at_ms: list[float]) -> None:
        self.at_ms = at_ms
        self.seen: dict[float, list[tuple[int, ...]]] = {}
        self.kv_lags: list[int] = []
        self.overlaps: dict[float, list[int]] = {}
        self._probe: Request | None = None
        self._next = 0

    async def _sample(self, ctx: PolicyContext) -> None:
        for at in self.at_ms:
            await ctx.sleep_until_ns(round(at * MS))
            self.seen[at] = [
                (
                    v.id,
                    v.waiting_count,
                    v.running_count,
                    v.outstanding_prefill_tokens,
                    v.outstanding_decode_tokens,
                    v.kv_blocks_free,
                    v.kv_blocks_used,
                    v.pending_offers,
                )
                for v in ctx.engines
            ]
            probe = self._probe
            if probe is not None:
                self.overlaps[at] = [ctx.prefix_overlap_tokens(probe, v.id) for v in ctx.engines]

    def on_kv_event(self, event: KVEvent) -> None:
        self.kv_lags.append(self.ctx.now_ns() - event.time_ns)

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        self.ctx = ctx
        ctx.spawn(self._sample(ctx), name="sampler")
        async for request in requests:
            if self._probe is None:
                self._probe = request
            await ctx.dispatch(request, self._next % len(ctx.engines))
            self._next += 1


def _requests() -> list[Request]:
    ids = list(range(12))
    return [
        req(f"r{i}", prompt=200 + 60 * i, output=30 + 7 * i, at_ms=20.0 * i, ids=ids)
        for i in range(10)
    ]


def _topology() -> Aggregated:
    return Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=400, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )


def _sampled(at_ms: list[float], **faults: float) -> tuple[Sampler, Any]:
    policy = Sampler(at_ms)
    result = run(
        workload(_requests()), topology=_topology(), policy=policy, faults=Faults(**faults)
    )
    return policy, result


def _lines(result: Any) -> list[str]:
    return [repr(r) for r in result.requests]


def test_periodic_views_show_the_last_multiple_of_the_period() -> None:
    # every pass ends on a multiple of 10 ms: the engines are read between passes
    live, _ = _sampled([10.0 * k for k in range(1, 60)])
    stale, _ = _sampled([10.0 * k + 5 for k in range(1, 60)], view_period_ms=10.0)
    for k in range(1, 60):
        assert stale.seen[10.0 * k + 5] == live.seen[10.0 * k]
    # and the views changed over the run (the comparison is not between empty engines)
    assert len({tuple(v) for v in live.seen.values()}) > 10


def test_a_delay_and_a_period_read_the_period_snapshot_that_old() -> None:
    live, _ = _sampled([10.0 * k for k in range(1, 60)])
    stale, _ = _sampled(
        [10.0 * k + 25 for k in range(1, 60)], view_period_ms=10.0, view_delay_ms=20.0
    )
    for k in range(1, 60):
        assert stale.seen[10.0 * k + 25] == live.seen[10.0 * k]


def test_delayed_views_show_queue_counts_as_they_were() -> None:
    # queue counts change only at lifecycle events: a delayed view reads them exactly
    live, _ = _sampled([10.0 * k + 5 for k in range(60)])
    stale, _ = _sampled([10.0 * k + 5 + 30 for k in range(60)], view_delay_ms=30.0)
    for k in range(60):
        then = [row[:3] + row[7:] for row in live.seen[10.0 * k + 5]]
        assert [row[:3] + row[7:] for row in stale.seen[10.0 * k + 35]] == then


def test_a_delayed_view_of_an_engine_reads_empty_before_its_first_snapshot() -> None:
    stale, _ = _sampled([1.0, 5.0], view_delay_ms=30.0)
    # request r0 is running on engine 0 from 0 ms, but 30 ms ago is before the run began
    assert stale.seen[1.0][0] == (0, 0, 0, 0, 0, 400, 0, 0)


def test_kv_events_arrive_late_and_prefix_overlap_follows_them() -> None:
    at = [10.0 * k + 5 for k in range(60)]
    live, _ = _sampled(at)
    stale, _ = _sampled([t + 40 for t in at], kv_event_delay_ms=40.0)
    assert stale.kv_lags and set(stale.kv_lags) == {40 * MS}
    assert live.kv_lags and set(live.kv_lags) == {0}
    for t in at:
        assert stale.overlaps[t + 40] == live.overlaps[t]
    assert any(o != [0, 0] for o in live.overlaps.values())


def test_stale_information_changes_what_the_policy_sees_not_the_engines() -> None:
    # round robin reads no view: the requests' records are the same with any staleness
    _, plain = _sampled([])
    for faults in (
        {"view_delay_ms": 30.0},
        {"view_period_ms": 20.0},
        {"kv_event_delay_ms": 15.0},
    ):
        _, stale = _sampled([], **faults)
        assert _lines(stale) == _lines(plain)
        assert stale.meta.config["faults"] == faults


def test_views_are_stale_views_only_when_information_lags() -> None:
    plain, _ = _sampled([])
    assert plain.ctx.engines and not any(isinstance(v, StaleView) for v in plain.ctx.engines)
    stale, _ = _sampled([], view_delay_ms=1.0)
    assert all(isinstance(v, StaleView) for v in stale.ctx.engines)


_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.replay.test_stale import _sampled
for faults in ({{"view_delay_ms": 30.0}}, {{"view_period_ms": 20.0, "view_delay_ms": 5.0}},
               {{"kv_event_delay_ms": 15.0}}):
    policy, result = _sampled([10.0 * k + 3 for k in range(40)], **faults)
    print(sorted(policy.seen.items()), policy.overlaps, [repr(r) for r in result.requests])
"""


def test_stale_runs_are_identical_across_reruns_and_hash_seeds() -> None:
    import pathlib

    root = str(pathlib.Path(__file__).resolve().parents[2])
    outputs = {
        subprocess.run(
            [sys.executable, "-c", _SCRIPT.format(root=root)],
            capture_output=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=root,
        ).stdout
        for seed in ("0", "1", "12345")
    }
    assert len(outputs) == 1
    assert len(next(iter(outputs))) > 1000


STALE_CONFIG = """\
workers = 3
policy = "least_loaded"
timing = {type = "fixed", prefill_ms = 20, decode_ms = 5}
[workload]
synthetic = "count=40 arrivals=poisson(20) input=300 output=40"
[faults]
view_delay_ms = 150
kv_event_delay_ms = 20
"""


def test_a_config_file_sets_stale_information(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text(STALE_CONFIG)
    assert main(["replay", "--config", str(config), "--output-dir", str(tmp_path / "a")]) == 0
    echo = json.loads((tmp_path / "a" / "config.json").read_text())
    assert echo["faults"] == {"view_delay_ms": 150.0, "kv_event_delay_ms": 20.0}
    live = tmp_path / "live.toml"
    live.write_text(STALE_CONFIG.split("[faults]")[0])
    assert main(["replay", "--config", str(live), "--output-dir", str(tmp_path / "b")]) == 0
    # least-loaded places differently when its views are late
    assert (tmp_path / "a" / "requests.jsonl").read_bytes() != (
        tmp_path / "b" / "requests.jsonl"
    ).read_bytes()
    assert main(["explore", str(config), "--runs", "3", "--delays-ms", "0,50,300"]) == 0
    assert capsys.readouterr().out.endswith("explore: 0 of 3 runs failed\n")
