"""REFERENCE-engine §9 worked examples (a)-(c), (e) and their variants, to the microsecond.

Fixed timing 50/10 ms, E = 64, T = 512, ample KV unless stated. Example (d) (P/D) is in
``test_roles.py`` as far as one engine goes.
"""

from __future__ import annotations

import pytest

from engines import EngineConfig, EventKind, FixedTiming
from engines._core import EngineCore

from .sim import MS, core, req, simulate, token_ms

FIXED = FixedTiming(prefill_ms=50, decode_ms=10)


def ample(**options: object) -> EngineCore:
    return core(EngineConfig(num_blocks=10_000, **options), FIXED)  # type: ignore[arg-type]


def test_a_isolated_request_ttft_50_e2e_140() -> None:
    c = ample()
    simulate(c, [req("a", 1000, 10)], check=True)
    assert token_ms(c, "a") == [50, 60, 70, 80, 90, 100, 110, 120, 130, 140]
    trace = c.journal.traces["a"]
    assert trace.terminal_ns == 140 * MS and trace.terminal_status == "completed"
    assert trace.reused_input_tokens == 0


def test_a_first_pass_allocates_16_blocks_and_keys_15() -> None:
    c = ample()
    c.enqueue(c.new_seq(req("a", 1000, 10)))
    plan = c.schedule(0)
    assert plan is not None and plan.end_ns == 50 * MS
    assert len(plan.entries[0].blocks) == 16
    assert plan.entries[0].nkeyed == 15
    assert len(c.kv.cache) == 15


def test_b_chunked_prefill_ttft_100_e2e_190() -> None:
    c = ample(max_num_batched_tokens=512)
    simulate(c, [req("a", 1000, 10)], check=True)
    assert token_ms(c, "a") == [100, 110, 120, 130, 140, 150, 160, 170, 180, 190]
    chunks = [
        (e.time_ns // MS, e.get("tokens"))
        for e in c.journal.events
        if e.kind is EventKind.PREFILL_CHUNK
    ]
    assert chunks == [(0, 512), (50, 488)]


def test_c_prefix_reuse_b_hits_960_tokens_ttft_109() -> None:
    c = ample()
    a = req("a", 1000, 10, hash_ids=[1, 2])
    b = req("b", 1000, 10, hash_ids=[1, 2], arrival_ms=1)
    simulate(c, [a, b], check=True)
    assert token_ms(c, "a") == [50, 110, 120, 130, 140, 150, 160, 170, 180, 190]
    assert token_ms(c, "b") == [110, 120, 130, 140, 150, 160, 170, 180, 190, 200]
    tb = c.journal.traces["b"]
    assert tb.first_admit_ns == 50 * MS
    assert tb.reused_input_tokens == 960
    reused = sum(t.reused_input_tokens or 0 for t in c.journal.traces.values())
    assert reused / 2000 == 0.48


def test_c_variant_same_instant_arrivals_share_the_pass() -> None:
    c = ample()
    simulate(c, [req("a", 1000, 10, hash_ids=[1, 2]), req("b", 1000, 10, hash_ids=[1, 2])])
    assert token_ms(c, "a")[0] == 50 and token_ms(c, "b")[0] == 50
    assert c.journal.traces["b"].reused_input_tokens == 960


@pytest.mark.parametrize(
    ("prompt_a", "ids_a", "prompt_b", "ids_b", "reused"),
    [
        # block-aligned: B's cap floor(1023/64) = 15 blocks recomputes the last block
        (1024, [1, 2], 1024, [1, 2], 960),
        (1000, [1, 2], 1000, [1, 3], 512),
        # B = [1, 2, 4], P = 1100 after the block-aligned A: A's 16 full blocks all hit
        (1024, [1, 2], 1100, [1, 2, 4], 1024),
    ],
)
def test_c_variants_reuse(
    prompt_a: int, ids_a: list[int], prompt_b: int, ids_b: list[int], reused: int
) -> None:
    c = ample()
    a = req("a", prompt_a, 10, hash_ids=ids_a)
    b = req("b", prompt_b, 10, hash_ids=ids_b, arrival_ms=1)
    simulate(c, [a, b], check=True)
    assert c.journal.traces["b"].reused_input_tokens == reused


def test_e_preemption_of_the_newest_and_readmission_with_448_reused() -> None:
    c = core(EngineConfig(num_blocks=20), FIXED)
    a = req("a", 600, 200)
    b = req("b", 600, 200, arrival_ms=1)
    simulate(c, [a, b], check=True)
    ta, tb = token_ms(c, "a"), token_ms(c, "b")
    assert ta[0] == 50 and ta[1] == 110 and ta[-1] == 2090
    assert tb[:2] == [110, 120] and tb[39] == 500
    assert tb[40] == 2150 and tb[-1] == 3740 and len(tb) == 200
    trace = c.journal.traces["b"]
    assert trace.num_preemptions == 1
    assert [(x.at_ns // MS, x.reused_tokens, x.is_readmission) for x in trace.admissions] == [
        (50, 0, False),
        (2090, 448, True),
    ]
    assert trace.reused_input_tokens == 0
    preempted = [e for e in c.journal.events if e.kind is EventKind.PREEMPTED]
    assert [(e.request_id, e.time_ns // MS, e.get("num_output")) for e in preempted] == [
        ("b", 500, 40)
    ]
    assert c.kv.free_count == 20


def test_e_variant_head_of_line_blocking_behind_the_preempted_request() -> None:
    c = core(EngineConfig(num_blocks=20), FIXED)
    simulate(
        c,
        [req("a", 600, 200), req("b", 600, 200, arrival_ms=1), req("x", 10, 2, arrival_ms=1995)],
        check=True,
    )
    tx = c.journal.traces["x"]
    assert tx.engine_arrival_ns == 1995 * MS
    assert tx.first_admit_ns == 2090 * MS
