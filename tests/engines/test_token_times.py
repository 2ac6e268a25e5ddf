"""Token instants as runs of equal spacing: the same sequence, however it was added."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engines._tokentimes import TokenTimes, arithmetic_runs

increasing = st.lists(st.integers(0, 50), max_size=60).map(
    lambda gaps: [sum(gaps[: i + 1]) for i in range(len(gaps))]
)


@given(increasing)
def test_appended_instants_read_back_exactly(times: list[int]) -> None:
    held = TokenTimes(times)
    assert len(held) == len(times)
    assert list(held) == times
    assert held == times and held == tuple(times)
    assert held.array().tolist() == times
    for i in range(len(times)):
        assert held[i] == times[i]
        assert held[-1 - i] == times[-1 - i]
    assert held[1:3] == times[1:3]


@given(increasing, st.lists(st.tuples(st.integers(1, 40), st.integers(0, 9), st.integers(1, 9))))
def test_runs_added_at_once_equal_runs_added_one_by_one(
    times: list[int], pieces: list[tuple[int, int, int]]
) -> None:
    one_by_one = TokenTimes(times)
    at_once = TokenTimes(times)
    last = times[-1] if times else 0
    for gap, step, count in pieces:
        start = last + gap
        run = [start + step * k for k in range(count)]
        if step == 0:
            run = [start + k for k in range(count)]  # strictly increasing
            at_once.extend(run)
        else:
            at_once.extend_run(start, step, count)
        one_by_one.extend(run)
        last = run[-1]
    assert at_once.runs() == one_by_one.runs()
    assert list(at_once) == list(one_by_one)
    assert at_once == one_by_one


def test_equal_spacing_is_one_run() -> None:
    held = TokenTimes([50, 60, 70, 80])
    held.extend_run(90, 10, 100)
    assert held.runs() == [(50, 10, 104)]
    held.append(1100)
    held.append(1150)
    assert held.runs() == [(50, 10, 104), (1100, 50, 2)]
    assert arithmetic_runs([1, 2, 4, 6, 7]) == [(1, 1, 2), (4, 2, 2), (7, 0, 1)]


@given(
    steps=st.lists(st.lists(st.integers(1, 5), max_size=30), min_size=1, max_size=5),
)
def test_appending_one_instant_to_many_builds_the_runs_append_builds(
    steps: list[list[int]],
) -> None:
    # each holder starts with its own history, then all get the same pass instants
    one_by_one = [TokenTimes(range(0, 3 * k, k)) for k in range(1, len(steps) + 1)]
    together = [TokenTimes(range(0, 3 * k, k)) for k in range(1, len(steps) + 1)]
    t = 100
    for gap in steps[0]:
        t += gap
        for h in one_by_one:
            h.append(t)
        TokenTimes.append_to_each(together, t)
    assert [h.runs() for h in together] == [h.runs() for h in one_by_one]
    assert [list(h) for h in together] == [list(h) for h in one_by_one]


@given(
    increasing,
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 9), st.integers(1, 9)), max_size=30),
)
def test_runs_added_together_equal_their_instants_added_one_by_one(
    times: list[int], pieces: list[tuple[int, int, int]]
) -> None:
    """``extend_runs`` of any runs (canonical or not, steps of 0 in runs of one) gives the
    runs that appending their instants one by one gives."""
    together = TokenTimes(times)
    one_by_one = TokenTimes(times)
    last = times[-1] if times else 0
    runs = []
    for gap, step, count in pieces:
        start = last + gap
        if step == 0:
            count = 1  # a run of one instant (any later instant is strictly after it)
        runs.append((start, step, count))
        last = start + step * (count - 1)
    together.extend_runs(runs)
    for start, step, count in runs:
        one_by_one.extend([start + step * k for k in range(count)])
    assert together.runs() == one_by_one.runs()
    assert len(together) == len(one_by_one)
    assert together == one_by_one


def _greedy_runs(times: list[int]) -> list[tuple[int, int, int]]:
    """The canonical runs of ``times``, built on plain lists: an instant extends the last run
    when it is one step after the run's last instant (a run of one instant takes any step)."""
    runs: list[list[int]] = []
    for t in times:
        if runs and (runs[-1][2] == 1 or t == runs[-1][0] + runs[-1][1] * runs[-1][2]):
            if runs[-1][2] == 1:
                runs[-1][1] = t - runs[-1][0]
            runs[-1][2] += 1
        else:
            runs.append([t, 0, 1])
    return [(start, step, count) for start, step, count in runs]


@given(
    st.lists(st.integers(0, 6), max_size=80).map(
        lambda gaps: [sum(gaps[: i + 1]) for i in range(len(gaps))]
    ),
    st.lists(st.sampled_from(["append", "each", "run"]), min_size=80, max_size=80),
)
def test_every_way_of_adding_builds_the_greedy_runs(times: list[int], ways: list[str]) -> None:
    """Instants (equal ones too) added one at a time, to many at once, or as runs give the
    runs the plain greedy split of the whole sequence gives, and read back as that sequence."""
    held = TokenTimes()
    others = [TokenTimes([0])]
    to_others = [0]
    i = 0
    while i < len(times):
        way = ways[i]
        if way == "append":
            held.append(times[i])
            i += 1
        elif way == "each":
            TokenTimes.append_to_each([held, *others], times[i])
            to_others.append(times[i])
            i += 1
        else:
            # the longest stretch of equal spacing from here, as one run
            j = i + 1
            if j < len(times):
                step = times[j] - times[i]
                while j + 1 < len(times) and times[j + 1] - times[j] == step:
                    j += 1
                held.extend_run(times[i], step, j - i + 1)
                i = j + 1
            else:
                held.extend_run(times[i], 0, 1)
                i += 1
        expect = times[:i]
        assert held.runs() == _greedy_runs(expect)
        assert len(held) == len(expect)
        assert list(held) == expect
        assert held.array().tolist() == expect
        if expect:
            assert held[-1] == expect[-1] and held[0] == expect[0]
    assert others[0].runs() == _greedy_runs(to_others)
