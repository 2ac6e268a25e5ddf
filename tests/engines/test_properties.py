"""Properties of whole runs: KV invariants, loop/reference agreement, closed forms."""

from __future__ import annotations

import asyncio
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simclock
from engines import BlockKeyer, Engine, EngineConfig, FixedTiming, Journal, KVEvent
from engines._core import EngineCore, Seq
from engines._timing import LinearTiming
from loadgen import Request

from .asim import drive, run_engines
from .sim import MS, req, simulate


class CheckedCore(EngineCore):
    """Asserts the lookup bound on every prefix lookup."""

    def lookup(self, s: Seq, limit: int) -> list[int]:
        out = super().lookup(s, limit)
        full_blocks = (s.prompt + s.num_output) // self.block_size
        assert limit <= full_blocks
        assert len(out) <= limit
        return out


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[EngineConfig, list[Request]]:
    chunked = draw(st.booleans())
    budget = draw(st.integers(8, 160))
    num_blocks = draw(st.integers(3, 24))
    block_size = draw(st.sampled_from([4, 8, 16]))
    capacity = num_blocks * block_size
    config = EngineConfig(
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_batched_tokens=budget,
        max_num_seqs=draw(st.integers(1, 6)),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.booleans()),
        watermark_fraction=draw(st.sampled_from([0.0, 0.0, 0.1])),
        context_length=draw(st.sampled_from([10**6, 100])),
    )
    trace_block = draw(st.sampled_from([4, 6, 16, 32]))
    requests = []
    for i in range(draw(st.integers(1, 12))):
        prompt = draw(st.integers(1, max(1, min(120, capacity * 3 // 4))))
        output = draw(st.integers(0, 30))
        if not chunked:
            # a preempted request must still fit the budget when it recomputes
            prompt = min(prompt, budget // 2)
            output = min(output, budget - prompt)
        ids = draw(
            st.lists(
                st.integers(0, 2),
                min_size=math.ceil(prompt / trace_block),
                max_size=math.ceil(prompt / trace_block),
            )
        )
        arrival = draw(st.integers(0, 40))
        requests.append(
            req(f"r{i}", prompt, output, hash_ids=ids, arrival_ms=arrival, trace_block=trace_block)
        )
    return config, requests


TIMING = FixedTiming(prefill_ms=5, decode_ms=1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_any_run_keeps_kv_invariants_and_releases_every_block(
    scenario: tuple[EngineConfig, list[Request]],
) -> None:
    config, requests = scenario
    c = CheckedCore(0, config, TIMING, BlockKeyer(), Journal())
    simulate(c, requests, check=True)  # KVCache.check() after every schedule and commit
    c.kv.check()
    assert c.kv.free_count == config.num_blocks
    assert all(r == 0 for r in c.kv.ref)
    assert not c.seqs and not c.running and not c.waiting
    assert c.prefill_outstanding == 0 and c.decode_outstanding == 0
    for r in requests:
        trace = c.journal.traces[r.id]
        assert trace.terminal_status in ("completed", "rejected")
        if trace.terminal_status == "completed":
            expected = min(r.output_length, config.context_length - r.input_length)
            assert len(trace.token_times_ns) == expected
            assert trace.token_times_ns == sorted(set(trace.token_times_ns))
            assert trace.num_preemptions == len(trace.admissions) - 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_engine_on_the_virtual_loop_matches_the_synchronous_reference(
    scenario: tuple[EngineConfig, list[Request]],
) -> None:
    config, requests = scenario
    c = EngineCore(0, config, TIMING, BlockKeyer(), Journal())
    simulate(c, requests)
    e = Engine(0, config, TIMING, keyer=BlockKeyer(), journal=Journal())
    run_engines([e], requests)
    for r in requests:
        want, got = c.journal.traces[r.id], e.journal.traces[r.id]
        assert got.token_times_ns == want.token_times_ns
        assert got.admissions == want.admissions
        assert (got.terminal_ns, got.terminal_status) == (want.terminal_ns, want.terminal_status)


def single(
    config: EngineConfig, timing: FixedTiming | LinearTiming, prompt: int, output: int
) -> Journal:
    journal = Journal()
    e = Engine(0, config, timing, keyer=BlockKeyer(), journal=journal)
    run_engines([e], [req("a", prompt, output)])
    return journal


closed_form_cases = st.tuples(
    st.integers(1, 5000),  # P
    st.integers(0, 300),  # N
    st.integers(16, 4096),  # budget
    st.sampled_from([16, 64]),  # E
)


@settings(max_examples=60, deadline=None)
@given(case=closed_form_cases, prefill_ms=st.integers(1, 100), decode_ms=st.integers(1, 50))
def test_single_request_closed_form_under_fixed_timing(
    case: tuple[int, int, int, int], prefill_ms: int, decode_ms: int
) -> None:
    prompt, output, budget, block = case
    config = EngineConfig(
        num_blocks=(prompt + output) // block + 2, block_size=block, max_num_batched_tokens=budget
    )
    trace = single(config, FixedTiming(prefill_ms=prefill_ms, decode_ms=decode_ms), prompt, output)
    trace_a = trace.traces["a"]
    chunks = math.ceil(prompt / budget)
    ttft = chunks * prefill_ms
    if output == 0:
        assert trace_a.token_times_ns == []
        assert trace_a.terminal_ns == ttft * MS
        return
    assert trace_a.token_times_ns[0] == ttft * MS
    assert trace_a.terminal_ns == (ttft + (output - 1) * decode_ms) * MS
    assert len(trace_a.token_times_ns) == output


@settings(max_examples=60, deadline=None)
@given(
    case=closed_form_cases,
    c0=st.floats(0, 20),
    c_p=st.floats(0, 0.1),
    c_d=st.floats(0, 5),
    c_kv=st.floats(0, 0.001),
)
def test_single_request_closed_form_under_linear_timing(
    case: tuple[int, int, int, int], c0: float, c_p: float, c_d: float, c_kv: float
) -> None:
    prompt, output, budget, block = case
    config = EngineConfig(
        num_blocks=(prompt + output) // block + 2, block_size=block, max_num_batched_tokens=budget
    )
    timing = LinearTiming(c0=c0, c_p=c_p, c_d=c_d, c_kv=c_kv)
    trace = single(config, timing, prompt, output).traces["a"]
    k = math.ceil(prompt / budget)
    # chunk i reads min(i*B, P) positions; the decode after token j reads P + j positions
    ttft_ms = k * c0 + c_p * prompt + c_kv * (budget * k * (k - 1) / 2 + prompt)
    m = max(output - 1, 0)
    e2e_ms = ttft_ms + m * (c0 + c_d) + c_kv * (m * prompt + m * (m + 1) / 2)
    passes = k + m
    tolerance_ns = passes  # each pass is rounded to the nearest ns
    if output == 0:
        assert abs(trace.terminal_ns - ttft_ms * MS) <= tolerance_ns  # type: ignore[operator]
        return
    assert abs(trace.token_times_ns[0] - ttft_ms * MS) <= tolerance_ns
    assert abs(trace.token_times_ns[-1] - e2e_ms * MS) <= tolerance_ns
    assert abs(trace.token_times_ns[-1] - e2e_ms * MS) < 1000  # the microsecond


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_a_router_index_fed_by_kv_events_mirrors_the_cache_at_pass_ends(
    scenario: tuple[EngineConfig, list[Request]],
) -> None:
    config, requests = scenario
    e = Engine(0, config, TIMING, keyer=BlockKeyer(), journal=Journal())
    index: set[int] = set()
    seen: set[int] = set()

    def published(keys: set[int]) -> set[int]:
        return {k for k in keys if e.view.prefix_overlap([k]) == 1}

    def apply(event: KVEvent) -> None:
        for key in event.block_keys:
            if event.kind == "stored":
                assert key not in index
                index.add(key)
            else:
                index.remove(key)
        seen.update(event.block_keys)

    e.subscribe_kv(apply)
    run_engines([e], requests)
    assert index == set(e._core.kv.cache) == published(seen)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=scenarios(),
    instants_ms=st.lists(st.integers(min_value=0, max_value=3_000), min_size=1, max_size=12),
)
def test_prefix_overlap_at_any_instant_agrees_with_the_kv_events_told_so_far(
    scenario: tuple[EngineConfig, list[Request]], instants_ms: list[int]
) -> None:
    """A view computes "last published" from the cache and the changes still in flight; an
    index kept from the events themselves is the reference."""
    config, requests = scenario
    e = Engine(0, config, TIMING, keyer=BlockKeyer(), journal=Journal())
    index: set[int] = set()
    seen: set[int] = set()

    def apply(event: KVEvent) -> None:
        for key in event.block_keys:
            (index.add if event.kind == "stored" else index.remove)(key)
        seen.update(event.block_keys)

    e.subscribe_kv(apply)
    checked: list[int] = []

    async def sample() -> None:
        for t in sorted(set(instants_ms)):
            await simclock.sleep_until_ns(t * MS, waiter="sampler")
            keys = seen | set(e._core.kv.cache)
            shown = {k for k in keys if e.view.prefix_overlap([k]) == 1}
            assert shown == index
            checked.append(t)

    async def main() -> None:
        sampler = asyncio.get_running_loop().create_task(sample())
        await drive([e], requests)
        await sampler

    simclock.run(main())
    assert checked == sorted(set(instants_ms))
