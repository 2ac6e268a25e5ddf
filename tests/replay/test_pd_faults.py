"""Faults on a prefill/decode topology: engine crashes on either side and KV-transfer
failures; nothing lost, nothing counted twice, no KV block held at the end."""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engines import EngineConfig, FixedTiming
from loadgen import Workload, generate_synthetic, parse_synthetic
from policies import EngineFailure, LeastLoaded, PDPolicy
from replay import (
    Disaggregated,
    EngineCrash,
    FaultError,
    Faults,
    KVLink,
    ReplayResult,
    Run,
    TransferFailure,
    request_json,
    run,
    summary_json,
)
from replay._records import dumps

REPO = Path(__file__).resolve().parents[2]
ORDERS = ("source_first", "destination_first")


def _workload() -> Workload:
    spec = parse_synthetic("count=120 arrivals=poisson(80) input=2000 output=30")
    return generate_synthetic(spec, seed=1)


def _topology(order: str = "source_first") -> Disaggregated:
    return Disaggregated(
        prefill_workers=2,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=3000),
        decode_engine=EngineConfig(num_blocks=800),
        prefill_timing=FixedTiming(prefill_ms=30, decode_ms=5),
        decode_timing=FixedTiming(prefill_ms=30, decode_ms=5),
        # 2000 tokens of 256 KiB over 2 GB/s: about 260 ms in flight
        link=KVLink(kv_bytes_per_token=2 * 64 * 8 * 128 * 2, bandwidth_gbps=2.0),
        order=order,  # type: ignore[arg-type]
    )


