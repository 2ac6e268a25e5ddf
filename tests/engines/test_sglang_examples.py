"""Worked examples of SGLang's rules (``SGLangScheduler``), hand computed.

As REFERENCE-engine §9: fixed timing 50/10 ms (``prefill_ms`` when a pass computes a prompt
position, ``decode_ms`` when it samples for a request that had sampled, both for a mixed
pass), T = 512, page size 1 (``block_size = 1``) unless stated; ``num_blocks`` is then the
pool's size in tokens. New-token ratio: init 0.7, min 0.7 * 0.14 = 0.098, decay
(0.7 - 0.098) / 600 = 0.00100333 per decode step.
"""

from __future__ import annotations

from engines import EngineConfig, EventKind, FixedTiming, SGLangRules, SGLangScheduler
from engines._core import EngineCore

from .sim import MS, core, req, simulate, token_ms

FIXED = FixedTiming(prefill_ms=50, decode_ms=10)


def sglang(num_blocks: int = 100_000, *, page: int = 1, **options: object) -> EngineCore:
    scheduler = SGLangScheduler(page_size=page, **options)  # type: ignore[arg-type]
    return core(EngineConfig(num_blocks=num_blocks, block_size=page, scheduler=scheduler), FIXED)


def admissions(c: EngineCore, rid: str) -> list[tuple[float, int]]:
    return [
        (e.time_ns / MS, int(e.get("reused_tokens")))  # type: ignore[call-overload]
        for e in c.journal.events
        if e.request_id == rid and e.kind is EventKind.ADMITTED
    ]


def test_1_prefill_and_decode_batches_run_separately() -> None:
    """A (P 1000, N 10) at 0, B (P 1000, N 10, other ids) at 1 ms.

    Pass [0, 50): A's prefill, token 1 at 50. At 50 a prefill batch can be formed (B), so it
    runs alone (rule 1): [50, 100), B's token 1 at 100; A waits. From 100 both decode:
    tokens at 110, ..., 190 for both. (vLLM's rules mix B's prefill with A's decode step.)
    """
    c = sglang()
    simulate(c, [req("a", 1000, 10), req("b", 1000, 10, arrival_ms=1)], check=True)
    assert token_ms(c, "a") == [50, *range(110, 200, 10)]
    assert token_ms(c, "b") == [100, *range(110, 200, 10)]


def test_1b_mixed_chunking_runs_the_decode_steps_with_the_prefill() -> None:
    """As 1 with ``enable_mixed_chunk``: at 50 A's decode step joins B's prefill batch
    (rule 8), a mixed pass of 50 + 10 = 60 ms: A's token 2 and B's token 1 at 110; then
    both decode: A's last at 190, B's at 200 (REFERENCE-engine §9(c)'s times)."""
    c = sglang(enable_mixed_chunk=True)
    simulate(c, [req("a", 1000, 10), req("b", 1000, 10, arrival_ms=1)], check=True)
    assert token_ms(c, "a") == [50, *range(110, 200, 10)]
    assert token_ms(c, "b") == list(range(110, 210, 10))


def test_2_prefix_matching_at_token_granularity() -> None:
    """A and B both P 1000, ``hash_ids [1, 2]``, B at 1 ms.

    Page size 1: B's match is capped at P - 1 = 999 tokens (``_compute_max_prefix_len``),
    all cached: **999 reused**, one token computed in [50, 100). Page size 64: the match is
    page-aligned, floor(999 / 64) = 15 pages = **960 tokens** (REFERENCE-engine §9(c)).
    """
    c = sglang()
    simulate(c, [req("a", 1000, 10, hash_ids=[1, 2]), req("b", 1000, 10, hash_ids=[1, 2])])
    assert c.journal.traces["b"].reused_input_tokens == 999
    paged = sglang(page=64)
    a = req("a", 1000, 10, hash_ids=[1, 2])
    simulate(paged, [a, req("b", 1000, 10, hash_ids=[1, 2], arrival_ms=1)], check=True)
    assert paged.journal.traces["b"].reused_input_tokens == 960
    assert token_ms(paged, "b")[0] == 100


