"""Chained block keys from trace content ids (REFERENCE-engine §4.2)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines import BlockKeyer
from engines._keys import block_content, prompt_contents

from .sim import req


def test_block_content_repeats_one_id_when_engine_block_divides_trace_block() -> None:
    ids = [7, 9]
    contents = [block_content(ids, 512, 1000, "r", k, 64) for k in range(15)]
    assert contents == [7] * 8 + [9] * 7


def test_block_content_is_run_length_when_engine_block_straddles_trace_blocks() -> None:
    assert block_content([7, 9, 4], 100, 300, "r", 1, 64) == ((7, 36), (9, 28))
    assert block_content([7, 7, 4], 100, 300, "r", 1, 64) == 7  # equal ids merge


def test_output_positions_get_content_unique_to_request_and_index() -> None:
    assert block_content([7], 512, 100, "r", 1, 64) == ((7, 36), ("r", 0, 28))
    assert block_content([7], 512, 100, "r", 2, 64) == (("r", 28, 64),)
    assert block_content([7], 512, 100, "s", 2, 64) != block_content([7], 512, 100, "r", 2, 64)


def test_block_keys_cover_full_prompt_blocks_only_and_chain() -> None:
    keyer = BlockKeyer()
    a = keyer.block_keys(req("a", 1000, 1, hash_ids=[1, 2]), 64)
    b = keyer.block_keys(req("b", 1000, 1, hash_ids=[1, 3]), 64)
    assert len(a) == 15
    assert a[:8] == b[:8]  # same content id 1 for positions 0..511
    assert all(x != y for x, y in zip(a[8:], b[8:], strict=True))
    assert len(set(a)) == 15  # block 1 and block 0 hold the same id but differ by prefix


def test_keys_are_handed_out_in_first_seen_order() -> None:
    keyer = BlockKeyer()
    assert keyer.block_keys(req("a", 128, 1, hash_ids=[5], trace_block=128), 64) == (1, 2)
    assert keyer.block_keys(req("b", 192, 1, hash_ids=[5, 6], trace_block=128), 64) == (1, 2, 3)
    assert len(keyer) == 3
    assert keyer.peek(2, 6) == 3
    assert keyer.peek(2, 99) is None


@settings(max_examples=100, deadline=None)
@given(
    trace_block=st.integers(1, 300),
    engine_block=st.integers(1, 300),
    ids=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    data=st.data(),
)
def test_equal_token_content_gives_equal_keys_at_any_block_sizes(
    trace_block: int, engine_block: int, ids: list[int], data: st.DataObject
) -> None:
    prompt = data.draw(st.integers((len(ids) - 1) * trace_block + 1, len(ids) * trace_block))
    tokens = [ids[p // trace_block] for p in range(prompt)]
    # the same token content written with trace block 1
    keyer = BlockKeyer()
    a = keyer.block_keys(req("a", prompt, 1, hash_ids=ids, trace_block=trace_block), engine_block)
    b = keyer.block_keys(req("b", prompt, 1, hash_ids=tokens, trace_block=1), engine_block)
    assert a == b
    assert len(a) == prompt // engine_block


def test_distinct_parent_and_content_pairs_get_distinct_keys() -> None:
    keyer = BlockKeyer()
    pairs = [
        (0, 0),
        (0, 1),
        (1, 0),
        (0, -1),
        (1, -1),
        (0, 2**63 - 1),
        (0, -(2**63)),
        (0, ((0, 4),)),
    ]
    keys = [keyer.key(p, c) for p, c in pairs]  # type: ignore[arg-type]
    assert keys == list(range(1, len(pairs) + 1))
    assert [keyer.peek(p, c) for p, c in pairs] == keys  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    trace_block=st.integers(1, 300),
    engine_block=st.integers(1, 300),
    ids=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    extra=st.integers(0, 2),
    data=st.data(),
)
def test_prompt_contents_match_block_content_of_every_full_prompt_block(
    trace_block: int, engine_block: int, ids: list[int], extra: int, data: st.DataObject
) -> None:
    prompt = data.draw(st.integers((len(ids) - 1) * trace_block + 1, len(ids) * trace_block))
    hash_ids = ids + [9] * extra  # ids past the prompt are ignored
    expected = [
        block_content(hash_ids, trace_block, prompt, "r", k, engine_block)
        for k in range(prompt // engine_block)
    ]
    assert prompt_contents(hash_ids, trace_block, prompt, engine_block) == expected


def test_block_keys_are_remembered_per_request_and_block_size() -> None:
    keyer = BlockKeyer()
    a = req("a", 1000, 1, hash_ids=[1, 2])
    assert keyer.cached_block_keys(a, 64) is None
    keys = keyer.block_keys(a, 64)
    assert keyer.block_keys(a, 64) is keys
    assert keyer.cached_block_keys(a, 64) is keys
    assert keyer.cached_block_keys(a, 128) is None
    # another request object with the same id is keyed afresh, never served the memo
    other = req("a", 1000, 1, hash_ids=[3, 4])
    assert keyer.cached_block_keys(other, 64) is None
    assert keyer.block_keys(other, 64) != keys


def test_extend_interns_in_block_order_and_known_interns_nothing() -> None:
    keyer = BlockKeyer()
    keys: list[int] = []
    keyer.extend(keys, [5, 5, 6], 2)
    assert keys == [1, 2]
    keyer.extend(keys, [5, 5, 6], 3)
    assert keys == [1, 2, 3]
    probe: list[int] = []
    keyer.known(probe, [5, 5, 7, 8], 4)
    assert probe == [1, 2]  # (2, 7) was never interned: stop there
    assert len(keyer) == 3


@settings(max_examples=150, deadline=None)
@given(
    per_id=st.sampled_from([2, 4, 8]),
    prompts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8), min_size=1, max_size=12),
    starts=st.lists(st.integers(0, 40), min_size=12, max_size=12),
    stops=st.lists(st.integers(0, 70), min_size=12, max_size=12),
)
def test_known_steps_over_whole_content_ids_with_the_same_keys(
    per_id: int, prompts: list[list[int]], starts: list[int], stops: list[int]
) -> None:
    """Walking a content id's blocks at once (per_id > 1) finds exactly the keys the
    block-by-block walk finds, from any starting block and to any stop."""
    keyer = BlockKeyer()
    for i, ids in enumerate(prompts):
        contents = [c for c in ids for _ in range(per_id)]
        fast: list[int] = []
        keyer.known(fast, contents, len(contents), per_id)
        slow: list[int] = []
        keyer.known(slow, contents, len(contents))
        assert fast == slow
        # resume from a known prefix and stop anywhere
        start = min(starts[i], len(slow))
        stop = min(stops[i], len(contents))
        fast = slow[:start]
        keyer.known(fast, contents, stop, per_id)
        again = slow[:start]
        keyer.known(again, contents, stop)
        assert fast == again
        # half of the prompts are interned (from a known prefix), so later walks find keys;
        # interning remembers whole content ids too, and hands out the same keys
        if i % 2 == 0:
            keys = slow[: starts[i] % (len(slow) + 1)]
            keyer.extend(keys, contents, len(contents), per_id if i % 4 == 0 else 1)
            check: list[int] = []
            keyer.known(check, contents, len(contents))
            assert check == keys


def test_the_keyer_keeps_a_bounded_number_of_requests_and_donors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engines import _keys

    monkeypatch.setattr(_keys, "MEMO_LIMIT", 3)
    monkeypatch.setattr(_keys, "DONOR_LIMIT", 2)
    keyer = BlockKeyer()
    requests = [
        req(f"r{i}", 256, 1, hash_ids=[i % 2, 10 + i, 20 + i, 30 + i], trace_block=64)
        for i in range(6)
    ]
    first = [keyer.block_keys(r, 64) for r in requests]
    assert len(keyer._memo) == 3
    assert len(keyer._donors) == 2
    # asked again after being forgotten: the same keys, from the table
    again = [keyer.block_keys(r, 64) for r in requests]
    assert again == first
    fresh = BlockKeyer()
    assert [fresh.block_keys(r, 64) for r in requests] == first


class _PlainInterning:
    """The keys of REFERENCE-engine §4.2 spelled out: one table entry per ``(parent,
    content)`` pair, numbered 1, 2, ... in first-seen order."""

    def __init__(self) -> None:
        self.table: dict[tuple[int, object], int] = {}

    def keys(self, contents: list[int], stop: int) -> list[int]:
        out: list[int] = []
        parent = 0
        for content in contents[:stop]:
            parent = self.table.setdefault((parent, content), len(self.table) + 1)
            out.append(parent)
        return out

    def known(self, contents: list[int], stop: int) -> list[int]:
        out: list[int] = []
        parent = 0
        for content in contents[:stop]:
            key = self.table.get((parent, content))
            if key is None:
                break
            out.append(key)
            parent = key
        return out


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4, 8]),  # blocks per content id
            st.lists(st.integers(1, 5), min_size=0, max_size=6),  # content ids
            st.integers(0, 60),  # blocks to intern (partial content ids included)
            st.integers(0, 60),  # blocks of a known prefix to start from
            st.sampled_from(["extend", "extend_ids", "known", "key"]),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_interning_whole_content_ids_at_once_gives_the_plain_interning_keys(
    steps: list[tuple[int, list[int], int, int, str]],
) -> None:
    """Keys of whole content ids held as spans (one table entry per id) are the keys of the
    plain per-block interning, for any mix of blocks per id, partial ids, resumed walks,
    single-pair ``key``/``peek`` calls and lookups of blocks inside a span."""
    keyer = BlockKeyer()
    plain = _PlainInterning()
    for per_id, ids, stop, start, how in steps:
        contents = [c for c in ids for _ in range(per_id)]
        stop = min(stop, len(contents))
        if how == "known":
            walked: list[int] = []
            keyer.known(walked, contents, stop, per_id)
            assert walked == plain.known(contents, stop)
            continue
        known = plain.known(contents, stop)
        if how == "key":
            parent = 0
            got: list[int] = []
            for c in contents[:stop]:
                assert keyer.peek(parent, c) == plain.table.get((parent, c))
                parent = keyer.key(parent, c)
                got.append(parent)
            assert got == plain.keys(contents, stop)
        else:
            keys = known[: min(start, len(known))]
            if how == "extend_ids" and per_id > 1:
                keyer.extend_ids(keys, ids, stop, per_id)
            else:
                keyer.extend(keys, contents, stop, per_id)
            assert keys == plain.keys(contents, stop)
        assert len(keyer) == len(plain.table)


class _HoldsNothing:
    def held_keys_estimate(self) -> int:
        return 0

    def held_keys(self) -> Iterator[Sequence[int]]:
        return iter(())


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([2, 4, 8]),  # blocks per content id
            st.lists(st.integers(-3, 5), min_size=0, max_size=6),  # content ids
            st.integers(0, 60),  # blocks to intern
            st.integers(0, 60),  # blocks of a known prefix to start from
        ),
        min_size=1,
        max_size=25,
    ),
    forget_min=st.sampled_from([1, 8, 10**9]),
)
def test_extend_ids_leaves_the_keyer_as_extend_with_every_block_spelled_out(
    steps: list[tuple[int, list[int], int, int]], forget_min: int
) -> None:
    """``extend_ids`` walks content ids, ``extend`` every block's content: the same keys,
    and the same table (in the same order), spans and numbers afterwards."""
    by_ids = BlockKeyer(forget_min=forget_min)
    by_blocks = BlockKeyer(forget_min=forget_min)
    for keyer in (by_ids, by_blocks):
        keyer.hold(_HoldsNothing())  # so both forget as their tables grow
    for per_id, ids, stop, start in steps:
        contents = [c for c in ids for _ in range(per_id)]
        stop = min(stop, len(contents))
        a: list[int] = []
        b: list[int] = []
        by_ids.known(a, contents, min(start, stop), per_id)
        by_blocks.known(b, contents, min(start, stop), per_id)
        by_ids.extend_ids(a, ids, stop, per_id)
        by_blocks.extend(b, contents, stop, per_id)
        assert a == b
        assert list(by_ids._keys.items()) == list(by_blocks._keys.items())
        assert by_ids._spans == by_blocks._spans
        assert by_ids._span_starts == by_blocks._span_starts
        assert by_ids._span_lengths == by_blocks._span_lengths
        assert by_ids._span_cids == by_blocks._span_cids
        assert len(by_ids) == len(by_blocks) and by_ids.held == by_blocks.held
