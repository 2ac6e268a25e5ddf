"""REFERENCE-engine §9 (d): P/D worked example and its variants, end to end through replay.run."""

from __future__ import annotations

import attrs
import pytest

from engines import EngineConfig, ModelArch
from policies import PDPolicy
from replay import KVLink

from .pd_helpers import KV_BYTES_9D, example_d, replay, request

ORDERS = ["source_first", "destination_first"]

# 64 layers, 8 KV heads, head dim 128: the §9d model (other fields do not matter to the link)
ARCH_9D = ModelArch(
    name="example-d",
    num_layers=64,
    hidden_size=8192,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    ffn_size=28672,
    vocab_size=128256,
    context_length=131072,
)


@pytest.mark.parametrize("order", ORDERS)
def test_d_ttft_65_3687_and_e2e_155_3687(order: str) -> None:
    result = replay([request("a")], example_d(order=order), PDPolicy())
    (a,) = result.requests
    h = a.handoff
    assert h is not None
    assert a.status == "completed"
    assert (h.prefill_worker, h.decode_worker) == (0, 1)
    assert (h.prefill_admit_ms, h.prefill_done_ms) == (0.0, 50.0)
    assert h.transfer_tokens == 1024  # decode worker holds 0 of 16 blocks
    assert h.transfer_ms == pytest.approx(5.3687, abs=1e-4)
    assert h.transfer_done_ms == h.decode_admit_ms == 55.368709
    assert h.decode_reused_tokens == 0
    assert round(a.ttft_ms or 0, 4) == 65.3687
    assert round(a.e2e_ms or 0, 4) == 155.3687
    assert len(a.token_times_ms) == 10  # the bootstrap token is hidden


def test_d_source_first_reserves_at_prefill_done_destination_first_at_dispatch() -> None:
    source = replay([request("a")], example_d(), PDPolicy()).requests[0].handoff
    destination = replay([request("a")], example_d(order="destination_first"), PDPolicy())
    assert source is not None and source.destination_reserved_ms == 50.0
    h = destination.requests[0].handoff
    assert h is not None and h.destination_reserved_ms == 0.0
    # the decode side commits first in destination-first, so it is the first engine
    assert destination.requests[0].engine == 1
    assert replay([request("a")], example_d(), PDPolicy()).requests[0].engine == 0


@pytest.mark.parametrize("order", ORDERS)
def test_d_full_prompt_transfers_1000_tokens_ttft_65_2429(order: str) -> None:
    result = replay([request("a")], example_d(mode="full_prompt", order=order), PDPolicy())
    (a,) = result.requests
    assert a.handoff is not None and a.handoff.transfer_tokens == 1000
    assert round(a.handoff.transfer_ms or 0, 4) == 5.2429
    assert round(a.ttft_ms or 0, 4) == 65.2429


def test_d_prefill_tp2_halves_bytes_per_token_and_transfer_is_2_68_ms() -> None:
    link = KVLink.for_model(ARCH_9D, tensor_parallel=2, bandwidth_gbps=50.0)
    assert link.kv_bytes_per_token == KV_BYTES_9D / 2 == 131_072
    assert KVLink.for_model(ARCH_9D).kv_bytes_per_token == KV_BYTES_9D == 262_144
    result = replay(
        [request("a")], example_d(kv_bytes_per_token=link.kv_bytes_per_token), PDPolicy()
    )
    h = result.requests[0].handoff
    assert h is not None and round(h.transfer_ms or 0, 2) == 2.68


@pytest.mark.parametrize("order", ORDERS)
def test_d_later_identical_request_moves_1_block_in_0_3355_ms(order: str) -> None:
    result = replay([request("a"), request("b", at_ms=500)], example_d(order=order), PDPolicy())
    b = result.requests[1].handoff
    assert b is not None
    assert (b.decode_reused_tokens, b.transfer_tokens) == (960, 64)  # 15 blocks resident
    assert round(b.transfer_ms or 0, 4) == 0.3355


@pytest.mark.parametrize("order", ORDERS)
def test_d_decode_fixed_20_gives_ttft_75_37_and_e2e_255_37(order: str) -> None:
    result = replay([request("a")], example_d(decode_ms=20.0, order=order), PDPolicy())
    (a,) = result.requests
    assert (round(a.ttft_ms or 0, 2), round(a.e2e_ms or 0, 2)) == (75.37, 255.37)