def test_3_the_new_token_ratio_reserves_the_running_requests_decode_tokens() -> None:
    """A pool of 1000 tokens. A (P 100, N 500) at 0; B (P 100, N n) at 1 ms.

    At 50 A has 100 pages and 1 output token: ``rem_total_tokens`` = 900 free - 0.7 *
    min(500 - 1, 4096) = 900 - 349.3 = 550.7. B needs 100 + n + 1 (page) < 550.7:
    - n = 449: 550 < 550.7, admitted at 50. The ratio under-reserves (A and B need 600 + 549
      > 1000 tokens): from 100 both decode, two pages a step, and after 400 steps (at 4100)
      the 800 free pages are gone: B (tied with A at 401 tokens, last in batch order) is
      retracted; A's last token at 4100 + 99 * 10 = 5090, and B is readmitted then with its
      100 prompt tokens cached;
    - n = 450: 551, refused (NO_TOKEN), and ``batch_is_full`` (A is running) keeps B out
      until A leaves the running batch: A's last token at 50 + 499 * 10 = 5040, B admitted
      then.
    """
    fits = sglang(1000)
    simulate(fits, [req("a", 100, 500), req("b", 100, 449, arrival_ms=1)], check=True)
    assert admissions(fits, "b") == [(50, 0), (5090, 100)]
    assert token_ms(fits, "a")[-1] == 5090
    assert token_ms(fits, "b")[400] == 4100 and fits.journal.traces["b"].num_preemptions == 1
    full = sglang(1000)
    simulate(full, [req("a", 100, 500), req("b", 100, 450, arrival_ms=1)], check=True)
    assert admissions(full, "b") == [(5040, 0)]
    assert token_ms(full, "a")[-1] == 5040


