"""A record's token times are held as runs and read as the tuple of milliseconds."""

from __future__ import annotations

import json
import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engines import TokenTimes
from replay import TokenTimesMs
from replay._records import jsonable

_instants = st.builds(
    lambda start, gaps: [start + int(x) for x in np.cumsum([0, *gaps])],
    st.integers(0, 10**13),
    st.lists(st.sampled_from([1, 7, 10_000_000, 50_000_000, 60_000_003]), max_size=40),
)


def _as_tuple(instants: list[int]) -> tuple[float, ...]:
    """What records held before: numpy's int64 / 1e6, as a tuple of floats."""
    return tuple((np.array(instants, dtype=np.int64) / 1_000_000).tolist())


@settings(max_examples=200, deadline=None)
@given(instants=st.one_of(st.just([]), _instants))
def test_it_reads_as_the_tuple_of_milliseconds(instants: list[int]) -> None:
    times = TokenTimesMs(TokenTimes(instants).runs())
    expected = _as_tuple(instants)
    assert len(times) == len(expected)
    assert times == expected and expected == times
    assert (times != expected) is False
    assert hash(times) == hash(expected)
    assert tuple(times) == expected and list(times) == list(expected)
    assert times.tolist() == list(expected)
    assert repr(times) == repr(expected)
    if expected:
        assert times[0] == expected[0] and times[-1] == expected[-1]
        assert times[1:3] == expected[1:3]
        assert expected[len(expected) // 2] in times
    assert pickle.loads(pickle.dumps(times)) == times
    assert json.dumps(jsonable(times)) == json.dumps(list(expected))


def test_equal_instants_from_other_runs_compare_equal_and_lists_do_not() -> None:
    # the same instants as one run and as two runs of one instant each
    one = TokenTimesMs([(1_000_000, 2_000_000, 2)])
    two = TokenTimesMs([(1_000_000, 0, 1), (3_000_000, 0, 1)])
    assert one == two and hash(one) == hash(two)
    assert one != TokenTimesMs([(1_000_000, 2_000_000, 3)])
    assert one == (1.0, 3.0)
    assert one != [1.0, 3.0]  # as a tuple reads: not equal to a list
    assert one.runs_ns == ((1_000_000, 2_000_000, 2),)


def test_the_floats_are_made_once_when_first_read() -> None:
    times = TokenTimesMs([(5, 3, 4)])
    assert times._values is None  # nothing made by building it
    first = times.values()
    assert times.values() is first
