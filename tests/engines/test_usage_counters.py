"""An engine's usage counters: entries summed over its passes (the mean batch size), the
most requests running at once and the most KV blocks referenced at once."""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from engines._kv import KVCache

from .sim import core, req, simulate


def test_two_requests_sharing_passes_count_their_entries_and_peaks() -> None:
    # A: 32 prompt tokens (2 blocks of 16), 3 output tokens; B: 16 (1 block), 2 outputs.
    # Pass 1 prefills both (2 entries, first tokens); pass 2 decodes both (positions 32 and
    # 16 start a block each: 3 + 2 blocks held; B finishes); pass 3 decodes A (1 entry).
    c = core(
        EngineConfig(block_size=16, num_blocks=100, enable_prefix_caching=False),
        FixedTiming(prefill_ms=5.0, decode_ms=1.0),
    )
    simulate(c, [req("a", 32, 3), req("b", 16, 2)])
    assert c.passes == 3
    assert c.entries == 5
    assert c.peak_running == 2
    assert c.kv.num_blocks - c.kv.min_free == 5
    assert c.kv.free_count == 100  # everything released at the end


def test_the_peak_is_the_fewest_free_blocks_whatever_the_path_that_took_them() -> None:
    kv = KVCache(10, 16)
    blocks: list[int] = []
    assert kv.allocate(blocks, [], 4)
    assert kv.take_one(blocks)
    assert kv.min_free == 5
    kv.release(blocks)
    assert (kv.free_count, kv.min_free) == (10, 5)
    again: list[int] = []
    assert kv.allocate(again, [], 7)  # past the untouched blocks into the queue
    assert kv.min_free == 3
    assert not kv.allocate(again, [], 4)  # a refused allocation changes nothing
    assert kv.min_free == 3