def test_4_chunked_prefill_continues_before_any_decode() -> None:
    """``chunked_prefill_size`` 512. A (P 1000, N 10) at 0, B (P 100, N 10) at 1 ms.

    [0, 50): A's first chunk, 512. At 50 A continues first with 488 (rule 6), leaving
    512 - 488 = 24 of the chunk budget: B's 100 > 24, so B is admitted with a chunk of 24
    and is now the chunked request; A's token 1 at 100. At 100 B's remaining 76 run as a
    prefill batch (A's decode waits): B's token 1 at 150. From 150 both decode: A's tokens
    at 160, ..., 240, B's at 160, ..., 240.
    """
    c = sglang(chunked_prefill_size=512)
    simulate(c, [req("a", 1000, 10), req("b", 100, 10, arrival_ms=1)], check=True)
    assert token_ms(c, "a") == [100, *range(160, 250, 10)]
    assert token_ms(c, "b") == [150, *range(160, 250, 10)]
    chunks = [
        (e.time_ns // MS, e.request_id, e.get("tokens"))
        for e in c.journal.events
        if e.kind is EventKind.PREFILL_CHUNK
    ]
    assert chunks == [(0, "a", 512), (50, "a", 488), (50, "b", 24), (100, "b", 76)]


def test_5_retraction_when_decode_memory_runs_out() -> None:
    """A pool of 541 tokens. A and B (P 100, N 200 each) at 0 and 1 ms.

    At 50: ``rem_total_tokens`` = 441 free - 0.7 * 199 = 301.7; B needs 100 + 200 + 1 =
    301 < 301.7: admitted. Prefill [50, 100), then both decode from 100 with 541 - 200 =
    341 pages free, two a step: after 170 steps (at 1800) each has 171 tokens and 270 pages
    and 1 page is free; the next step needs 2. ``retract_decode``: outputs and prompts tie,
    so the last in batch order, B, is retracted (PREEMPTED with 171 tokens) and queued;
    the ratio becomes (171 + 20 * 1) / (200 + 1) = 0.9502. A decodes on, its last token at
    1800 + 29 * 10 = 2090. B's readmission at 1810 needs 171 + min(200 - 171, 4096) + 1 =
    201 tokens of 270 - 100 (its cached prompt, locked) - 0.9502 * 28 = 143.4: refused, and
    ``batch_is_full`` holds until A leaves at 2090. Then B hits its 100 prompt tokens (its
    output pages were freed, not cached) and recomputes 171 output positions, a decode-priced
    pass: token 172 at 2100, last at 2100 + 28 * 10 = 2380.
    """
    c = sglang(541)
    simulate(c, [req("a", 100, 200), req("b", 100, 200, arrival_ms=1)], check=True)
    assert token_ms(c, "a")[-1] == 2090
    b = token_ms(c, "b")
    assert b[:2] == [100, 110] and b[170] == 1800 and b[171:173] == [2100, 2110]
    assert b[-1] == 2380 and len(b) == 200
    preempted = [
        (e.time_ns // MS, e.get("num_output"))
        for e in c.journal.events
        if e.request_id == "b" and e.kind is EventKind.PREEMPTED
    ]
    assert preempted == [(1800, 171)]
    assert admissions(c, "b") == [(50, 0), (2090, 100)]


def test_5b_the_longer_prompt_is_retracted_first_among_equal_outputs() -> None:
    """As 5 with A's prompt 150 and a pool of 591 tokens (at 50: 441 - 139.3 = 301.7 again):
    at 1800 both have 171 tokens; the key (output, -prompt) puts A (-150) last, so A is
    retracted although B came later. B's last token at 2090; A's at 2380."""
    c = sglang(591)
    simulate(c, [req("a", 150, 200), req("b", 100, 200, arrival_ms=1)], check=True)
    assert token_ms(c, "b")[-1] == 2090
    assert token_ms(c, "a")[-1] == 2380
    assert admissions(c, "a") == [(0, 0), (2090, 150)]


def test_5c_a_request_near_the_pool_size_is_readmitted_with_the_capped_estimate() -> None:
    """A pool of 400 tokens, ``init_new_token_ratio`` 0.05. A (P 100, N 299) at 0: SGLang
    caps its ``max_new_tokens`` to 400 - 100 - 1 - 1 = 298 (``init_req_max_new_tokens``), so
    admitting it alone needs 100 + 298 + 1 = 399 < 400. B (P 50, N 200) at 1 ms: at 50 the
    reservation for A is 0.05 * 297 = 14.85, B needs 251 < 300 - 14.85: admitted. From 100
    both decode with 250 pages free: after 125 steps (at 1350) both have 126 tokens; the
    longer prompt, A, is retracted. B's last token at 1350 + 74 * 10 = 2090. A alone then
    needs 126 (its outputs; its prompt is cached and locked) + (298 - 126) + 1 = 299 <
    400 - 100 = 300: readmitted at 2090 (with the uncapped 299 it would be 300, never
    admitted); token 127 at 2100, the last (299, the output is not cut) at 2100 + 172 * 10 =
    3820."""
    c = sglang(400, init_new_token_ratio=0.05)
    simulate(c, [req("a", 100, 299), req("b", 50, 200, arrival_ms=1)], check=True)
    assert token_ms(c, "b")[-1] == 2090
    a = token_ms(c, "a")
    assert len(a) == 299 and a[125:127] == [1350, 2100] and a[-1] == 3820
    assert admissions(c, "a") == [(0, 0), (2090, 100)]


def test_6_lpm_admits_the_longest_cached_prefix_first() -> None:
    """``chunked_prefill_size`` 512. W (P 1024, ``[1, 2]``, N 1) at 0 prefills in two chunks,
    [0, 50) and [50, 100), and caches 1024 tokens. C1 (P 600, other ids, N 1) at 10 ms and
    C2 (P 1024, ``[1, 2]``, N 1) at 20 ms wait.

    FCFS at 100: C1 first, a chunk of 512, the budget spent; at 150 C1's last 88 and C2
    (1023 cached, 1 computed): both first tokens at 200 (C2's TTFT 180).
    LPM at 100: C2 (1023 cached) before C1 (0): C2 computes 1, C1 takes a chunk of 511;
    C2's token at 150 (TTFT 130); C1's last 89 in [150, 200).
    """
    requests = [
        req("w", 1024, 1, hash_ids=[1, 2]),
        req("c1", 600, 1, arrival_ms=10),
        req("c2", 1024, 1, hash_ids=[1, 2], arrival_ms=20),
    ]
    fcfs = sglang(chunked_prefill_size=512)
    simulate(fcfs, requests, check=True)
    assert token_ms(fcfs, "c1") == [200] and token_ms(fcfs, "c2") == [200]
    lpm = sglang(chunked_prefill_size=512, schedule_policy="lpm")
    simulate(lpm, requests, check=True)
    assert token_ms(lpm, "c2") == [150] and token_ms(lpm, "c1") == [200]
    assert admissions(lpm, "c2") == [(100, 1023)]


def test_7_free_pages_go_before_cached_ones_and_least_recent_leaves_first() -> None:
    """A pool of 30 tokens, every request N 1. A (P 10, ``[1]``) at 0 and B (P 10, ``[2]``)
    at 60 finish and stay cached (20 pages). C (P 15, ``[3]``) at 120 takes the 10 pages
    never used, then evicts 5: the least recently released, A's last five (a request
    releases its pages last first, so a leaf goes before its parent). D (A's prompt) at 200
    finds 5 cached tokens and evicts 5 more for its own: B's last five (B was released
    before C). E (B's prompt) at 300 finds 5. (SGLang evicts a whole radix leaf at a time,
    B's 10 tokens here; see the module's "not modelled".)"""
    c = sglang(30)
    simulate(
        c,
        [
            req("a", 10, 1, hash_ids=[1]),
            req("b", 10, 1, hash_ids=[2], arrival_ms=60),
            req("c", 15, 1, hash_ids=[3], arrival_ms=120),
            req("d", 10, 1, hash_ids=[1], arrival_ms=200),
            req("e", 10, 1, hash_ids=[2], arrival_ms=300),
        ],
        check=True,
    )
    reused = {rid: c.journal.traces[rid].reused_input_tokens for rid in "abcde"}
    assert reused == {"a": 0, "b": 0, "c": 0, "d": 5, "e": 5}


def test_8_max_running_requests_sets_batch_is_full() -> None:
    """``max_num_seqs`` 1: A (P 100, N 3) at 0; B at 1 ms. At 50 the running batch is full:
    B waits until A's last token at 70, then prefills [70, 120)."""
    config = EngineConfig(
        num_blocks=10_000, block_size=1, max_num_seqs=1, scheduler=SGLangScheduler()
    )
    c = core(config, FIXED)
    simulate(c, [req("a", 100, 3), req("b", 100, 3, arrival_ms=1)], check=True)
    assert token_ms(c, "a") == [50, 60, 70]
    assert token_ms(c, "b") == [120, 130, 140]


def test_9_the_ratio_decays_per_decode_step_and_resets_when_idle() -> None:
    """A (P 100, N 11): one prefill pass and 10 decode steps, each decaying the ratio by
    0.602 / 600: 0.7 - 10 * 0.00100333 = 0.68997. B arrives at 1000, after the engine went
    idle at 150: the ratio is back at 0.7 for its admission (and decays again after)."""
    c = sglang()
    simulate(c, [req("a", 100, 11)])
    rules = c.scheduler
    assert isinstance(rules, SGLangRules)
    assert abs(rules.ratio - (0.7 - 10 * 0.602 / 600)) < 1e-12
    c.enqueue(c.new_seq(req("b", 100, 2)))
    c.schedule(1000 * MS)
    assert rules.ratio == 0.7