class Recording(LeastLoaded):
    """LeastLoaded that notes the crash events it hears."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[EngineFailure] = []

    def on_engine_failed(self, event: EngineFailure) -> None:
        self.failures.append(event)


def _policy() -> PDPolicy:
    return PDPolicy(prefill=Recording(), decode=Recording())


def _faults(engine: int, on_crash: str = "requeue", **more: object) -> Faults:
    return Faults(
        crashes=(
            EngineCrash(at_s=0.7, engine=engine, restart_s=0.3),
            EngineCrash(at_s=1.2, engine=engine + 1),
        ),
        on_crash=on_crash,  # type: ignore[arg-type]
        transfer_failures=(TransferFailure(at_s=1.0),),
        transfer_failure_p=0.05,
        **more,  # type: ignore[arg-type]
    )


def _bytes(result: ReplayResult) -> bytes:
    lines = [dumps(request_json(r), indent=None) for r in result.requests]
    return ("\n".join(lines) + dumps(summary_json(result), indent=2)).encode()


def _finish(faults: Faults, order: str, **options: object) -> tuple[Run, ReplayResult]:
    built = Run.build(
        _workload(), topology=_topology(order), policy=_policy(), faults=faults, **options
    )
    return built, built.finish()


def _check_conserved(built: Run, result: ReplayResult) -> None:
    assert len(result.requests) == 120
    assert len({r.request_id for r in result.requests}) == 120
    for engine in built.engines:
        assert engine.view.kv_blocks_used == 0
        assert engine.idle


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_requeued_requests_complete_once_each(order: str, side: str) -> None:
    engine = 0 if side == "prefill" else 2
    built, result = _finish(_faults(engine), order)
    _check_conserved(built, result)
    assert collections.Counter(r.status for r in result.requests) == {"completed": 120}
    reasons = collections.Counter(f.reason for r in result.requests for f in r.faults)
    assert reasons["engine_crashed"] > 0 and reasons["transfer_failed"] > 0
    assert result.meta.event_counts["requeued"] == sum(reasons.values())
    for record in result.requests:
        assert record.output_tokens == 30
        for fault in record.faults:
            # placed again after its last fault
            assert record.engine_arrival_ms is not None
            assert record.engine_arrival_ms >= fault.at_ms
    crashed = {e.index: e for e in result.summary.engines}
    assert crashed[engine].removed_ms == 700.0 and crashed[engine + 1].removed_ms == 1200.0
    assert built.cluster.interval(engine).failed


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_failed_requests_end_failed_with_their_reason(order: str, side: str) -> None:
    engine = 0 if side == "prefill" else 2
    built, result = _finish(_faults(engine, "fail"), order)
    _check_conserved(built, result)
    failed = [r for r in result.requests if r.status == "failed"]
    reasons = collections.Counter(r.failure_reason for r in failed)
    assert set(reasons) == {"engine_crashed", "transfer_failed"}
    assert all(not r.faults for r in result.requests)
    assert "requeued" not in result.meta.event_counts
    statuses = collections.Counter(r.status for r in result.requests)
    assert statuses["completed"] + len(failed) == 120


def test_on_transfer_failure_overrides_on_crash() -> None:
    faults = _faults(0, "requeue", on_transfer_failure="fail")
    built, result = _finish(faults, "source_first")
    _check_conserved(built, result)
    failed = collections.Counter(r.failure_reason for r in result.requests if r.status == "failed")
    assert set(failed) == {"transfer_failed"}
    requeued = collections.Counter(f.reason for r in result.requests for f in r.faults)
    assert set(requeued) == {"engine_crashed"}
    assert result.meta.config["faults"]["on_transfer_failure"] == "fail"


def test_the_crashed_pool_policy_hears_the_crash() -> None:
    policy = _policy()
    result = run(_workload(), topology=_topology(), policy=policy, faults=_faults(2))
    decode = policy.decode
    assert isinstance(decode, Recording)
    assert [f.engine for f in decode.failures] == [2, 3]
    assert all(f.requeued for f in decode.failures)
    lost = {rid for f in decode.failures for rid in f.requests}
    hit = {r.request_id for r in result.requests if any(x.engine in (2, 3) for x in r.faults)}
    assert lost and lost <= hit
    prefill = policy.prefill
    assert isinstance(prefill, Recording) and prefill.failures == []


@pytest.mark.parametrize("order", ORDERS)
def test_crashes_while_the_decode_policy_holds_the_request(order: str) -> None:
    # a dispatch latency keeps decode offers in flight across the crash instants
    built, result = _finish(_faults(0), order, dispatch_latency_ms=20)
    _check_conserved(built, result)
    ended = collections.Counter(r.status for r in result.requests)
    assert set(ended) <= {"completed", "rejected", "unplaced"}
    assert ended["completed"] >= 115


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("on_crash", ["requeue", "fail"])
def test_both_steppings_agree(order: str, on_crash: str) -> None:
    outs = [
        _bytes(
            run(
                _workload(),
                topology=_topology(order),
                policy=_policy(),
                faults=_faults(2, on_crash),
                stepping=stepping,
            )
        )
        for stepping in ("macro", "pass")
    ]
    assert outs[0] == outs[1]


def test_the_failure_draws_follow_the_run_seed() -> None:
    faults = Faults(transfer_failure_p=0.2)

    def failed(seed: int) -> list[str]:
        result = run(_workload(), topology=_topology(), policy=_policy(), faults=faults, seed=seed)
        return sorted(r.request_id for r in result.requests if r.faults)

    assert failed(0) == failed(0)
    assert failed(0) != failed(1)
    assert 0 < len(failed(0)) < 120


_SCRIPT = textwrap.dedent(
    """
    import hashlib, sys
    sys.path.insert(0, {repo!r})
    from tests.replay.test_pd_faults import _bytes, _faults, _policy, _topology, _workload
    from replay import run
    out = run(_workload(), topology=_topology(), policy=_policy(), faults=_faults(0))
    print(hashlib.sha256(_bytes(out)).hexdigest())
    """
)


def test_results_do_not_depend_on_reruns_or_the_hash_seed() -> None:
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
    for _ in range(2):
        here = run(_workload(), topology=_topology(), policy=_policy(), faults=_faults(0))
        digests.add(hashlib.sha256(_bytes(here)).hexdigest())
    assert len(digests) == 1


def test_no_transfer_failure_is_the_run_without_the_option() -> None:
    plain = run(_workload(), topology=_topology(), policy=_policy())
    empty = run(
        _workload(),
        topology=_topology(),
        policy=_policy(),
        faults=Faults(transfer_failure_p=0.0, on_transfer_failure="fail"),
    )
    assert _bytes(plain) == _bytes(empty)
    assert "faults" not in empty.meta.config


def test_the_faults_echo_reads_back() -> None:
    faults = _faults(0, on_transfer_failure="fail")
    assert Faults.from_mapping(faults.as_dict()) == faults


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"transfer_failures": [{}]}, "faults.transfer_failures[0]: at_s is required"),
        (
            {"transfer_failures": [{"at_s": 1, "engine": 0}]},
            "faults.transfer_failures[0].engine: unknown key; known: at_s",
        ),
        ({"transfer_failure_p": 1.5}, "faults.transfer_failure_p: must be a number in [0, 1]"),
        ({"on_transfer_failure": "retry"}, "faults.on_transfer_failure: must be one of"),
    ],
)
def test_bad_tables_name_the_field(table: dict[str, object], message: str) -> None:
    with pytest.raises(FaultError) as caught:
        Faults.from_mapping(table)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_transfer_failures_need_a_disaggregated_topology() -> None:
    from replay import Aggregated

    with pytest.raises(FaultError) as caught:
        run(
            _workload(),
            topology=Aggregated(workers=1),
            policy=LeastLoaded(),
            faults=Faults(transfer_failure_p=0.1),
        )
    assert str(caught.value) == (
        "faults: transfer_failures and transfer_failure_p need a disaggregated "
        "(prefill/decode) topology"
    )
