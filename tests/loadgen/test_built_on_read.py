"""A sequence built when read reads as the tuple of its items."""

from __future__ import annotations

import pytest

from loadgen._built_on_read import BuiltOnRead


class Squares(BuiltOnRead[int]):
    __slots__ = ("built", "n")
    _item_name = "square"

    def __init__(self, n: int) -> None:
        self.n = n
        self.built: list[int] = []

    def __len__(self) -> int:
        return self.n

    def _at(self, position: int) -> int:
        self.built.append(position)
        return position * position


def test_it_reads_as_the_tuple_of_its_items() -> None:
    squares = Squares(5)
    assert squares[0] == 0 and squares[4] == 16 and squares[-1] == 16 and squares[-5] == 0
    assert squares[1:4] == (1, 4, 9) and squares[::-2] == (16, 4, 0)
    assert list(squares) == [0, 1, 4, 9, 16]
    assert squares == (0, 1, 4, 9, 16) and squares == [0, 1, 4, 9, 16]
    assert squares != (0, 1, 4, 9) and squares != "abcde"
    assert hash(squares) == hash((0, 1, 4, 9, 16))
    assert 9 in squares and squares.index(9) == 3


def test_each_read_builds_the_item_again() -> None:
    squares = Squares(3)
    squares[1]
    squares[1]
    assert squares.built == [1, 1]


@pytest.mark.parametrize("index", [5, -6, 100])
def test_a_position_out_of_range_is_an_index_error_naming_the_item(index: int) -> None:
    with pytest.raises(IndexError, match=r"^square index out of range$"):
        Squares(5)[index]
