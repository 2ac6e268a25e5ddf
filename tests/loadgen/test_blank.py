"""Values built as blanks are instances of the frozen class, equal to the constructor's."""

from __future__ import annotations

import pickle
from typing import Any

import attrs
import numpy as np
import pytest

from loadgen import ArrivalRule, Dep, Identity, Lineage, Request, _columns, _request
from loadgen._blank import blank
from loadgen._columns import (
    after_completions,
    gather,
    linked_requests,
    placed,
    roots,
)
from loadgen._request import requests_from_columns


def test_a_filled_blank_becomes_the_frozen_class_itself() -> None:
    made = blank(Dep)
    assert made is not None
    assert made.__slots__ == ()  # the layout is the class's: no slot added
    value: Any = object.__new__(made)
    value.request_id = "r:1"
    value.on = "start"
    value.delay_ms = 2.5
    value.__class__ = Dep
    expected = Dep("r:1", "start", 2.5)
    assert type(value) is Dep
    assert value == expected and hash(value) == hash(expected) and repr(value) == repr(expected)
    assert pickle.loads(pickle.dumps(value)) == expected
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        value.delay_ms = 3.0


def _columns_case() -> tuple[Any, ...]:
    ids = np.arange(5, dtype=np.int64)
    ids.flags.writeable = False
    lineage = Lineage("p/main")
    return (
        roots([0.0, None, -0.0]),
        after_completions([["x", "y"], ["z"], []], [2.0, 0.0, 1.0]),
        requests_from_columns(
            ["r:1", "r:2"],
            [9, 1],
            [2, 0],
            4,
            [ids[:3], ids[3:4]],
            [ArrivalRule(3.0), ArrivalRule(None, (Dep("r:1"),))],
            [Identity("c", 1), Identity()],
        ),
        linked_requests(
            ["r:1", "r:2", "r:3"],
            [9, 1, 4],
            [2, 0, 1],
            4,
            [ids[:3], ids[3:4], ids[4:]],
            [ArrivalRule(3.0), None, None],
            [None, "r:1", "r:2"],
            [0.0, 1.5, 0.0],
            ["c", "c", None],
            [0, 1, None],
        ),
        linked_requests(
            ["p/r:1"],
            [1],
            [1],
            4,
            [ids[:1]],
            [None],
            ["p/r:0"],
            [2.0],
            ["p/c"],
            [3],
            ["p"],
            [lineage],
        ),
    )


def _expected() -> tuple[Any, ...]:
    lineage = Lineage("p/main")
    return (
        [ArrivalRule(0.0), ArrivalRule(None), ArrivalRule(-0.0)],
        [
            ArrivalRule(None, (Dep("x", "completion", 2.0), Dep("y", "completion", 2.0))),
            ArrivalRule(None, (Dep("z", "completion", 0.0),)),
            ArrivalRule(None, ()),
        ],
        (
            Request("r:1", 9, 2, 4, [0, 1, 2], ArrivalRule(3.0), Identity("c", 1)),
            Request("r:2", 1, 0, 4, [3], ArrivalRule(None, (Dep("r:1"),)), Identity()),
        ),
        (
            Request("r:1", 9, 2, 4, [0, 1, 2], ArrivalRule(3.0), Identity("c", 0)),
            Request(
                "r:2",
                1,
                0,
                4,
                [3],
                ArrivalRule(None, (Dep("r:1", "completion", 1.5),)),
                Identity("c", 1),
            ),
            Request(
                "r:3", 4, 1, 4, [4], ArrivalRule(None, (Dep("r:2", "completion", 0.0),)), Identity()
            ),
        ),
        (
            Request(
                "p/r:1",
                1,
                1,
                4,
                [0],
                ArrivalRule(None, (Dep("p/r:0", "completion", 2.0),)),
                Identity("p/c", 3, "p", lineage=lineage),
            ),
        ),
    )


def _exact(got: Any, expected: Any) -> None:
    """Equal, of the same classes, with the same field values (repr shows every field)."""
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]
    assert [repr(v) for v in got] == [repr(v) for v in expected]


@pytest.mark.parametrize("blanks", [True, False], ids=["blanks", "constructors"])
def test_the_builders_equal_the_constructors(blanks: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not blanks:  # as on an interpreter that refuses the class assignment
        for name in ("_BLANK_RULE", "_BLANK_DEP", "_BLANK_IDENTITY"):
            monkeypatch.setattr(_columns, name, None)
        monkeypatch.setattr(_request, "_BLANK", None)
        monkeypatch.setattr(_columns, "_BLANK_REQUEST", None)
    for got, expected in zip(_columns_case(), _expected(), strict=True):
        _exact(got, expected)


def test_the_builders_refuse_columns_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        after_completions([["x"]], [1.0, 2.0])
    with pytest.raises(ValueError):
        requests_from_columns(["r"], [1, 2], [0], 4, [], [], [])
    with pytest.raises(ValueError, match="different lengths"):
        linked_requests(["r"], [1], [0], 4, [np.zeros(1)], [None], [None], [0.0], ["c"], [])
    with pytest.raises(ValueError, match="different lengths"):
        linked_requests(["r"], [1], [0], 4, [np.zeros(1)], [None], ["q"], [0.0], ["c"], [0], [])


def test_placed_puts_each_part_at_its_rows_and_refuses_gaps() -> None:
    rows = np.array([2, 0], dtype=np.int64)
    assert placed(3, (rows, ["c", "a"]), (np.array([1], dtype=np.int64), ["b"])) == ["a", "b", "c"]
    assert placed(0) == []
    assert gather(["x", "y"], np.array([1, 1, 0], dtype=np.int64)) == ["y", "y", "x"]
    with pytest.raises(ValueError, match="exactly once"):
        placed(3, (rows, ["c", "a"]))
    with pytest.raises(ValueError, match="exactly once"):
        placed(2, (rows[1:], ["c"]), (rows[1:], ["d"]))  # row 0 twice, row 1 never
    with pytest.raises(ValueError, match="different lengths"):
        placed(2, (rows, ["c"]))
