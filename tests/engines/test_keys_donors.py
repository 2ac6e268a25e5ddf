"""Block keys taken from an earlier request that shares a prefix (``BlockKeyer.remember`` /
``shared_prefix``) are exactly the keys a walk of the chain gives, never more blocks than the
two requests share."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from engines import BlockKeyer
from loadgen import Identity

from .sim import req


def test_a_later_turn_takes_the_keys_of_the_prefix_it_shares() -> None:
    keyer = BlockKeyer()
    first = req("t0", 4 * 64, 1, hash_ids=[1, 2, 3, 4], trace_block=64)
    keys = keyer.block_keys(first, 64)
    keyer.remember(first, 64, keys)
    later = req("t1", 6 * 64, 1, hash_ids=[1, 2, 3, 9, 10, 11], trace_block=64)
    shared = keyer.shared_prefix(later, 64)
    assert shared == list(keys[:3])  # ids 1, 2, 3 in common; block 3 differs
    interned = len(keyer)
    assert keyer.block_keys(later, 64)[:3] == keys[:3]
    assert len(keyer) == interned + 3  # only the three new blocks were interned


def test_no_shared_keys_across_trace_block_sizes_or_without_a_common_first_id() -> None:
    keyer = BlockKeyer()
    first = req("a", 512, 1, hash_ids=[1], trace_block=512)
    keyer.remember(first, 64, keyer.block_keys(first, 64))
    assert keyer.shared_prefix(req("b", 512, 1, hash_ids=[1, 1, 1, 1], trace_block=128), 64) == []
    assert keyer.shared_prefix(req("c", 512, 1, hash_ids=[2], trace_block=512), 64) == []
    assert keyer.shared_prefix(req("d", 512, 1, hash_ids=[1], trace_block=512), 128) == []
    assert len(keyer.shared_prefix(req("e", 512, 1, hash_ids=[1], trace_block=512), 64)) == 8


def test_a_conversation_donor_wins_when_it_shares_more() -> None:
    keyer = BlockKeyer()

    def turn(rid: str, ids: list[int], conversation: str) -> object:
        r = req(rid, 64 * len(ids), 1, hash_ids=ids, trace_block=64)
        return attrs.evolve(r, identity=Identity(conversation_id=conversation))

    mine = turn("m0", [1, 2, 3, 4, 5], "mine")
    keyer.remember(mine, 64, keyer.block_keys(mine, 64))  # type: ignore[arg-type]
    other = turn("o0", [1, 7], "other")  # newest donor of first id 1, shares one block
    keyer.remember(other, 64, keyer.block_keys(other, 64))  # type: ignore[arg-type]
    nxt = turn("m1", [1, 2, 3, 4, 5, 6], "mine")
    assert len(keyer.shared_prefix(nxt, 64)) == 5  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    trace_block=st.integers(1, 200),
    block_size=st.integers(1, 200),
    common=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    tail_a=st.lists(st.integers(0, 3), max_size=4),
    tail_b=st.lists(st.integers(0, 3), max_size=4),
    data=st.data(),
)
def test_donor_keys_equal_the_chain_walk_at_any_block_sizes(
    trace_block: int,
    block_size: int,
    common: list[int],
    tail_a: list[int],
    tail_b: list[int],
    data: st.DataObject,
) -> None:
    ids_a, ids_b = common + tail_a, common + tail_b
    prompt_a = data.draw(st.integers((len(ids_a) - 1) * trace_block + 1, len(ids_a) * trace_block))
    prompt_b = data.draw(st.integers((len(ids_b) - 1) * trace_block + 1, len(ids_b) * trace_block))
    keyer = BlockKeyer()
    a = req("a", prompt_a, 1, hash_ids=ids_a, trace_block=trace_block)
    keys_a = keyer.block_keys(a, block_size)
    keyer.remember(a, block_size, keys_a)
    b = req("b", prompt_b, 1, hash_ids=ids_b, trace_block=trace_block)
    shared = keyer.shared_prefix(b, block_size)
    keys_b = keyer.block_keys(b, block_size)
    assert list(keys_b[: len(shared)]) == shared  # a prefix of b's own keys
    # the same keys, in content terms, as fresh walks of each request alone
    fresh = BlockKeyer()
    assert fresh.block_keys(attrs.evolve(a, id="a2"), block_size) == keys_a
    assert fresh.block_keys(attrs.evolve(b, id="b2"), block_size) == keys_b
    # exactly the blocks that lie inside both prompts and the common run of ids
    same = next(
        (i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y),
        min(len(ids_a), len(ids_b)),
    )
    bound = min(prompt_a, prompt_b, same * trace_block) // block_size
    assert len(shared) == bound


@settings(max_examples=100, deadline=None)
@given(
    block=st.sampled_from([1, 16, 64]),
    turns=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=8), min_size=1, max_size=5),
    cut=st.integers(0, 63),
)
def test_a_conversation_keyed_a_block_per_content_id_has_the_keys_of_fresh_walks(
    block: int, turns: list[list[int]], cut: int
) -> None:
    """With a block per content id (``E == T``) a turn reads only the ids after the prefix
    its previous turn shares; its keys are still those of a fresh walk of its whole prompt."""
    keyer = BlockKeyer()
    walked = BlockKeyer()  # walks every prompt from its first block (no shared prefix)
    ids: list[int] = []
    for n, tail in enumerate(turns):
        ids = ids + tail  # each turn's prompt goes on from the previous turn's
        prompt = max(1, len(ids) * block - min(cut, block - 1))
        turn = req(f"t{n}", prompt, 1, hash_ids=ids, trace_block=block)
        keys = keyer.block_keys(turn, block)
        whole: list[int] = []
        walked.extend_prompt(whole, turn, block)
        assert list(keys) == whole
        assert len(keys) == prompt // block
