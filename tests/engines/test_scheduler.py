"""The per-pass scheduler (REFERENCE-engine §3, §4.6-§4.8) on the synchronous core."""

from __future__ import annotations

from engines import EngineConfig, EventKind, FixedTiming, Journal, VLLMScheduler
from engines._core import EngineCore

from .sim import MS, core, req, simulate, token_ms

FIXED = FixedTiming(prefill_ms=50, decode_ms=10)


def make(**options: object) -> EngineCore:
    return core(EngineConfig(**{"num_blocks": 1000, **options}), FIXED)  # type: ignore[arg-type]


def test_running_requests_are_served_before_waiting_ones() -> None:
    c = make(max_num_batched_tokens=100)
    simulate(c, [req("a", 150, 3), req("b", 10, 1, arrival_ms=10)])
    # pass 2 at 50: a's remaining 50 first, then b's 10 fits the budget
    assert c.journal.traces["b"].first_admit_ns == 50 * MS
    assert token_ms(c, "a")[0] == 100 and token_ms(c, "b") == [100]


def test_budget_caps_the_pass_and_decodes_cost_one_token() -> None:
    c = make(max_num_batched_tokens=3)
    simulate(c, [req(f"r{i}", 1, 3) for i in range(4)])
    # pass 1: r0..r2 prefill (1 token each); their decodes then use the whole budget, so r3
    # waits until they finish at 70
    admits = [c.journal.traces[f"r{i}"].first_admit_ns for i in range(4)]
    assert admits == [0, 0, 0, 70 * MS]


def test_max_num_seqs_caps_the_running_list() -> None:
    c = make(max_num_seqs=2)
    simulate(c, [req("a", 10, 3), req("b", 10, 3), req("c", 10, 3)])
    tc = c.journal.traces["c"]
    assert tc.first_admit_ns == c.journal.traces["a"].terminal_ns


def test_disabled_chunked_prefill_waits_for_a_budget_that_fits_the_whole_prompt() -> None:
    c = make(enable_chunked_prefill=False, max_num_batched_tokens=100)
    simulate(c, [req("a", 60, 3), req("b", 60, 1), req("c", 10, 1)])
    traces = c.journal.traces
    # b does not fit next to a in pass 1 and blocks c behind it (head-of-line)
    assert traces["b"].first_admit_ns == 50 * MS
    assert traces["c"].first_admit_ns == 50 * MS
    chunks = [e.get("tokens") for e in c.journal.events if e.kind is EventKind.PREFILL_CHUNK]
    assert chunks == [60, 60, 10]


def test_enabled_chunked_prefill_fills_the_budget() -> None:
    c = make(max_num_batched_tokens=100)
    simulate(c, [req("a", 60, 3), req("b", 60, 1)])
    chunks = [
        (e.request_id, e.get("tokens"))
        for e in c.journal.events
        if e.kind is EventKind.PREFILL_CHUNK
    ]
    assert chunks == [("a", 60), ("b", 40), ("b", 20)]


