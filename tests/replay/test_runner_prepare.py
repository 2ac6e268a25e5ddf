"""replay.prepare: validation, deterministic ids, block-id normalisation."""

from __future__ import annotations

import attrs
import pytest

from loadgen import ArrivalRule, Dep
from replay import WorkloadValidationError, normalize_block_ids, prepare, validate_requests

from ..policies.support import req, workload


def test_prepare_keeps_ids_and_order_and_indexes_positions() -> None:
    requests = [req("x:1"), req("x:2", at_ms=5), req("x:3", after=["x:1"])]
    prepared = prepare(workload(requests), engine_block_size=16)
    assert [r.id for r in prepared.requests] == ["x:1", "x:2", "x:3"]
    assert dict(prepared.positions) == {"x:1": 0, "x:2": 1, "x:3": 2}
    assert prepared.engine_block_size == 16
    assert prepared.requests[0] is requests[0]  # nothing to normalise: the same object
    assert len(prepared) == 3


def test_surplus_content_ids_are_trimmed_and_counted() -> None:
    long = attrs.evolve(req("a", prompt=100, block_size=64), hash_ids=[1, 2, 3, 4])
    prepared = prepare(workload([long]))
    assert prepared.requests[0].hash_ids.tolist() == [1, 2]
    assert prepared.trimmed_ids == 2
    assert normalize_block_ids(prepared.requests[0]) is prepared.requests[0]


def _bad(**changes: object) -> object:
    return attrs.evolve(req("a", prompt=128), **changes)


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([req("a"), req("a")], "request 'a': id: duplicate of request at position 0"),
        ([_bad(id="")], "request '': id: must be a non-empty string"),
        ([_bad(input_length=0)], "request 'a': input_length: must be >= 1, got 0"),
        ([_bad(output_length=-1)], "request 'a': output_length: must be >= 0, got -1"),
        ([_bad(block_size=0)], "request 'a': block_size: must be >= 1, got 0"),
        (
            [_bad(hash_ids=[1])],
            "request 'a': hash_ids: 1 ids cover at most 64 tokens at block_size 64; "
            "input_length 128 needs 2",
        ),
        (
            [_bad(arrival=ArrivalRule(not_before_ms=-1.0))],
            "request 'a': arrival.not_before_ms: must be finite and >= 0, got -1.0",
        ),
        (
            [_bad(arrival=ArrivalRule(not_before_ms=None))],
            "request 'a': arrival: a request without dependencies needs not_before_ms",
        ),
        ([req("a", after=["a"])], "request 'a': arrival.after: depends on itself"),
        ([req("a", after=["zz"])], "request 'a': arrival.after: unknown request 'zz'"),
        (
            [req("b"), _bad(arrival=ArrivalRule(None, (Dep("b", delay_ms=float("inf")),)))],
            "request 'a': arrival.after.delay_ms: must be finite and >= 0, got inf",
        ),
    ],
)
def test_invalid_workloads_are_refused_with_the_request_and_field(
    requests: list[object], message: str
) -> None:
    with pytest.raises(WorkloadValidationError) as info:
        validate_requests(requests)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert str(info.value) == message


def test_an_invalid_engine_block_size_is_refused() -> None:
    with pytest.raises(WorkloadValidationError) as info:
        prepare(workload([req("a")]), engine_block_size=0)
    assert str(info.value) == "engine_block_size: must be an int >= 1, got 0"


def test_prepare_keeps_the_tokenizer_stage_and_refuses_anything_else() -> None:
    from engines import TokenizerStage

    stage = TokenizerStage(workers=2, base_ms=1.0)
    assert prepare(workload([req("a")]), tokenizer=stage).tokenizer is stage
    with pytest.raises(WorkloadValidationError) as info:
        prepare(workload([req("a")]), tokenizer="fast")
    assert str(info.value) == (
        "tokenizer: must be a tokenizer stage (engines.TokenizerStage), got 'fast'"
    )
