"""The prefix cache's spans (chains cached at once) behave as one dictionary entry per key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines._kv import KVCache
from engines._prefix_cache import PrefixCache
from simclock import InternalError


def _walk(model: dict[int, int], keys: list[int], limit: int) -> list[int]:
    out = []
    for k in keys[:limit]:
        if k not in model:
            break
        out.append(model[k])
    return out


cache_ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["chain", "chain", "gappy", "chunks", "one", "remove", "replace", "probe", "evict"]
        ),
        st.integers(0, 60),  # a key (or the first key of a chain)
        st.integers(1, 9),  # a length
        st.integers(0, 3),  # where blocks start / which key
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(script=cache_ops)
def test_spans_read_as_a_dictionary_of_every_key(script: list[tuple[str, int, int, int]]) -> None:
    cache = PrefixCache()
    model: dict[int, int] = {}
    next_block = 0
    for op, key, length, choice in script:
        if op in ("chain", "gappy"):
            step = 2 if op == "gappy" else 1
            keys = [k for k in range(key, key + length * step, step) if k not in model]
            if not keys:
                continue
            first = next_block + choice  # sometimes right after the last chain's blocks
            blocks = list(range(first, first + len(keys)))
            if choice == 3:
                blocks.reverse()  # blocks not one after the other: no span
            next_block = first + len(keys)
            assert not cache.meets_chain(keys) and not cache.meets(keys)
            spanned = cache.put_chain(keys, blocks)
            consecutive = keys == list(range(keys[0], keys[0] + len(keys)))
            assert spanned == (len(keys) > 1 and consecutive and choice != 3)
            model.update(zip(keys, blocks, strict=True))
        elif op == "chunks":
            # consecutive keys in stretches of consecutive blocks (a prompt computed in
            # chunks while other requests take blocks in between); choice 3: a first
            # stretch of one block (the block the chunk before started)
            keys = list(range(key, key + length * 3))
            if any(k in model for k in keys):
                continue
            blocks = []
            b = next_block
            for i in range(len(keys)):
                if i and (i % (choice + 2) == 0 or (choice == 3 and i == 1)):
                    b += 1 + choice
                blocks.append(b)
                b += 1
            next_block = b
            assert not cache.meets_chain(keys)
            one_span = blocks == list(range(blocks[0], blocks[0] + len(blocks)))
            assert cache.put_chain(keys, blocks) == one_span
            model.update(zip(keys, blocks, strict=True))
        elif op == "one":
            if key in model:
                assert cache.meets([key]) and cache.meets_chain([key])
                continue
            cache.put(key, next_block)
            model[key] = next_block
            next_block += 1
        elif op in ("remove", "replace") and model:
            victim = sorted(model)[(key + choice) % len(model)]
            if op == "remove":
                cache.remove(victim)
                del model[victim]
            else:
                cache.replace(victim, next_block)
                model[victim] = next_block
                next_block += 1
        elif op == "evict" and model:
            # several keys at once, as the free queue evicts them: a stretch of keys in order,
            # last first (a chain freed last first), or interleaved
            cached = sorted(model)
            at = key % len(cached)
            victims = cached[at : at + length]
            if choice % 2:
                victims.reverse()
            if choice == 2:
                victims = victims[::2] + victims[1::2]
            cache.remove_many(victims)
            for victim in victims:
                del model[victim]
        elif op == "probe":
            keys = list(range(key, key + length * 3))
            # keys that increase with gaps (a chain leaving a span before its end)
            gappy = [k for i, k in enumerate(keys) if (i + 1) % (choice + 2)]
            for limit in (0, 1, length, len(keys)):
                walked = _walk(model, keys, limit)
                assert cache.lookup_prefix(keys, limit) == walked
                assert cache.lookup_prefix(keys, limit, chain=True) == walked
                limit = min(limit, len(gappy))
                walked = _walk(model, gappy, limit)
                assert cache.lookup_prefix(gappy, limit) == walked
                assert cache.lookup_prefix(gappy, limit, chain=True) == walked
            assert cache.meets_chain(keys) == any(k in model for k in keys)
        cache.check()
        assert dict(cache) == model
        assert len(cache) == len(model)
        assert all(cache.get(k) == b and k in cache for k, b in model.items())
        probe = sorted(model)
        assert cache.lookup_prefix(probe, len(probe)) == _walk(model, probe, len(probe))
        assert cache.lookup_prefix(probe, len(probe), chain=True) == _walk(model, probe, len(probe))
    assert "a string" not in cache and cache.get(-1) is None


def test_a_chain_that_goes_on_from_the_span_before_it_joins_it() -> None:
    cache = PrefixCache()
    assert cache.put_chain([10, 11, 12], [5, 6, 7])
    assert cache.put_chain([13, 14], [8, 9])
    assert (cache.starts, cache.firsts, cache.lengths) == ([10], [5], [5])
    cache.remove(12)
    assert (cache.starts, cache.firsts, cache.lengths) == ([10, 13], [5, 8], [2, 2])
    assert cache.lookup_prefix([10, 11, 12, 13], 4) == [5, 6]
    assert cache.lookup_prefix([13, 14, 15], 3) == [8, 9]
    cache.replace(13, 99)
    assert dict(cache) == {13: 99, 10: 5, 11: 6, 14: 9}


def test_removing_a_key_not_cached_is_an_internal_error() -> None:
    cache = PrefixCache()
    cache.put_chain([1, 2], [0, 1])
    with pytest.raises(InternalError, match="key 5 is not cached"):
        cache.remove(5)


def test_check_finds_a_key_both_alone_and_in_a_span() -> None:
    cache = PrefixCache()
    cache.put_chain([1, 2, 3], [0, 1, 2])
    cache.single[2] = 7
    with pytest.raises(InternalError, match="both alone and in a span"):
        cache.check()


# -- in the KV pool, under eviction ---------------------------------------------------------

pool_ops = st.lists(
    st.tuples(
        st.sampled_from(["new", "new", "turn", "free", "free", "twin"]),
        st.integers(0, 4),  # owner
        st.integers(1, 8),  # blocks
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(2, 30), script=pool_ops, empty_first=st.booleans())
def test_chains_registered_at_once_are_keys_registered_one_by_one(
    num_blocks: int, script: list[tuple[str, int, int]], empty_first: bool
) -> None:
    """Sequences taking fresh and hit blocks, releasing them and evicting each other's: a
    pool that registers each sequence's new blocks as a chain (spans) and one that registers
    them key by key hold the same state, and look up the same blocks, at every step."""
    pools = [KVCache(num_blocks, 4, empty_first=empty_first) for _ in range(2)]
    owners: list[dict[int, list[int]]] = [{}, {}]
    chains: dict[int, list[int]] = {}  # owner -> the keys of its blocks
    last_key = 0
    for op, owner, n in script:
        for held in owners:
            held.setdefault(owner, [])
        if op in ("new", "turn", "twin"):
            if owners[0][owner]:
                continue
            if op == "new":
                keys = list(range(last_key + 1, last_key + 1 + n))
                last_key += n
            else:
                # the next turn of a conversation (an earlier owner's keys, then new ones)
                # or its twin (the same keys again)
                donor = chains.get((owner + 1) % 5, [])
                keys = list(donor)
                if op == "turn":
                    keys += range(last_key + 1, last_key + 1 + n)
                    last_key += n
                if not keys:
                    continue
            for i, (pool, held) in enumerate(zip(pools, owners, strict=True)):
                hits = pool.lookup_prefix(keys, len(keys)) if op == "turn" else []
                assert hits == pool.lookup(keys)[: len(hits)]
                if op == "turn":
                    assert pool.lookup_prefix(keys, len(keys), chain=True) == hits
                need = len(keys) - len(hits)
                if not pool.can_allocate(hits, need):
                    break
                blocks: list[int] = []
                assert pool.allocate(blocks, hits, need)
                fresh = keys[len(hits) :]
                if fresh:
                    if i == 0:
                        pool.register_chain(blocks[len(hits) :], fresh)
                    else:
                        for b, k in zip(blocks[len(hits) :], fresh, strict=True):
                            pool.register(b, k)
                held[owner] = blocks
            else:
                chains[owner] = keys
        elif op == "free":
            for pool, held in zip(pools, owners, strict=True):
                pool.release(held[owner])
                held[owner] = []
        for pool in pools:
            pool.check()
        a, b = pools
        assert dict(a.cache) == dict(b.cache)
        assert a.twins == b.twins
        assert a.key == b.key and a.ref == b.ref
        assert a.free_blocks() == b.free_blocks()
        assert a.transitions == b.transitions
        for keys in chains.values():
            assert a.lookup_prefix(keys, len(keys)) == b.lookup_prefix(keys, len(keys))
