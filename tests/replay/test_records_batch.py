"""Records built in batches are the records built one by one; the summary's inter-token gaps,
built from token-time runs, are the differences of the instants themselves."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines import RequestTrace, TokenTimes
from loadgen import Identity, Request
from replay import SLO
from replay._columns import RequestColumns
from replay._records import RequestRecord, Settled, build_record, build_records

from .fakes import MS, FakeAdmission, FakeTrace, completed

# increasing token instants: a start and positive gaps, drawn from a few values so that runs
# of equal spacing form, as they do in engines
_gaps = st.lists(st.sampled_from([1, 7, 10 * MS, 50 * MS, 60 * MS + 3]), max_size=40)
_instants = st.builds(
    lambda start, gaps: [start + int(x) for x in np.cumsum([0, *gaps])],
    st.integers(0, 10**12),
    _gaps,
)


def _traced(request_id: str, instants: list[int], *, held: bool) -> FakeTrace:
    trace = FakeTrace(request_id, output_length=max(1, len(instants)), engine_arrival_ns=0)
    trace.admissions = [FakeAdmission(0, 3)]
    trace.first_admit_ns = 0
    if instants:
        trace.terminal_ns = instants[-1]
        trace.terminal_status = "completed"
    trace.token_times_ns = TokenTimes(instants) if held else list(instants)  # type: ignore[assignment]
    return trace


@settings(max_examples=60, deadline=None)
@given(st.lists(_instants, max_size=8), st.booleans())
def test_a_batch_builds_the_records_built_one_by_one(instants: list[list[int]], held: bool) -> None:
    traces = [_traced(f"r{i}", times, held=held) for i, times in enumerate(instants)]
    slo = SLO(ttft_ms=5.0)
    items = [(None, trace, None) for trace in traces]
    batch = build_records(items, slo=slo)  # type: ignore[arg-type]
    alone = [build_record(None, trace, slo=slo) for trace in traces]  # type: ignore[arg-type]
    assert batch == alone
    for settled, times in zip(batch, instants, strict=True):
        record = settled.record
        assert record.token_times_ms == tuple((np.array(times, np.int64) / MS).tolist())
        assert record.output_tokens == len(times)
        assert record.first_token_ms == (times[0] / MS if times else None)
        assert record.last_token_ms == (times[-1] / MS if times else None)
        if len(times) >= 2:
            assert record.ttst_ms == (times[1] - times[0]) / MS
            assert record.tpot_ms == (times[-1] - times[0]) / (len(times) - 1) / MS


def test_a_batch_mixes_untraced_and_traced_requests_in_order() -> None:
    request = Request(id="u", input_length=5, output_length=2, block_size=64, hash_ids=[0])
    traced = completed("t", arrival_ms=0, tokens_ms=[10, 20, 30])
    empty = RequestTrace("e", input_length=4, output_length=2, arrival_ns=0)
    items = [(request, None, None), (None, traced, None), (None, empty, None)]
    batch = build_records(items, slo=None)  # type: ignore[arg-type]
    assert [s.record.request_id for s in batch] == ["u", "t", "e"]
    assert [s.record.token_times_ms for s in batch] == [(), (10.0, 20.0, 30.0), ()]
    assert [s.record.status for s in batch] == ["never_issued", "completed", "unplaced"]
    assert build_records([], slo=None) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(_instants.filter(lambda times: len(times) >= 2), max_size=8))
def test_gaps_from_runs_are_the_differences_of_each_requests_instants(
    instants: list[list[int]],
) -> None:
    columns = RequestColumns()
    for i, times in enumerate(instants):
        trace = _traced(f"r{i}", times, held=True)
        columns.add(build_record(None, trace, slo=None))  # type: ignore[arg-type]
    expected = [int(g) for times in instants for g in np.diff(np.array(times, np.int64))]
    gaps = columns.gaps_ns()
    assert gaps.dtype == np.int64
    assert gaps.tolist() == expected
    values, weights = columns.gap_runs()
    assert np.repeat(values, weights).tolist() == expected
    assert (weights > 0).all()


def test_rows_are_read_back_column_by_column() -> None:
    columns = RequestColumns()
    a = completed("a", arrival_ms=0, tokens_ms=[50, 60], input_length=7, reused=2)
    b = completed("b", arrival_ms=5, tokens_ms=[80], input_length=9)
    for trace in (a, b):
        columns.add(build_record(None, trace, slo=None))  # type: ignore[arg-type]
    columns.add(Settled(build_record(None, a, slo=None).record))  # no arrival, no completion
    assert len(columns) == 3
    assert columns.ints("input_length").tolist() == [7, 9, 7]
    assert columns.ints("reused_first").tolist() == [2, 0, 2]
    assert columns.sample("ttft_ms").tolist() == [50.0, 75.0, 50.0]
    assert columns.sample("ttst_ms").tolist() == [10.0, 10.0]
    measured, completed_mask = columns.masks()
    assert measured.tolist() == completed_mask.tolist() == [True, True, True]
    assert columns.status_counts()["completed"] == 3
    assert columns.span(measured=True) == 80 * MS


@settings(max_examples=40, deadline=None)
@given(st.lists(_instants, max_size=4), st.sampled_from(["measure", "primer"]))
def test_a_built_record_is_the_record_its_constructor_makes_from_its_values(
    instants: list[list[int]], phase: str
) -> None:
    # records are filled with plain stores (loadgen._blank): the result must be a
    # RequestRecord itself, equal to (and hashing as) the constructor's, every field set
    identity = Identity(conversation_id="c", turn_index=2, phase=phase)
    request = Request(
        id="r0", input_length=5, output_length=2, block_size=64, hash_ids=[0], identity=identity
    )
    items = [
        (request if i % 2 else None, _traced(f"r{i}", times, held=True), None)
        for i, times in enumerate(instants)
    ]
    for settled in build_records(items, slo=SLO(e2e_ms=1.0)):  # type: ignore[arg-type]
        record = settled.record
        assert type(record) is RequestRecord
        fields = {a.name: getattr(record, a.name) for a in attrs.fields(RequestRecord)}
        made = RequestRecord(**fields)
        assert record == made and hash(record) == hash(made)
        assert attrs.asdict(record, recurse=False) == attrs.asdict(made, recurse=False)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            record.status = "failed"  # type: ignore[misc]
