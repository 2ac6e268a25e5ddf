"""Faults: engines that crash (and restart) or drain at instants; nothing lost, nothing
counted twice."""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engines import EngineConfig, EventKind, FixedTiming
from loadgen import Workload, generate_synthetic, parse_synthetic
from policies import BasePolicy, EngineFailure, LeastLoaded, Placement, RoundRobin
from replay import (
    Aggregated,
    EngineCrash,
    EngineDrain,
    FaultError,
    Faults,
    ReplayResult,
    request_json,
    run,
    summary_json,
)
from replay._records import dumps

REPO = Path(__file__).resolve().parents[2]


def _workload() -> Workload:
    spec = parse_synthetic("count=60 arrivals=poisson(20) input=500 output=50")
    return generate_synthetic(spec, seed=1)


def _topology(workers: int = 2) -> Aggregated:
    return Aggregated(
        workers=workers,
        engine=EngineConfig(num_blocks=2000),
        timing=FixedTiming(prefill_ms=20, decode_ms=5),
    )


CRASH_AND_DRAIN = (
    (EngineCrash(at_s=1.0, engine=0, restart_s=0.5),),
    (EngineDrain(at_s=2.0, engine=1),),
)


def _faults(on_crash: str = "requeue") -> Faults:
    crashes, drains = CRASH_AND_DRAIN
    return Faults(crashes=crashes, drains=drains, on_crash=on_crash)  # type: ignore[arg-type]


def _bytes(result: ReplayResult) -> bytes:
    lines = [dumps(request_json(r), indent=None) for r in result.requests]
    return ("\n".join(lines) + dumps(summary_json(result), indent=2)).encode()


