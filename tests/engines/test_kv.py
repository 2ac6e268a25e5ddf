"""The KV block manager: free queue, reference counts, caching, eviction (REFERENCE-engine §4)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engines import KVCache
from engines._keys import OUTPUT_KEY_BASE
from simclock import InternalError


def test_initial_free_queue_is_index_order() -> None:
    kv = KVCache(5, 4)
    assert kv.free_blocks() == [0, 1, 2, 3, 4]
    assert kv.free_count == 5


def test_allocate_takes_from_head_and_release_appends_tail_last_block_first() -> None:
    kv = KVCache(6, 4)
    a: list[int] = []
    assert kv.allocate(a, [], 3)
    assert a == [0, 1, 2]
    assert kv.free_blocks() == [3, 4, 5]
    kv.release(a)
    # within one release, the sequence's tail block goes to the queue first
    assert kv.free_blocks() == [3, 4, 5, 2, 1, 0]


def test_failed_allocation_has_no_side_effects() -> None:
    kv = KVCache(4, 4)
    a: list[int] = []
    assert kv.allocate(a, [], 2)
    kv.register(a[0], 11)
    kv.release(a)
    before = (
        kv.free_blocks(),
        list(kv.ref),
        list(kv.key),
        dict(kv.cache),
        dict(kv.twins),
        list(kv.transitions),
    )
    b: list[int] = []
    assert not kv.allocate(b, [], 5)
    assert not kv.allocate(b, [a[0]], 4)  # 4 fresh + 1 evictable hit > 4 free
    assert b == []
    after = (
        kv.free_blocks(),
        list(kv.ref),
        list(kv.key),
        dict(kv.cache),
        dict(kv.twins),
        list(kv.transitions),
    )
    assert after == before


def test_watermark_reserve_gates_allocation() -> None:
    kv = KVCache(10, 4)
    a: list[int] = []
    assert not kv.allocate(a, [], 9, reserve=2)
    assert kv.allocate(a, [], 8, reserve=2)
    assert kv.free_count == 2


def test_taking_a_cached_free_block_evicts_its_key() -> None:
    kv = KVCache(2, 4)
    a: list[int] = []
    kv.allocate(a, [], 1)
    kv.register(a[0], 7)
    kv.release(a)
    assert kv.lookup([7]) == [0]
    b: list[int] = []
    kv.allocate(b, [], 2)  # head is block 1 (never used), then block 0 (cached)
    assert b == [1, 0]
    assert kv.lookup([7]) == []
    assert kv.transitions == [(True, 7), (False, 7)]
    assert kv.key[0] == 0


def test_eviction_is_lru_by_release_time() -> None:
    kv = KVCache(4, 4)
    a: list[int] = []
    b: list[int] = []
    kv.allocate(a, [], 2)
    kv.allocate(b, [], 2)
    for block, key in zip(a + b, (1, 2, 3, 4), strict=True):
        kv.register(block, key)
    kv.release(b)  # released first -> evicted first, tail block (key 4) before key 3
    kv.release(a)
    c: list[int] = []
    kv.allocate(c, [], 1)
    assert kv.key[c[0]] == 0 and c == [3]
    assert kv.lookup([1, 2]) == [0, 1]
    assert kv.lookup([3]) == [2]
    assert kv.lookup([4]) == []


def test_hit_on_a_free_cached_block_removes_it_from_the_middle_of_the_queue() -> None:
    kv = KVCache(4, 4)
    a: list[int] = []
    kv.allocate(a, [], 3)
    kv.register(a[1], 9)
    kv.release(a)
    assert kv.free_blocks() == [3, 2, 1, 0]
    b: list[int] = []
    assert kv.allocate(b, kv.lookup([9]), 1)
    assert b == [1, 3]
    assert kv.free_blocks() == [2, 0]
    assert kv.ref[1] == 1
    kv.check()


def test_hit_on_a_referenced_block_shares_it() -> None:
    kv = KVCache(4, 4)
    a: list[int] = []
    kv.allocate(a, [], 1)
    kv.register(a[0], 5)
    b: list[int] = []
    assert kv.allocate(b, kv.lookup([5]), 0)
    assert b == a and kv.ref[a[0]] == 2
    kv.release(a)
    assert kv.ref[a[0]] == 1 and kv.free_count == 3
    kv.release(b)
    assert kv.free_count == 4
    kv.check()


def test_twin_copies_stay_hittable_while_any_copy_is_cached() -> None:
    kv = KVCache(3, 4)
    a: list[int] = []
    b: list[int] = []
    kv.allocate(a, [], 1)
    kv.allocate(b, [], 1)
    kv.register(a[0], 8)
    kv.register(b[0], 8)  # computed independently: a twin
    assert kv.cache[8] == 0 and kv.twins[8] == [1]
    assert kv.lookup([8]) == [0]  # earliest-registered copy
    assert kv.transitions == [(True, 8)]
    kv.release(a)
    c: list[int] = []
    kv.allocate(c, [], 2)  # takes block 2, then evicts block 0 (copy 1)
    assert kv.lookup([8]) == [1]
    assert kv.transitions == [(True, 8)]
    kv.check()


def test_lookup_stops_at_first_missing_key() -> None:
    kv = KVCache(4, 4)
    a: list[int] = []
    kv.allocate(a, [], 3)
    kv.register(a[0], 1)
    kv.register(a[2], 3)
    assert kv.lookup([1, 2, 3]) == [a[0]]


def test_release_below_zero_raises_internal_error() -> None:
    kv = KVCache(2, 4)
    with pytest.raises(InternalError, match=r"^block 1 released with reference count 0$"):
        kv.release([1])


# -- properties ---------------------------------------------------------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "grow", "free", "share"]),
        st.integers(0, 5),  # owner
        st.integers(0, 6),  # amount / key choice
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(1, 12), script=ops, empty_first=st.booleans())
def test_random_operations_keep_every_invariant(
    num_blocks: int, script: list[tuple[str, int, int]], empty_first: bool
) -> None:
    kv = KVCache(num_blocks, 4, empty_first=empty_first)
    owners: dict[int, list[int]] = {}
    next_key = 1
    for op, owner, amount in script:
        blocks = owners.setdefault(owner, [])
        if op in ("alloc", "grow"):
            before = kv.free_count
            ok = kv.allocate(blocks, [], amount)
            assert ok == (amount <= before)
            if ok and op == "grow":
                for b in blocks:
                    if kv.key[b] == 0:
                        kv.register(b, next_key)
                        next_key += 1
        elif op == "share":
            keys = sorted(kv.cache)[: amount + 1]
            hits = kv.lookup(keys)
            assert len(hits) <= len(keys)
            if kv.can_allocate(hits, 0):
                assert kv.allocate(blocks, hits, 0)
        else:
            cached_before = dict(kv.cache)
            kv.release(blocks)
            owners[owner] = []
            assert kv.cache == cached_before  # a release evicts nothing
        kv.check()
        assert all(kv.key[b] == 0 for b in kv.empty or ())  # empty blocks cache nothing
        assert all(r >= 0 for r in kv.ref)
        referenced = sum(len(v) for v in owners.values())
        assert sum(kv.ref) == referenced
    for blocks in owners.values():
        kv.release(blocks)
    kv.check()
    assert kv.free_count == num_blocks
    assert all(r == 0 for r in kv.ref)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 40),  # first key of the run (prompt keys), or output run
            st.integers(1, 12),  # run length
            st.booleans(),  # output keys
        ),
        max_size=30,
    )
)
def test_registering_a_chain_is_registering_each_key(steps: list[tuple[int, int, bool]]) -> None:
    """``register_chain`` (increasing keys, some of them cached already) leaves the cache as
    ``register`` of each key does: the same first copies, twins, keys and transitions."""
    chained = KVCache(400, 4)
    one_by_one = KVCache(400, 4)
    for first, length, output in steps:
        base = OUTPUT_KEY_BASE if output else 1
        keys = list(range(base + first, base + first + length))
        if chained.free_count < length:
            break
        a: list[int] = []
        b: list[int] = []
        assert chained.allocate(a, [], length) and one_by_one.allocate(b, [], length)
        assert a == b
        chained.register_chain(a, keys)
        for block, key in zip(b, keys, strict=True):
            one_by_one.register(block, key)
        chained.check()
        assert chained.cache == one_by_one.cache
        assert chained.twins == one_by_one.twins
        assert chained.key == one_by_one.key
        assert chained.transitions == one_by_one.transitions


@pytest.mark.parametrize("eager_links", [False, True])
def test_check_reports_a_cycle_in_the_free_queue_instead_of_walking_it_forever(
    eager_links: bool,
) -> None:
    kv = KVCache(8, 4, eager_links=eager_links)
    blocks: list[int] = []
    assert kv.allocate(blocks, [], 3)
    kv.release(blocks)
    kv._link_runs()  # the released run, linked (a no-op with eager links)
    kv.check()
    kv._next[blocks[0]] = blocks[2]  # the queue's last block points back into the queue
    with pytest.raises(InternalError, match="cycle"):
        kv.check()


def test_with_empty_first_a_released_block_holding_nothing_is_taken_before_a_cached_one() -> None:
    """4 blocks. ``a`` takes 0, 1 (keys 1, 2) and ``b`` takes 2 (no key); ``a`` is released,
    then ``b``. vLLM's queue is then 1, 0, 2 after the never-used block 3, so taking two blocks
    evicts key 2 (block 1); taking blocks that cache nothing first, the second block is 2 and
    nothing is evicted."""
    plain = KVCache(4, 4)
    empty = KVCache(4, 4, empty_first=True)
    for kv in (plain, empty):
        a: list[int] = []
        b: list[int] = []
        assert kv.allocate(a, [], 2) and kv.allocate(b, [], 1)
        kv.register(0, 1)
        kv.register(1, 2)
        kv.release(a)
        kv.release(b)
        kv.check()
    assert plain.free_blocks() == [3, 1, 0, 2]
    assert empty.free_blocks() == [3, 2, 1, 0]
    taken = {}
    for name, kv in (("plain", plain), ("empty", empty)):
        got: list[int] = []
        assert kv.allocate(got, [], 2)
        kv.check()
        taken[name] = (got, dict(kv.cache))
    assert taken["plain"] == ([3, 1], {1: 0})
    assert taken["empty"] == ([3, 2], {1: 0, 2: 1})


# -- queued runs against eager links --------------------------------------------------------

run_ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["alloc", "grow", "grow", "free", "free", "share", "prefix", "turn", "twin", "link"]
        ),
        st.integers(0, 5),  # owner
        st.integers(0, 9),  # amount / key choice
    ),
    max_size=120,
)


def _state(kv: KVCache) -> tuple[object, ...]:
    return (
        kv.free_blocks(),
        kv.free_count,
        kv.ref_counts(),
        kv.block_keys(),
        dict(kv.cache),
        {k: list(v) for k, v in kv.twins.items()},
        kv.transitions,
        list(kv.empty or ()),
        kv.touched,
    )


@settings(max_examples=400, deadline=None)
@given(num_blocks=st.integers(1, 40), script=run_ops, empty_first=st.booleans())
@example(num_blocks=2, script=[("grow", 0, 1), ("twin", 0, 0), ("turn", 0, 0)], empty_first=False)
@example(num_blocks=3, script=[("grow", 0, 2), ("twin", 0, 0), ("turn", 0, 0)], empty_first=False)
def test_queued_runs_behave_as_eagerly_linked_blocks(
    num_blocks: int, script: list[tuple[str, int, int]], empty_first: bool
) -> None:
    """A release queues its blocks as a run; every operation then gives what the plain
    free queue (``eager_links``, each freed block linked at once) gives: the same blocks
    taken, the same queue order, counts, keys, cache and transitions."""
    runs = KVCache(num_blocks, 4, empty_first=empty_first)
    eager = KVCache(num_blocks, 4, empty_first=empty_first, eager_links=True)
    owners: dict[int, list[int]] = {}
    chains: dict[int, list[int]] = {}  # owner -> the keys of its blocks, in order
    last: dict[int, list[int]] = {}  # owner -> the keys of the blocks it released last
    next_key = 1
    for op, owner, amount in script:
        blocks = owners.setdefault(owner, [])
        keys = chains.setdefault(owner, [])
        if op in ("alloc", "grow"):
            before = len(blocks)
            mirror: list[int] = []
            ok = runs.allocate(blocks, [], amount)
            assert ok == eager.allocate(mirror, [], amount)
            assert blocks[before:] == mirror
            if ok and op == "grow":
                fresh = blocks[len(keys) :]
                new_keys = list(range(next_key, next_key + len(fresh)))
                next_key += len(fresh)
                if fresh:
                    runs.register_chain(fresh, new_keys)
                    eager.register_chain(fresh, new_keys)
                keys += new_keys
        elif op == "twin":
            # a block computed again under a key of another owner (a twin while it is cached)
            source = chains.get(amount % 6, [])
            mirror = []
            # a chain never holds a key twice (a key names its whole prefix), so a twin
            # takes a key its own chain does not hold
            if source and source[-1] in keys:
                source = []
            if len(blocks) == len(keys) and source and runs.allocate(blocks, [], 1):
                assert eager.allocate(mirror, [], 1) and mirror == blocks[-1:]
                runs.register(blocks[-1], source[-1])
                eager.register(blocks[-1], source[-1])
                keys.append(source[-1])
        elif op in ("share", "prefix"):
            # the keys an owner released (a conversation's next request), or a prefix of
            # the keys an owner holds or released
            source = (last if op == "share" or amount % 2 else chains).get(amount % 6, [])
            want = source if op == "share" else source[: amount + 1]
            if blocks:
                continue
            hits = runs.lookup_prefix(want, len(want))
            assert hits == eager.lookup_prefix(want, len(want)) == runs.lookup(want)
            need = amount % 3
            mirror = []
            ok = runs.allocate(blocks, hits, need)
            assert ok == eager.allocate(mirror, hits, need)
            assert blocks == mirror
            if ok:
                keys[:] = want[: len(hits)]
        elif op == "turn":
            # the owner's request ends and the next of its conversation takes back the first
            # ``amount`` keys' blocks (or all), then a fresh block or two
            want = keys[: amount or len(keys)]
            runs.release(blocks)
            eager.release(blocks)
            hits = runs.lookup_prefix(want, len(want))
            assert hits == eager.lookup_prefix(want, len(want))
            blocks.clear()
            mirror = []
            ok = runs.allocate(blocks, hits, amount % 3)
            assert ok == eager.allocate(mirror, hits, amount % 3)
            assert blocks == mirror
            keys[:] = want[: len(hits)] if ok else []
        elif op == "link":
            runs._link_runs()
        else:
            runs.release(blocks)
            eager.release(blocks)
            owners[owner] = []
            last[owner] = chains[owner]
            chains[owner] = []
        runs.check()
        eager.check()
        assert _state(runs) == _state(eager)
    for blocks in owners.values():
        runs.release(blocks)
        eager.release(blocks)
    runs.check()
    assert _state(runs) == _state(eager)
    assert runs.free_count == num_blocks


def test_hits_at_the_end_of_a_queued_run_leave_it_in_one_step() -> None:
    """A request's blocks, released, are a queued run; the next request of its conversation
    takes back a prefix of them (the run's last blocks) and the rest stay queued in order."""
    kv = KVCache(10, 4)
    a: list[int] = []
    assert kv.allocate(a, [], 5)
    kv.register_chain(a, [1, 2, 3, 4, 5])
    kv.release(a)
    assert kv.free_blocks() == [5, 6, 7, 8, 9, 4, 3, 2, 1, 0]
    b: list[int] = []
    hits = kv.lookup_prefix([1, 2, 3, 9], 4)
    assert hits == [0, 1, 2]
    assert kv.allocate(b, hits, 1)
    assert b == [0, 1, 2, 5]
    assert kv.free_blocks() == [6, 7, 8, 9, 4, 3]
    assert kv.free_count == 6
    kv.check()
    # taking more than the blocks never used goes on into the run, evicting its keys
    c: list[int] = []
    assert kv.allocate(c, [], 5)
    assert c == [6, 7, 8, 9, 4]
    assert kv.free_blocks() == [3]
    assert kv.transitions[-1] == (False, 5)
    kv.check()


def test_a_release_below_zero_frees_the_blocks_released_before_it() -> None:
    """The loop a release falls back to when a count is not 1 raises on a count of 0, and
    the blocks it freed before stay queued, as with eager links."""
    for eager_links in (False, True):
        kv = KVCache(6, 4, eager_links=eager_links)
        a: list[int] = []
        assert kv.allocate(a, [], 3)
        with pytest.raises(InternalError, match=r"^block 4 released with reference count 0$"):
            kv.release([4, a[0], a[1]])
        assert kv.free_blocks() == [3, 4, 5, 1, 0]
        assert kv.ref_counts() == [0, 0, 1, 0, 0, 0]


def test_free_hits_at_the_ends_of_two_queued_runs_leave_both() -> None:
    """``a`` holds blocks 0, 1 (keys 1, 2); ``b`` shares block 0 and takes block 2. Releasing
    ``a`` queues block 1, releasing ``b`` queues 2 then 0. The hits of keys 1, 2 are blocks
    0, 1: the end of the second run, then the whole first one; block 2 stays queued."""
    results = []
    for eager_links in (False, True):
        kv = KVCache(4, 4, eager_links=eager_links)
        a: list[int] = []
        b: list[int] = []
        assert kv.allocate(a, [], 2)
        kv.register_chain(a, [1, 2])
        assert kv.allocate(b, [a[0]], 1)
        kv.release(a)
        kv.release(b)
        assert kv.free_blocks() == [3, 1, 2, 0]
        assert eager_links or list(kv._runs.values()) == [[1], [2, 0]]
        c: list[int] = []
        hits = kv.lookup_prefix([1, 2], 2)
        assert hits == [0, 1]
        assert kv.allocate(c, hits, 1)
        kv.check()
        assert eager_links or list(kv._runs.values()) == [[2]]
        results.append((c, kv.free_blocks(), kv.ref_counts()))
    assert results[0] == results[1] == ([0, 1, 3], [2], [1, 1, 0, 1])


def test_a_free_hit_inside_a_queued_run_is_taken_out_of_the_linked_queue() -> None:
    """A hit that is not the last block of a queued run (here block 1 of the run 1, 0): the
    runs are linked and the hit leaves the queue alone, as with eager links."""
    results = []
    for eager_links in (False, True):
        kv = KVCache(3, 4, eager_links=eager_links)
        a: list[int] = []
        assert kv.allocate(a, [], 2)
        kv.register_chain(a, [1, 2])
        kv.release(a)
        c: list[int] = []
        hits = kv.lookup_prefix([2], 1)
        assert hits == [1]
        assert kv.allocate(c, hits, 1)
        kv.check()
        assert not kv._runs
        results.append((c, kv.free_blocks(), kv.ref_counts()))
    assert results[0] == results[1] == ([1, 2], [0], [0, 1, 1])


def test_queue_links_are_made_when_a_block_is_first_linked() -> None:
    """Runs taken whole or from their ends need no links, so the per-block link lists stay
    empty; the first block linked (runs linked for a hit inside one) makes them cover every
    per-block entry, and they grow with the other lists from then on."""
    kv = KVCache(5000, 4)
    a: list[int] = []
    assert kv.allocate(a, [], 3)
    kv.register_chain(a, [1, 2, 3])
    kv.release(a)
    b: list[int] = []
    assert kv.allocate(b, kv.lookup_prefix([1, 2], 2), 1)
    kv.release(b)
    kv.check()
    assert kv._next == kv._prev == []
    # a hit inside a queued run (block 1 of the run 3, 1, 0 that b's release queued): the
    # runs are linked
    assert list(kv._runs.values())[-1] == [3, 1, 0]
    c: list[int] = []
    assert kv.allocate(c, [1], 0)
    assert len(kv._next) == len(kv._prev) == len(kv.ref)
    kv.check()
    d: list[int] = []
    assert kv.allocate(d, [], 3000)  # past the per-block lists: they all grow
    assert len(kv._next) == len(kv._prev) == len(kv.ref) >= 3004
    kv.release(d)
    kv.release(c)
    kv.check()
    assert kv.free_count == 5000