def test_preemption_evicts_the_most_recently_admitted_and_blocks_admissions() -> None:
    # 6 blocks of 4: a, b, c take 2 each at 0; a's 3rd block (position 8, pass at 50)
    # preempts c, a's 4th (position 12, pass at 90) preempts b
    c = core(EngineConfig(num_blocks=6, block_size=4), FIXED)
    simulate(c, [req("a", 8, 9), req("b", 8, 9), req("c", 8, 9)], check=True)
    preempted = [
        (e.request_id, e.time_ns // MS) for e in c.journal.events if e.kind is EventKind.PREEMPTED
    ]
    assert preempted == [("c", 50), ("b", 90)]
    for rid in "abc":
        assert c.journal.traces[rid].terminal_status == "completed"
    assert [a.at_ns // MS for a in c.journal.traces["b"].admissions] == [0, 130]


def test_several_victims_return_to_the_waiting_front_in_admission_order() -> None:
    c = core(EngineConfig(num_blocks=4, block_size=4, max_num_batched_tokens=64), FIXED)
    for rid in ("a", "b", "c", "d"):
        c.enqueue(c.new_seq(req(rid, 4, 10)))
    plan = c.schedule(0)
    assert plan is not None
    c.commit(plan)
    c.enqueue(c.new_seq(req("e", 1, 1)))
    # every request needs a 2nd block: a's allocation preempts d, b's preempts c
    plan = c.schedule(plan.end_ns)
    assert plan is not None
    assert [s.rid for s in c.running] == ["a", "b"]
    assert [s.rid for s in c.waiting] == ["c", "d", "e"]
    assert [s.rid for s in plan.entries] == ["a", "b"]  # no admission after a preemption


def test_watermark_only_gates_admissions_next_to_scheduled_work() -> None:
    # 10 blocks, watermark 0.3 -> 3 blocks kept free when something is already scheduled
    c = core(EngineConfig(num_blocks=10, block_size=4, watermark_fraction=0.3), FIXED)
    simulate(c, [req("a", 16, 1), req("b", 16, 1), req("c", 36, 1, arrival_ms=100)])
    traces = c.journal.traces
    assert traces["a"].first_admit_ns == 0
    assert traces["b"].first_admit_ns == 50 * MS  # 4 + 4 + 3 > 10 at time 0
    assert traces["c"].first_admit_ns == 100 * MS  # alone: the watermark does not apply


def test_output_length_zero_finishes_at_prompt_end_without_a_token() -> None:
    c = make()
    simulate(c, [req("a", 100, 0)])
    trace = c.journal.traces["a"]
    assert trace.token_times_ns == [] and trace.terminal_ns == 50 * MS
    assert trace.terminal_status == "completed"


def test_prefix_caching_disabled_never_reuses() -> None:
    c = make(enable_prefix_caching=False)
    simulate(c, [req("a", 1000, 2, hash_ids=[1, 2]), req("b", 1000, 2, hash_ids=[1, 2])])
    assert c.journal.traces["b"].reused_input_tokens == 0
    assert c.kv.cache == {}


def test_a_preempted_request_can_hit_its_own_output_blocks() -> None:
    # b is preempted with its prompt block and two output blocks keyed; a takes only the
    # blocks nearest the queue head, so b's readmission reuses 12 positions (3 blocks)
    c = core(EngineConfig(num_blocks=7, block_size=4), FIXED)
    simulate(c, [req("a", 4, 12), req("b", 4, 16, arrival_ms=1)], check=True)
    tb = c.journal.traces["b"]
    assert tb.num_preemptions == 1
    assert [(a.at_ns // MS, a.reused_tokens) for a in tb.admissions] == [(50, 0), (210, 12)]


def test_every_transition_is_a_typed_event_with_virtual_time() -> None:
    journal = Journal()
    c = core(EngineConfig(num_blocks=20), FIXED, journal=journal)
    simulate(c, [req("a", 600, 200), req("b", 600, 200, arrival_ms=1)])
    kinds_b = [e.kind for e in journal.events if e.request_id == "b"]
    assert kinds_b[:5] == [
        EventKind.ARRIVED,
        EventKind.QUEUED,
        EventKind.ADMITTED,
        EventKind.PREFILL_CHUNK,
        EventKind.FIRST_TOKEN,
    ]
    assert kinds_b.count(EventKind.PREEMPTED) == 1
    assert kinds_b.count(EventKind.ADMITTED) == 2
    assert kinds_b.count(EventKind.FIRST_TOKEN) == 1
    assert kinds_b.count(EventKind.TOKEN) == 199
    assert kinds_b[-1] is EventKind.FINISHED
    times = [e.time_ns for e in journal.events]
    assert times == sorted(times)
    readmit = [e for e in journal.events if e.kind is EventKind.ADMITTED and e.request_id == "b"]
    assert readmit[1].detail == (
        ("reused_tokens", 448),
        ("is_readmission", True),
        ("role", "aggregated"),
    )


def test_token_events_off_still_fills_traces() -> None:
    journal = Journal(keep_events=False, token_events=False)
    c = core(EngineConfig(num_blocks=100), FIXED, journal=journal)
    simulate(c, [req("a", 100, 5)])
    assert token_ms(c, "a") == [50, 60, 70, 80, 90]
    assert journal.events == []


def test_whole_prompt_admission_waits_until_the_whole_prompt_fits_in_free_blocks() -> None:
    """E = 16, 8 blocks, a budget of 32. ``a`` (32 + 40 tokens) prefills in pass 1 and decodes
    from 50 to 440, holding 3 to 5 blocks from its first decode step on. ``b`` (96 tokens, 6
    blocks) arrives at 10. By default its first chunk (2 blocks) is admitted at 50 and the two
    then preempt ``b`` twice; admitting only a prompt that fits whole, ``b`` waits for ``a``'s
    blocks (free at 440) and prefills in three passes of 32 tokens: first token at 590."""
    plain = make(num_blocks=8, block_size=16, max_num_batched_tokens=32)
    whole = make(
        num_blocks=8,
        block_size=16,
        max_num_batched_tokens=32,
        scheduler=VLLMScheduler(admit_whole_prompt=True),
    )
    for c in (plain, whole):
        simulate(c, [req("a", 32, 40), req("b", 96, 2, arrival_ms=10)])
    assert plain.journal.traces["b"].first_admit_ns == 50 * MS
    assert plain.journal.traces["b"].num_preemptions == 2
    traces = whole.journal.traces
    assert traces["a"].terminal_ns == 440 * MS
    assert traces["b"].first_admit_ns == 440 * MS
    assert traces["b"].num_preemptions == 0
    assert token_ms(whole, "b") == [590, 600]