def test_bandwidth_unset_means_instant_transfer_and_latency_is_added() -> None:
    instant = replay([request("a")], example_d(bandwidth_gbps=None), PDPolicy()).requests[0]
    assert instant.handoff is not None and instant.handoff.transfer_ms == 0.0
    assert instant.ttft_ms == 60.0  # prefill 50 + decode pass 10
    slow = replay([request("a")], example_d(latency_ms=2.5), PDPolicy()).requests[0]
    assert slow.handoff is not None
    assert slow.handoff.transfer_ms == pytest.approx(2.5 + 5.36870912)


def test_a_transfer_of_nothing_completes_at_its_reservation_and_joins_the_pass_then() -> None:
    """§3.1: transfer completions come before the pass that starts at the same instant. ``b``
    repeats ``a``'s block-aligned prompt, whose 16 blocks stay cached on the decode worker:
    its transfer moves nothing, so it completes at the decode-side reservation, a pass
    boundary of the decode worker (busy with ``c``), and ``b`` is admitted in that pass."""
    a = request("a", p=1024, n=10)
    c = request("c", p=64, n=300, ids=(9,))
    b = request("b", at_ms=300.0, p=1024, n=10)
    result = replay([a, c, b], example_d(), PDPolicy())
    h = result.requests[2].handoff
    assert h is not None and result.requests[2].request_id == "b"
    assert (h.decode_reused_tokens, h.transfer_tokens, h.transfer_ms) == (1024, 0, 0.0)
    reserved = h.destination_reserved_ms
    assert reserved is not None and reserved > h.prefill_done_ms  # a decode pass boundary
    assert h.transfer_done_ms == reserved
    assert h.decode_admit_ms == reserved  # not one decode pass (10 ms) later
    assert round(result.requests[2].ttft_ms or 0, 6) == round(reserved + 10.0 - 300.0, 6)


@pytest.mark.parametrize("one", [False, True])
def test_one_reservation_per_decode_pass_boundary_delays_the_second_by_one_pass(one: bool) -> None:
    """``c`` keeps the one decode worker busy (passes at 50.34 + 10k ms). ``a`` and ``b``
    (1,000 tokens, 16 blocks, 5.37 ms on the link) finish prefill at 150 on prefill workers 1
    and 0; the handoff orders them by prefill worker, so ``b`` is queued first. By default
    both reserve at the boundary 150.34 and are admitted at 160.34 (first token 170.34);
    with ``reserve_one_per_pass`` ``a`` waits for the boundary 160.34 (first token 180.34)."""
    topology = attrs.evolve(
        example_d(prefill_workers=2),
        decode_engine=EngineConfig(num_blocks=10_000, reserve_one_per_pass=one),
    )
    requests = [
        request("c", p=64, n=100, ids=(9,)),
        request("a", at_ms=100.0, ids=(1, 2)),
        request("b", at_ms=100.0, ids=(3, 4)),
    ]
    result = replay(requests, topology, PDPolicy())
    by_id = {r.request_id: r for r in result.requests}
    reserved = {rid: by_id[rid].handoff.destination_reserved_ms for rid in ("a", "b")}  # type: ignore[union-attr]
    first = {rid: round(by_id[rid].first_token_ms or 0, 6) for rid in ("a", "b")}
    assert reserved["b"] == 150.335544
    assert first["b"] == 170.335544
    assert reserved["a"] == (160.335544 if one else 150.335544)
    assert first["a"] == (180.335544 if one else 170.335544)


def test_an_idle_decode_engine_makes_one_reservation_after_the_other_at_once() -> None:
    """With ``reserve_one_per_pass`` and nothing running on the decode worker, ``a`` and
    ``b`` (prefill done at 150 on two workers) are both reserved at 150, one turn apart."""
    topology = attrs.evolve(
        example_d(prefill_workers=2),
        decode_engine=EngineConfig(num_blocks=10_000, reserve_one_per_pass=True),
    )
    requests = [request("a", at_ms=100.0, ids=(1, 2)), request("b", at_ms=100.0, ids=(3, 4))]
    result = replay(requests, topology, PDPolicy())
    handoffs = [r.handoff for r in result.requests]
    assert [h.destination_reserved_ms for h in handoffs if h is not None] == [150.0, 150.0]
    assert [r.status for r in result.requests] == ["completed", "completed"]
