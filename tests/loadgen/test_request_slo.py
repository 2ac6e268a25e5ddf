"""A request's own SLO: from an agentic trace's ``slo`` field or a synthetic spec's ``slo``;
one ``SLO`` type for requests and runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import replay
from loadgen import (
    SLO,
    SLOError,
    TraceFormatError,
    WorkloadConfigError,
    generate_synthetic,
    parse_synthetic,
    read_agentic,
)
from loadgen._agentic import read_agentic_records
from loadgen._intern import ContentInterner

ROWS = (
    '{"request_id":"A","timestamp":0,"input_length":600,"output_length":3,"hash_ids":[1,2],'
    '"slo":{"ttft_ms":500,"tpot_ms":50}}',
    '{"request_id":"B","wait_for":["A"],"input_length":900,"output_length":2,"hash_ids":[1,2]}',
    '{"request_id":"C","timestamp":10,"input_length":300,"output_length":4,"hash_ids":[7],'
    '"slo":{"e2e_ms":2000.5}}',
    '{"request_id":"D","timestamp":20,"input_length":300,"output_length":4,"hash_ids":[8],'
    '"slo":{}}',
)


def _write(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "ex.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_run_and_the_requests_share_one_slo_type() -> None:
    assert replay.SLO is SLO
    assert replay.SLOError is SLOError


def test_agentic_rows_carry_their_own_slo(tmp_path: Path) -> None:
    workload = read_agentic(_write(tmp_path, *ROWS))
    slos = {r.id: r.slo for r in workload.requests}
    assert slos == {
        "ex:A/A": SLO(ttft_ms=500.0, tpot_ms=50.0),
        "ex:A/B": None,  # a row without one: the run's SLO applies
        "ex:C/C": SLO(e2e_ms=2000.5),
        "ex:D/D": None,  # an empty object is no SLO
    }


def test_a_trace_without_slos_reads_the_same_by_either_path(tmp_path: Path) -> None:
    rows = [row.split(',"slo"')[0] + "}" if '"slo"' in row else row for row in ROWS]
    path = _write(tmp_path, *rows)
    fast = read_agentic(path)
    records = read_agentic_records(str(path), "ex", 512, ContentInterner())
    assert fast.requests == records.requests
    assert all(r.slo is None for r in fast.requests)


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        ('"fast"', 'slo: must be an object such as {"ttft_ms": 500}, got "fast"'),
        ('{"ttft":500}', "slo.ttft: unknown bound (expected ttft_ms, tpot_ms, e2e_ms)"),
        ('{"tpot_ms":-1}', "slo.tpot_ms: must be a finite number >= 0 (ms), got -1"),
        ('{"e2e_ms":true}', "slo.e2e_ms: must be a finite number >= 0 (ms), got true"),
    ],
)
def test_a_bad_slo_names_file_line_and_field(tmp_path: Path, slo: str, message: str) -> None:
    row = ROWS[1][:-1] + f',"slo":{slo}}}'
    path = _write(tmp_path, ROWS[0], row)
    with pytest.raises(TraceFormatError) as error:
        read_agentic(path)
    assert str(error.value) == f"{path}:2: {message}"


@pytest.mark.parametrize("lazy", [False, True])
def test_a_synthetic_spec_gives_every_request_its_slo(lazy: bool) -> None:
    spec = parse_synthetic("count=5 arrivals=poisson(2) turns=2 slo=ttft=500,tpot=50")
    assert spec.slo == SLO(ttft_ms=500, tpot_ms=50)
    workload = generate_synthetic(spec, seed=1, lazy=lazy)
    assert [r.slo for r in workload.requests] == [SLO(ttft_ms=500, tpot_ms=50)] * 10
    plain = generate_synthetic(parse_synthetic("count=5 arrivals=poisson(2) turns=2"), seed=1)
    assert all(r.slo is None for r in plain.requests)
    # the SLO changes nothing else
    assert [(r.id, r.arrival, r.input_length) for r in plain.requests] == [
        (r.id, r.arrival, r.input_length) for r in workload.requests
    ]


def test_a_synthetic_slo_from_a_config_table() -> None:
    from loadgen import SyntheticSpec

    spec = SyntheticSpec.from_dict({"count": 2, "arrivals": "poisson(1)", "slo": {"e2e": 900}})
    assert spec.slo == SLO(e2e_ms=900)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slo=ttft=fast", "slo: ttft: 'fast' is not a number"),
        ("slo=speed=3", "slo: unknown metric 'speed' (expected ttft, tpot, e2e)"),
        ("slo=3", "slo: expected bounds such as 'ttft=500,tpot=50', got 3"),
    ],
)
def test_a_bad_synthetic_slo_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(WorkloadConfigError) as error:
        parse_synthetic(f"count=2 arrivals=poisson(1) {text}")
    assert str(error.value) == message
