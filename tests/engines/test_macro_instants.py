"""A macro run finds the passes before an instant by arithmetic when its passes all take
the same time (its instants are a ``range``): the same counts as searching the list."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from hypothesis import given
from hypothesis import strategies as st

from engines._macro import _count_before


@given(
    start=st.integers(-(10**13), 10**13),
    step=st.integers(1, 10**9),
    n=st.integers(0, 40),
    hi_share=st.floats(0.0, 1.0),
    probe=st.integers(-3, 45),
    jitter=st.integers(-2, 2),
)
def test_counting_the_instants_of_a_range_equals_bisecting_them(
    start: int, step: int, n: int, hi_share: float, probe: int, jitter: int
) -> None:
    instants = range(start, start + step * n, step)
    hi = round(n * hi_share)
    now = start + probe * step + jitter  # on, just before and just after pass boundaries
    spelled = list(instants)
    assert _count_before(instants, now, hi, True) == bisect_right(spelled, now, 0, hi)
    assert _count_before(instants, now, hi, False) == bisect_left(spelled, now, 0, hi)
    assert _count_before(spelled, now, hi, True) == bisect_right(spelled, now, 0, hi)
    assert _count_before(spelled, now, hi, False) == bisect_left(spelled, now, 0, hi)


def test_an_instant_on_a_pass_boundary_counts_only_when_inclusive() -> None:
    ends = range(1_000, 6_000, 1_000)  # 1000, 2000, ..., 5000
    assert _count_before(ends, 3_000, 5, True) == 3
    assert _count_before(ends, 3_000, 5, False) == 2
    assert _count_before(ends, 2_999, 5, True) == 2
    assert _count_before(ends, 999, 5, True) == 0
    assert _count_before(ends, 10**9, 4, True) == 4  # never past the passes asked about