class Recording(LeastLoaded):
    """LeastLoaded that notes the crash hooks it hears."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[EngineFailure] = []
        self.aborted: list[Placement] = []
        self.removed: list[int] = []

    def on_engine_failed(self, event: EngineFailure) -> None:
        self.failures.append(event)

    def on_engine_removed(self, view: object) -> None:
        self.removed.append(view.id)  # type: ignore[attr-defined]

    def on_aborted(self, placement: Placement) -> None:
        self.aborted.append(placement)


def test_requeued_requests_complete_once_each() -> None:
    policy = Recording()
    result = run(_workload(), topology=_topology(), policy=policy, faults=_faults())
    statuses = collections.Counter(r.status for r in result.requests)
    assert statuses == {"completed": 60}
    assert len({r.request_id for r in result.requests}) == 60
    [failure] = policy.failures
    assert failure.engine == 0 and failure.requeued and failure.time_ns == 1_000_000_000
    assert policy.removed == [0]
    hit = [r for r in result.requests if r.faults]
    assert sorted(r.request_id for r in hit) == sorted(failure.requests)
    assert len(hit) == 3
    for record in hit:
        [fault] = record.faults
        assert (fault.at_ms, fault.engine, fault.reason) == (1000.0, 0, "engine_crashed")
        # placed again after the crash, on a live engine; its release is the original one
        assert record.engine in (1, 2)
        assert record.engine_arrival_ms is not None and record.engine_arrival_ms >= 1000.0
        assert record.arrival_ms is not None and record.arrival_ms < 1000.0
        assert record.output_tokens == 50
    line = request_json(hit[0])
    assert line["faults"] == [{"at_ms": 1000.0, "engine": 0, "reason": "engine_crashed"}]
    assert "faults" not in request_json(next(r for r in result.requests if not r.faults))
    assert result.meta.event_counts["requeued"] == 3
    assert result.meta.config["faults"] == _faults().as_dict()


def test_failed_requests_end_failed_with_the_reason() -> None:
    result = run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=_faults("fail"))
    statuses = collections.Counter(r.status for r in result.requests)
    assert statuses == {"completed": 57, "failed": 3}
    for record in result.requests:
        if record.status == "failed":
            assert (record.failure_reason, record.engine) == ("engine_crashed", 0)
            assert record.terminal_ms == 1000.0
    assert "requeued" not in result.meta.event_counts


def test_the_crashed_engine_is_removed_and_a_fresh_one_restarts() -> None:
    result = run(_workload(), topology=_topology(), policy=RoundRobin(), faults=_faults())
    engines = {e.index: e for e in result.summary.engines}
    assert sorted(engines) == [0, 1, 2]
    assert (engines[0].joined_ms, engines[0].removed_ms) == (0.0, 1000.0)
    assert engines[2].joined_ms == 1500.0
    # engine 1 drained at 2 s: nothing reached it after, everything later went to 2
    late = [r for r in result.requests if r.engine_arrival_ms and r.engine_arrival_ms > 2000]
    assert late and all(r.engine == 2 for r in late)


def test_no_kv_block_is_held_at_the_end() -> None:
    from replay import Run

    built = Run.build(_workload(), topology=_topology(), policy=LeastLoaded(), faults=_faults())
    built.finish()
    for engine in built.engines:
        assert engine.view.kv_blocks_used == 0
        assert engine.idle


@pytest.mark.parametrize("on_crash", ["requeue", "fail"])
def test_both_steppings_agree_under_faults(on_crash: str) -> None:
    outs = [
        _bytes(
            run(
                _workload(),
                topology=_topology(),
                policy=LeastLoaded(),
                faults=_faults(on_crash),
                stepping=stepping,
            )
        )
        for stepping in ("macro", "pass")
    ]
    assert outs[0] == outs[1]


def test_reruns_are_byte_identical() -> None:
    outs = {
        _bytes(run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=_faults()))
        for _ in range(2)
    }
    assert len(outs) == 1


_SCRIPT = textwrap.dedent(
    """
    import hashlib, sys
    sys.path.insert(0, {repo!r})
    from tests.replay.test_faults import _bytes, _faults, _topology, _workload
    from policies import LeastLoaded
    from replay import run
    out = run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=_faults())
    print(hashlib.sha256(_bytes(out)).hexdigest())
    """
)


def test_results_do_not_depend_on_the_hash_seed() -> None:
    digests = set()
    for hash_seed in ("0", "4242"):
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT.format(repo=str(REPO))],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(done.stdout.strip())
    here = run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=_faults())
    digests.add(hashlib.sha256(_bytes(here)).hexdigest())
    assert len(digests) == 1


def test_no_faults_is_the_run_without_the_option() -> None:
    plain = run(_workload(), topology=_topology(), policy=LeastLoaded())
    empty = run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=Faults())
    assert _bytes(plain) == _bytes(empty)
    assert "faults" not in empty.meta.config


class SlowCommitter(BasePolicy):
    """Offers every request to engine 0 and commits it 50 ms later: a crash in between
    withdraws the offer."""

    def __init__(self) -> None:
        self.aborted: list[Placement] = []

    async def run(self, requests, ctx):  # type: ignore[no-untyped-def]
        async for request in requests:
            ctx.spawn(self._place(request, ctx))

    async def _place(self, request, ctx):  # type: ignore[no-untyped-def]
        while True:
            if not ctx.engines:
                await ctx.wait_for_engines()
            async with ctx.offer(request, ctx.engines[0].id) as offer:
                if offer.tentative is None:
                    return
                await ctx.sleep_ms(50)
                placement = await offer.commit()
                if placement.committed:
                    return

    def on_aborted(self, placement: Placement) -> None:
        self.aborted.append(placement)


def test_a_crash_withdraws_open_offers() -> None:
    policy = SlowCommitter()
    workload = _workload()
    # 10 ms after request 10 arrived: its offer is open (it commits after 50 ms)
    at_ns = round(workload.requests[10].arrival_ms * 1_000_000) + 10_000_000
    faults = Faults(crashes=(EngineCrash(at_s=at_ns / 1e9, engine=0, restart_s=0.1),))
    result = run(workload, topology=_topology(), policy=policy, faults=faults)
    withdrawn = [p for p in policy.aborted if p.reason == "engine_crashed"]
    assert workload.requests[10].id in [p.request_id for p in withdrawn]
    assert all(p.engine == 0 and p.time_ns == at_ns for p in withdrawn)
    assert collections.Counter(r.status for r in result.requests) == {"completed": 60}
    assert result.meta.event_counts["aborted"] >= len(withdrawn)
    assert EventKind.REQUEUED.value == "requeued"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"crashes": [{"at_s": -1, "engine": 0}]}, "faults.crashes[0].at_s: must be a finite"),
        ({"crashes": [{"engine": 0}]}, "faults.crashes[0]: at_s is required"),
        ({"drains": [{"at_s": 1, "engine": 0, "x": 1}]}, "faults.drains[0].x: unknown key"),
        ({"on_crash": "retry"}, "faults.on_crash: must be one of 'requeue', 'fail'"),
        ({"view_delay_ms": "1"}, "faults.view_delay_ms: must be a finite number >= 0"),
        ({"nope": 1}, "faults.nope: unknown key; known: crashes, drains, on_crash"),
    ],
)
def test_bad_tables_name_the_field(table: dict[str, object], message: str) -> None:
    with pytest.raises(FaultError) as caught:
        Faults.from_mapping(table)
    assert str(caught.value).startswith(message)


def test_a_crash_of_an_engine_that_does_not_exist_is_refused() -> None:
    faults = Faults(crashes=(EngineCrash(at_s=1.0, engine=5),))
    with pytest.raises(FaultError) as caught:
        run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=faults)
    assert str(caught.value) == "faults.crashes[0]: engine 5 does not exist at 1.0 s (engines 0..1)"


def test_a_restarted_engine_can_crash_in_turn() -> None:
    faults = Faults(
        crashes=(
            EngineCrash(at_s=0.5, engine=0, restart_s=0.2),
            EngineCrash(at_s=1.0, engine=2, restart_s=0.2),
        )
    )
    result = run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=faults)
    assert collections.Counter(r.status for r in result.requests) == {"completed": 60}
    assert [e.index for e in result.summary.engines] == [0, 1, 2, 3]


def test_stale_information_is_echoed_and_read_back() -> None:
    faults = Faults(view_delay_ms=100.0, kv_event_delay_ms=5.0)
    result = run(_workload(), topology=_topology(), policy=LeastLoaded(), faults=faults)
    assert result.meta.config["faults"] == {"view_delay_ms": 100.0, "kv_event_delay_ms": 5.0}
    assert Faults.from_mapping(result.meta.config["faults"]) == faults
    assert collections.Counter(r.status for r in result.requests) == {"completed": 60}
