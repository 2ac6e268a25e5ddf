"""``SGLangScheduler``: options, the queue order, and randomised workloads against the KV
invariants and per-pass stepping."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest

from engines import (
    SCHEDULERS,
    EngineConfig,
    EngineConfigError,
    FixedTiming,
    SGLangRules,
    SGLangScheduler,
)
from engines._core import EngineCore
from loadgen import LoadMode, generate_synthetic, parse_synthetic
from policies import RoundRobin
from replay import Aggregated, run, write_outputs

from .sim import core, req, simulate

FIXED = FixedTiming(prefill_ms=50, decode_ms=10)


def test_defaults_are_sglangs_and_the_name_is_registered() -> None:
    s = SGLangScheduler()
    assert SCHEDULERS["sglang"] is SGLangScheduler
    assert s.name == "sglang" and s.options() == {}
    assert (s.page_size, s.schedule_policy, s.max_prefill_tokens) == (1, "fcfs", 16384)
    assert (s.clip_max_new_tokens, s.retract_decode_steps, s.enable_mixed_chunk) == (
        4096,
        20,
        False,
    )
    init, low, decay = s.ratios
    assert (init, low) == (0.7, 0.7 * 0.14)
    assert decay == pytest.approx((0.7 - 0.098) / 600)
    assert SGLangScheduler(schedule_policy="lpm").options() == {"schedule_policy": "lpm"}
    # schedule_conservativeness scales the initial ratio, capped at 1
    assert SGLangScheduler(schedule_conservativeness=2.0).ratios[0] == 1.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"page_size": 0}, "SGLangScheduler.page_size must be an int >= 1, got 0"),
        (
            {"schedule_policy": "random"},
            "SGLangScheduler.schedule_policy must be 'lpm' or 'fcfs', got 'random'",
        ),
        (
            {"chunked_prefill_size": -1},
            "SGLangScheduler.chunked_prefill_size must be an int >= 1, got -1",
        ),
        (
            {"init_new_token_ratio": 1.5},
            "SGLangScheduler.init_new_token_ratio must be a number in (0, 1], got 1.5",
        ),
        ({"enable_mixed_chunk": 1}, "SGLangScheduler.enable_mixed_chunk must be a bool, got 1"),
        (
            {"schedule_conservativeness": 0},
            "SGLangScheduler.schedule_conservativeness must be a positive number, got 0",
        ),
    ],
)
def test_a_bad_option_is_a_one_line_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(EngineConfigError) as info:
        SGLangScheduler(**options)
    assert str(info.value) == message


def test_the_page_size_is_the_block_size_and_the_engine_is_aggregated() -> None:
    with pytest.raises(EngineConfigError, match=r"page_size 1 must equal EngineConfig\.block_size"):
        core(EngineConfig(num_blocks=10, scheduler=SGLangScheduler()), FIXED)
    with pytest.raises(EngineConfigError, match="aggregated engines only, not role 'prefill'"):
        config = EngineConfig(
            num_blocks=10, block_size=1, role="prefill", scheduler=SGLangScheduler()
        )
        core(config, FIXED)
    c = core(EngineConfig(num_blocks=10, block_size=1, scheduler=SGLangScheduler()), FIXED)
    assert isinstance(c.scheduler, SGLangRules)
    assert c.kv.empty is not None  # pages caching nothing are taken before cached ones


def _waiting(c: EngineCore, requests: list[Any]) -> None:
    for r in requests:
        c.enqueue(c.new_seq(r))


def _order(c: EngineCore) -> list[str]:
    return [s.rid for s in c.waiting]


def test_lpm_puts_a_request_sharing_a_prefix_with_an_earlier_one_last() -> None:
    """In-batch prefix caching: D1 and D2 share 512 uncached tokens (``[7]``), D3 is
    different; each matches 0 cached tokens (<= 32), D2 matches >= 32 tokens of D1 in this
    round: order D1, D3, D2. A cached prefix outranks all: W's prompt cached, C (its prompt)
    goes first."""
    c = core(
        EngineConfig(
            num_blocks=10_000, block_size=1, scheduler=SGLangScheduler(schedule_policy="lpm")
        ),
        FIXED,
    )
    simulate(c, [req("w", 100, 1, hash_ids=[5])])
    _waiting(
        c,
        [
            req("d1", 600, 1, hash_ids=[7, 8]),
            req("d2", 600, 1, hash_ids=[7, 9]),
            req("d3", 600, 1, hash_ids=[10, 11]),
            req("c", 100, 1, hash_ids=[5]),
        ],
    )
    rules = c.scheduler
    assert isinstance(rules, SGLangRules)
    rules._sort_lpm()
    assert _order(c) == ["c", "d1", "d3", "d2"]


def test_lpm_is_fcfs_past_128_waiting_and_without_prefix_caching() -> None:
    lpm = SGLangScheduler(schedule_policy="lpm")
    c = core(EngineConfig(num_blocks=100_000, block_size=1, scheduler=lpm), FIXED)
    simulate(c, [req("w", 100, 1, hash_ids=[5])])
    many = [req(f"r{i:03}", 50, 1) for i in range(128)] + [req("c", 100, 1, hash_ids=[5])]
    _waiting(c, many)
    plan = c.schedule(10**12)
    assert plan is not None and plan.entries[0].rid == "r000"  # 129 waiting: no sort
    off = core(
        EngineConfig(num_blocks=10_000, block_size=1, enable_prefix_caching=False, scheduler=lpm),
        FIXED,
    )
    _waiting(off, [req("a", 50, 1), req("b", 10, 1)])
    plan = off.schedule(0)
    assert plan is not None and [s.rid for s in plan.entries] == ["a", "b"]


def _random_workload(rng: random.Random) -> list[Any]:
    out = []
    t = 0.0
    for i in range(rng.randint(3, 25)):
        t += rng.choice([0.0, 1.0, 7.0, 40.0])
        prompt = rng.randint(1, 300)
        ids = [rng.randint(1, 4) for _ in range(-(-prompt // 64))]
        out.append(req(f"r{i}", prompt, rng.randint(1, 60), hash_ids=ids, trace_block=64))
        out[-1] = attrs.evolve(out[-1], arrival=attrs.evolve(out[-1].arrival, not_before_ms=t))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_random_workloads_keep_the_kv_invariants_and_finish(seed: int) -> None:
    """Tight pools, random page sizes, policies, chunking and mixing: every pass keeps the
    KV cache's invariants (``KVCache.check``), no allocation the rules promised fails, and
    every request finishes."""
    rng = random.Random(seed)
    page = rng.choice([1, 1, 4, 16])
    scheduler = SGLangScheduler(
        page_size=page,
        schedule_policy=rng.choice(["fcfs", "lpm"]),
        chunked_prefill_size=rng.choice([None, 32, 100]),
        enable_mixed_chunk=rng.random() < 0.5,
        init_new_token_ratio=rng.choice([0.05, 0.7, 1.0]),
    )
    config = EngineConfig(
        num_blocks=-(-rng.randint(300, 700) // page),
        block_size=page,
        max_num_seqs=rng.choice([2, 8, 256]),
        max_num_batched_tokens=rng.choice([64, 512]),
        scheduler=scheduler,
    )
    c = core(config, FIXED)
    requests = _random_workload(rng)
    simulate(c, requests, check=True)
    statuses = {c.journal.traces[r.id].terminal_status for r in requests}
    assert statuses <= {"completed", "rejected"}
    assert "completed" in statuses
    for r in requests:
        trace = c.journal.traces[r.id]
        if trace.terminal_status == "completed":
            assert len(trace.token_times_ns) == r.output_length


def _replay(scheduler: SGLangScheduler, stepping: str, seed: int) -> dict[str, bytes]:
    spec = parse_synthetic(
        "count=50 arrivals=poisson(25) input=lognormal(300,150) output=lognormal(300,100)"
    )
    workload = generate_synthetic(spec, seed=seed)
    engine = EngineConfig(
        num_blocks=2000 // scheduler.page_size,
        block_size=scheduler.page_size,
        max_num_batched_tokens=512,
    )
    result = run(
        workload,
        topology=Aggregated(
            workers=2,
            engine=attrs.evolve(engine, scheduler=scheduler),
            timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
        ),
        policy=RoundRobin(),
        load=LoadMode(),
        stepping=stepping,  # type: ignore[arg-type]
    )
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        return {n: (Path(out) / n).read_bytes() for n in ("requests.jsonl", "summary.json")}


@pytest.mark.parametrize(
    ("seed", "scheduler"),
    [
        (1, SGLangScheduler()),
        (2, SGLangScheduler(schedule_policy="lpm", enable_mixed_chunk=True)),
        (3, SGLangScheduler(page_size=16, init_new_token_ratio=0.05)),
    ],
)
def test_macro_and_per_pass_stepping_give_the_same_bytes(
    seed: int, scheduler: SGLangScheduler
) -> None:
    """The scheduler plans no macro-stepped runs: both modes step it one pass at a time and
    must give byte-identical outputs (tight enough to retract)."""
    macro = _replay(scheduler, "macro", seed)
    assert macro == _replay(scheduler, "pass", seed)
    assert json.loads(macro["summary.json"])["preemptions"] > 0  # retractions happened
