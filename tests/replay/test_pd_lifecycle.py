"""The P/D lifecycle (REFERENCE-engine §6): handoff timestamps, decode order, reservation queue,
phase metrics, configuration errors, and a real trace end to end."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from engines import EngineConfig, FixedTiming, PassShape
from loadgen import Workload, read_mooncake
from policies import PDPolicy, RoundRobin, from_choice, pd_policy
from replay import (
    Disaggregated,
    KVLink,
    PDConfigError,
    pd_phases,
    pd_topology_from_options,
    request_json,
    run,
)
from tests.datasets import MOONCAKE, head_lines

from .pd_helpers import KeepingPD, clean, example_d, replay, request, statuses


@attrs.frozen
class TenthMsPerToken:
    """A pass costs one tenth of a millisecond per prefill token."""

    def pass_time_ms(self, shape: PassShape) -> float:
        return shape.prefill_tokens / 10


def test_every_handoff_timestamp_is_recorded_in_order() -> None:
    result = replay([request("a", p=700, n=4, ids=[5, 6])], example_d(), PDPolicy())
    (a,) = result.requests
    h = a.handoff
    assert h is not None
    assert h.prefill_admit_ms is not None and h.prefill_done_ms is not None
    assert h.destination_reserved_ms is not None and h.transfer_done_ms is not None
    assert h.decode_admit_ms is not None and a.first_token_ms is not None
    assert a.engine_arrival_ms is not None
    times = [
        a.engine_arrival_ms,
        h.prefill_admit_ms,
        h.prefill_done_ms,
        h.destination_reserved_ms,
        h.transfer_done_ms,
        h.decode_admit_ms,
        a.first_token_ms,
    ]
    assert times == sorted(times)
    assert h.transfer_tokens == 704  # 11 missing blocks of 64
    assert a.output_tokens == 4 and len(a.token_times_ms) == 4


def test_decode_round_robin_counts_in_prefill_completion_then_worker_order() -> None:
    # 'first' goes to prefill engine 1 at 0 (a 60 ms pass), 'second' to engine 0 at 10 (50 ms):
    # both finish at 60, engine 1's deadline firing first. Worker order puts 'second' first.
    choice = from_choice(lambda r, views: {"first": 1, "second": 0, "third": 1}[r.id], name="pick")
    topology = Disaggregated(prefill_workers=2, decode_workers=2, prefill_timing=TenthMsPerToken())
    requests = [
        request("first", p=600, ids=[1, 2]),
        request("second", at_ms=10, p=500, ids=[3]),
        request("third", at_ms=10, p=100, ids=[4]),
    ]
    result = replay(requests, topology, PDPolicy(prefill=choice))
    handoffs = {r.request_id: r.handoff for r in result.requests}
    done = {rid: h.prefill_done_ms for rid, h in handoffs.items() if h is not None}
    workers = {rid: h.decode_worker for rid, h in handoffs.items() if h is not None}
    assert done == {"first": 60.0, "second": 60.0, "third": 70.0}
    assert statuses(result) == dict.fromkeys(["first", "second", "third"], "completed")
    # decode placements: second (60, worker 0) -> 2, first (60, worker 1) -> 3, third -> 2
    assert workers == {"second": 2, "first": 3, "third": 2}


def test_a_full_decode_engine_queues_reservations_fifo_and_holds_prefill_blocks() -> None:
    keeping = KeepingPD(example_d(decode_blocks=20, bandwidth_gbps=None))
    requests = [request(r, p=600, n=3, ids=[i, i + 50]) for i, r in enumerate("abc", start=20)]
    result = replay(requests, keeping, PDPolicy())
    h = {r.request_id: r.handoff for r in result.requests}
    assert all(x is not None for x in h.values())
    a, b, c = h["a"], h["b"], h["c"]
    assert a is not None and b is not None and c is not None
    assert a.prefill_done_ms == b.prefill_done_ms == c.prefill_done_ms == 50.0
    assert a.destination_reserved_ms == b.destination_reserved_ms == 50.0
    # c waits for a's 10 blocks: a finishes at 50 + 3 decode passes
    assert c.destination_reserved_ms == result.requests[0].terminal_ms == 80.0
    phases = pd_phases(result)
    assert phases.reservation_wait_ms.max == 30.0 and phases.reservation_wait_ms.min == 0.0
    assert keeping.leftovers() == clean(keeping)


def test_ttft_is_the_sum_of_the_phases() -> None:
    keeping = KeepingPD(example_d(prefill_workers=2, decode_workers=2, decode_blocks=40))
    requests = [
        request(f"r{i}", at_ms=7.0 * i, p=300 + 50 * i, n=5, ids=[100 + i, 200 + i])
        for i in range(8)
    ]
    result = replay(requests, keeping, pd_policy("kv_aware"))
    phases = pd_phases(result)
    assert phases.transfer_ms.count == 8
    for record in result.requests:
        h = record.handoff
        assert h is not None and record.ttft_ms is not None
        assert record.engine_arrival_ms is not None and record.arrival_ms is not None
        assert h.prefill_admit_ms is not None and h.prefill_done_ms is not None
        assert h.destination_reserved_ms is not None and h.transfer_done_ms is not None
        assert h.decode_admit_ms is not None and record.first_token_ms is not None
        parts = [
            record.engine_arrival_ms - record.arrival_ms,
            h.prefill_admit_ms - record.engine_arrival_ms,
            h.prefill_done_ms - h.prefill_admit_ms,
            max(0.0, h.destination_reserved_ms - h.prefill_done_ms),
            h.transfer_done_ms - max(h.prefill_done_ms, h.destination_reserved_ms),
            h.decode_admit_ms - h.transfer_done_ms,
            record.first_token_ms - h.decode_admit_ms,
        ]
        assert sum(parts) == pytest.approx(record.ttft_ms)
    assert set(phases.as_dict()) == {
        "prefill_queueing_ms",
        "prefill_compute_ms",
        "reservation_wait_ms",
        "transfer_ms",
        "decode_queueing_ms",
        "decode_first_pass_ms",
    }
    assert keeping.leftovers() == clean(keeping)


def test_the_same_run_twice_gives_identical_records() -> None:
    requests = [request(f"r{i}", at_ms=3.0 * i, p=200 + 10 * i, n=4, ids=[i]) for i in range(6)]

    def once() -> list[str]:
        topology = example_d(prefill_workers=2, decode_workers=2)
        result = replay(requests, topology, pd_policy("random"))
        return [str(request_json(r)) for r in result.requests]

    assert once() == once()


def test_topology_echo_names_pools_link_and_order() -> None:
    result = replay([request("a")], example_d(), PDPolicy())
    echo = result.meta.config["topology"]
    assert isinstance(echo, dict)
    assert (echo["type"], echo["order"], echo["prefill_workers"], echo["decode_workers"]) == (
        "pd",
        "source_first",
        1,
        1,
    )
    assert echo["link"] == {
        "mode": "destination_missing",
        "kv_bytes_per_token": 262144,
        "bandwidth_gbps": 50.0,
        "latency_ms": 0.0,
    }
    assert result.meta.config["policy"] == "pd(round_robin,round_robin)"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"mode": "half"},
            "KVLink.mode must be one of 'destination_missing', 'full_prompt', got 'half'",
        ),
        ({"bandwidth_gbps": 0}, "KVLink.bandwidth_gbps must be a finite number > 0 or None, got 0"),
        ({"latency_ms": -1.0}, "KVLink.latency_ms must be a finite number >= 0, got -1.0"),
        (
            {"kv_bytes_per_token": float("nan")},
            "KVLink.kv_bytes_per_token must be a finite number >= 0, got nan",
        ),
    ],
)
def test_bad_link_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(PDConfigError) as info:
        KVLink(**options)  # type: ignore[arg-type]
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefill_workers": 0}, "Disaggregated.prefill_workers must be an int >= 1, got 0"),
        ({"decode_workers": True}, "Disaggregated.decode_workers must be an int >= 1, got True"),
        (
            {"order": "both"},
            "Disaggregated.order must be one of 'source_first', 'destination_first', got 'both'",
        ),
        (
            {"prefill_engine": EngineConfig(num_blocks=8, role="decode")},
            "Disaggregated.prefill_engine has role 'decode'; it must be 'prefill' "
            "(or 'aggregated', which the pool turns into its role)",
        ),
        (
            {"decode_engine": EngineConfig(num_blocks=8, block_size=16)},
            "Disaggregated: prefill block_size 64 and decode block_size 16 differ; "
            "both pools must use one block size",
        ),
    ],
)
def test_bad_topologies_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(PDConfigError) as info:
        Disaggregated(**options)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_an_aggregated_policy_on_a_pd_topology_is_refused() -> None:
    with pytest.raises(PDConfigError) as info:
        replay([request("a")], example_d(), RoundRobin())
    assert str(info.value) == (
        "a disaggregated topology needs a policies.PDPolicy, got 'round_robin'"
    )


def test_pools_get_their_roles_and_options_build_the_link() -> None:
    topology = pd_topology_from_options(
        prefill_workers=2,
        decode_workers=3,
        engine=EngineConfig(num_blocks=128),
        kv_bandwidth_gbps=25.0,
        model=None,
        kv_bytes_per_token=1000.0,
    )
    assert (topology.prefill_engine.role, topology.decode_engine.role) == ("prefill", "decode")
    assert topology.prefill_engine.num_blocks == topology.decode_engine.num_blocks == 128
    assert topology.link == KVLink(kv_bytes_per_token=1000.0, bandwidth_gbps=25.0)
    assert isinstance(topology.prefill_timing, FixedTiming)
    assert [e.config.role for e in topology.build(**_build_args())] == ["prefill"] * 2 + [
        "decode"
    ] * 3


def _build_args() -> dict[str, object]:
    from engines import BlockKeyer, Journal

    return {"keyer": BlockKeyer(), "journal": Journal()}


def test_mooncake_conversation_trace_replays_on_pd_with_every_request_terminal(
    tmp_path: Path,
) -> None:
    # the first 150 rows of the bundled trace (about a minute of arrivals) keep the test fast
    head = tmp_path / "conversation_head.jsonl"
    head.write_text(head_lines(MOONCAKE, 150), encoding="utf-8")
    workload = read_mooncake(head)
    keeping = KeepingPD(
        pd_topology_from_options(
            prefill_workers=2,
            decode_workers=2,
            engine=EngineConfig(num_blocks=2048),
            timing=FixedTiming(prefill_ms=40.0, decode_ms=8.0),
            model="llama-3.1-8b",
            kv_bandwidth_gbps=25.0,
        )
    )
    result = run(workload, topology=keeping, policy=pd_policy("kv_aware"), seed=1)
    counts = result.summary.status_counts
    assert result.evidence.accounted == sum(counts.values()) == 150
    assert counts["completed"] + counts["rejected"] == 150
    assert counts["completed"] >= 140
    phases = pd_phases(result)
    assert phases.transfer_ms.count == counts["completed"]
    assert phases.transfer_ms.max is not None and phases.transfer_ms.max > 0
    assert phases.decode_queueing_ms.count == counts["completed"]
    assert keeping.leftovers() == clean(keeping)


def test_phase_metrics_of_an_aggregated_run_are_empty() -> None:
    from replay import Aggregated

    result = run(
        Workload(requests=(request("a"),), source="t", format="t"),
        topology=Aggregated(workers=1, engine=EngineConfig(num_blocks=64)),
        policy=RoundRobin(),
        seed=0,
    )
    phases = pd_phases(result)
    assert phases.transfer_ms.count == 0 and phases.prefill_compute_ms.mean is None
    assert pd_phases(result.requests) == phases
