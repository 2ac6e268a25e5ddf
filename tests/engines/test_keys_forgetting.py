"""A block keyer forgets the keys nobody holds, and nothing else (engines/_keys.py)."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from engines import BlockKeyer


class Holder:
    """Holds the key lists it is given."""

    def __init__(self) -> None:
        self.lists: list[list[int]] = []

    def held_keys_estimate(self) -> int:
        return sum(map(len, self.lists))

    def held_keys(self) -> Iterable[Iterable[int]]:
        return self.lists


def _chain(keyer: BlockKeyer, contents: list[int]) -> list[int]:
    keys: list[int] = []
    keyer.extend(keys, contents, len(contents))
    return keys


def test_held_keys_and_their_ancestors_stay_and_the_rest_is_forgotten() -> None:
    keyer = BlockKeyer(forget_min=4)
    holder = Holder()
    keyer.hold(holder)
    a = _chain(keyer, [1, 2, 3])
    b = _chain(keyer, [7, 8])
    holder.lists.append(a[2:])  # only a's last key: its ancestors stay with it
    c = _chain(keyer, [9, 10, 11, 12, 13])  # the table holds 5 keys: it looks, and forgets b
    assert (a, b, c) == ([1, 2, 3], [4, 5], [6, 7, 8, 9, 10])
    assert keyer.forgotten == 2
    assert keyer.held == 8
    assert len(keyer) == 10  # every key interned so far
    assert [keyer.peek(p, x) for p, x in ((0, 1), (1, 2), (2, 3))] == a
    assert keyer.peek(0, 7) is None
    # a forgotten prefix comes back under new numbers, never reused ones
    assert _chain(keyer, [7, 8]) == [11, 12]
    assert _chain(keyer, [1, 2, 3, 4]) == [1, 2, 3, 13]


def test_a_keyer_forgets_nothing_without_a_holder_or_when_told_not_to() -> None:
    for keyer in (BlockKeyer(forget_min=1), BlockKeyer(forget=False, forget_min=1)):
        if not keyer.forget:
            keyer.hold(Holder())
        for start in range(0, 40, 4):
            _chain(keyer, list(range(start, start + 4)))
        assert (keyer.forgotten, keyer.held, len(keyer)) == (0, 40, 40)


def test_the_memo_and_the_donors_hold_their_keys() -> None:
    from .sim import req

    keyer = BlockKeyer(forget_min=2)
    keyer.hold(Holder())
    asked = keyer.block_keys(req("a", 128, 1, hash_ids=[5, 6], trace_block=64), 64)
    keyer.remember(req("b", 64, 1, hash_ids=[50], trace_block=64), 64, _chain(keyer, [50]))
    _chain(keyer, list(range(1, 11)))
    _chain(keyer, [60, 61])  # looks: the memo's keys and the donor's stay
    assert keyer.peek(0, 5) == asked[0] and keyer.peek(asked[0], 6) == asked[1]
    assert keyer.peek(0, 50) == 3
    assert keyer.peek(0, 1) is None
    assert keyer.shared_prefix(req("c", 64, 1, hash_ids=[50], trace_block=64), 64) == [3]


def test_steps_over_a_content_ids_blocks_are_forgotten_with_their_keys() -> None:
    keyer = BlockKeyer(forget_min=4)
    holder = Holder()
    keyer.hold(holder)
    kept: list[int] = []
    keyer.extend(kept, [1, 1, 2, 2], 4, per_id=2)
    holder.lists.append(kept)
    gone: list[int] = []
    keyer.extend(gone, [3, 3, 4, 4], 4, per_id=2)  # looks: all 4 held, waits for 8
    keyer.extend([], [9, 9], 2, per_id=2)  # looks: forgets the second chain
    assert keyer.forgotten == 4
    again: list[int] = []
    keyer.known(again, [3, 3, 4, 4], 4, per_id=2)
    assert again == []  # no step over the forgotten keys is left behind
    walked: list[int] = []
    keyer.known(walked, [1, 1, 2, 2], 4, per_id=2)
    assert walked == kept


@settings(max_examples=150, deadline=None)
@given(
    chains=st.lists(
        st.tuples(
            st.lists(st.integers(0, 5), min_size=1, max_size=6),
            st.sampled_from([1, 2, 3]),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    ),
    drops=st.lists(st.integers(0, 39), max_size=40),
)
def test_forgetting_only_renames_keys_nobody_held(
    chains: list[tuple[list[int], int, bool]], drops: list[int]
) -> None:
    """Against a keyer that never forgets: every chain's keys map onto the other keyer's by
    one renaming, one-to-one among the keys held at any time, and held keys keep their
    numbers."""
    forgetting = BlockKeyer(forget_min=1)
    keeping = BlockKeyer(forget=False)
    holder = Holder()
    forgetting.hold(holder)
    rename: dict[int, int] = {}
    for n, (ids, per_id, hold) in enumerate(chains):
        contents = [i for i in ids for _ in range(per_id)]
        a: list[int] = []
        b: list[int] = []
        forgetting.extend(a, contents, len(contents), per_id)
        keeping.extend(b, contents, len(contents), per_id)
        for x, y in zip(a, b, strict=True):
            assert rename.setdefault(x, y) == y
        held = {k for keys in holder.lists for k in keys}
        assert len({rename[k] for k in held}) == len(held)
        if hold:
            holder.lists.append(a)
        if n in drops and holder.lists:
            holder.lists.pop(0)
        # what is held is still interned, under the same numbers
        for keys in holder.lists:
            parent = 0
            for key in keys:
                pairs = [(parent, c) for c in range(6)]
                assert key in {forgetting.peek(p, c) for p, c in pairs}
                parent = key
    assert forgetting.held + forgetting.forgotten == len(forgetting)
