"""A synthetic workload kept as columns all the way through a replay.

Preparation keeps a :class:`loadgen.SyntheticRequests` as it is (its ``positions()`` as the id
table, no request built) when its columns pass the checks, and checks it request by request
otherwise; the report reads the driver's outcomes by position. Every way of replaying it gives
the same bytes as the eager workload.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import replay._cli as cli
import replay._config_run as config_run
import simclock
from engines import EngineConfig, FixedTiming
from loadgen import (
    LoadMode,
    Outcomes,
    SyntheticRequests,
    Workload,
    generate_synthetic,
    parse_synthetic,
)
from loadgen._synthetic_table import SyntheticPositions
from policies import KVAware
from replay import (
    OUTPUT_FILES,
    Aggregated,
    RequestLog,
    RunMeta,
    WorkloadValidationError,
    finalize,
    prepare,
    run,
    write_outputs,
)
from replay._run import Run, report_run

SPECS = {
    "open": "count=50 arrivals=poisson(20) input=uniform(1,300) output=uniform(0,6)",
    "groups": "count=40 arrivals=poisson(10) input=lognormal(600,300) output=9 prefix_groups=3 "
    "shared_prefix_ratio=0.5 block_size=32",
    "sessions": "count=15 arrivals=poisson(4) input=200 output=uniform(1,20) "
    "turns=uniform(1,4) think_ms=exponential(300) new_input=100 block_size=16",
}


def _workload(name: str, *, lazy: bool, seed: int = 5) -> Workload:
    return generate_synthetic(parse_synthetic(SPECS[name]), seed=seed, lazy=lazy)


def _topology() -> Aggregated:
    return Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=40, block_size=16),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )


# -- preparation ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SPECS)
def test_prepare_keeps_replayable_columns_without_building_a_request(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy = _workload(name, lazy=True)
    eager = prepare(_workload(name, lazy=False), engine_block_size=16)
    requests = lazy.requests
    assert isinstance(requests, SyntheticRequests)
    assert requests.replayable()
    built: list[int] = []
    build = SyntheticRequests._at

    def counted(self: SyntheticRequests, i: int) -> Any:
        built.append(i)
        return build(self, i)

    monkeypatch.setattr(SyntheticRequests, "_at", counted)
    prepared = prepare(lazy, engine_block_size=16)
    assert built == []  # no request built, no table of ids
    assert prepared.requests is requests
    assert isinstance(prepared.positions, SyntheticPositions)
    monkeypatch.undo()
    assert prepared.engine_block_size == 16 and prepared.trimmed_ids == 0
    assert len(prepared) == len(eager)
    assert list(prepared.requests) == list(eager.requests)
    assert dict(prepared.positions) == dict(eager.positions)


def _columns(**changes: Any) -> dict[str, Any]:
    """The columns of three open-loop requests of 100 tokens (two blocks of 64 each)."""
    columns: dict[str, Any] = {
        "input_lengths": [100, 100, 100],
        "output_lengths": [4, 4, 4],
        "block_size": 64,
        "content": [1, 2, 3, 4, 5, 6],
        "ends": [2, 4, 6],
        "not_before_ms": [0.0, 1.0, 2.0],
    }
    columns.update(changes)
    return columns


_SESSIONS = {
    "input_lengths": [100, 100, 100],
    "output_lengths": [4, 4, 4],
    "block_size": 64,
    "content": [1, 2, 3, 4, 5, 6],
    "ends": [2, 4, 6],
    "not_before_ms": [0.0, math.nan, 5.0],
}


def _sessions(sessions: list[int], turns: list[int], think: list[float]) -> dict[str, Any]:
    return {**_SESSIONS, "sessions": (sessions, turns, think)}


@pytest.mark.parametrize(
    "columns",
    [
        pytest.param(_columns(input_lengths=[100, 0, 100]), id="no-input"),
        pytest.param(_columns(output_lengths=[4, -1, 4]), id="negative-output"),
        pytest.param(_columns(block_size=0), id="block-size-0"),
        pytest.param(_columns(ends=[2, 3, 6]), id="too-few-ids"),
        pytest.param(_columns(ends=[3, 4, 6]), id="surplus-ids"),
        pytest.param(_columns(input_lengths=[100, 100, 200], ends=[2, 4, 6]), id="short-last"),
        pytest.param(_columns(not_before_ms=[0.0, -1.0, 2.0]), id="negative-release"),
        pytest.param(_columns(not_before_ms=[0.0, math.inf, 2.0]), id="infinite-release"),
        pytest.param(_columns(not_before_ms=[0.0, math.nan, 2.0]), id="no-release"),
        pytest.param(_sessions([0, 0, 1], [0, 1, 0], [0.0, -2.0, 0.0]), id="negative-think"),
        pytest.param(_sessions([0, 0, 1], [0, 1, 0], [0.0, math.inf, 0.0]), id="infinite-think"),
        pytest.param(_sessions([0, 0, 0], [0, 1, 1], [0.0, 1.0, 1.0]), id="duplicate-turn"),
        pytest.param(_sessions([0, 0, 0], [0, 2, 3], [0.0, 1.0, 1.0]), id="missing-turn"),
        pytest.param(_sessions([1, 1, 0], [0, 1, 0], [0.0, 1.0, 0.0]), id="sessions-out-of-order"),
        pytest.param(_sessions([0, 0, 2], [0, 1, 0], [0.0, 1.0, 0.0]), id="session-skipped"),
    ],
)
def test_columns_that_fail_a_check_are_prepared_request_by_request(
    columns: dict[str, Any],
) -> None:
    table = SyntheticRequests(**columns)
    assert not table.replayable()
    lazy = Workload(requests=table, source="syn", format="synthetic")
    eager = Workload(requests=tuple(table), source="syn", format="synthetic")
    try:
        expected = prepare(eager)
    except WorkloadValidationError as exc:
        with pytest.raises(WorkloadValidationError) as caught:
            prepare(lazy)
        assert str(caught.value) == str(exc)
        return
    prepared = prepare(lazy)
    assert isinstance(prepared.requests, tuple)
    assert prepared.requests == expected.requests
    assert dict(prepared.positions) == dict(expected.positions)
    assert prepared.trimmed_ids == expected.trimmed_ids


def test_well_formed_columns_pass_the_checks() -> None:
    assert SyntheticRequests(**_columns()).replayable()
    assert SyntheticRequests(**_sessions([0, 0, 1], [0, 1, 0], [0.0, 0.0, 0.0])).replayable()
    empty = _columns(input_lengths=[], output_lengths=[], content=[], ends=[], not_before_ms=[])
    assert SyntheticRequests(**empty).replayable()
    assert not SyntheticRequests(**{**empty, "block_size": 0}).replayable()


# -- replays ----------------------------------------------------------------------------------


def _files(workload: Workload, out: Path, *, stream: bool, load: LoadMode | None) -> dict:
    options: dict[str, Any] = {"topology": _topology(), "policy": KVAware(), "seed": 3}
    if load is not None:
        options["load"] = load
    if stream:
        with RequestLog.open(out, token_times="runs") as log:
            result = run(workload, request_log=log, **options)
            write_outputs(result, out, token_times="runs", request_log=log)
    else:
        result = run(workload, **options)
        write_outputs(result, out, token_times="runs")
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


LOADS = {
    "timestamps": None,
    "speedup": LoadMode(speedup=3.0),
    "closed-loop": LoadMode(concurrency=3),
    "cutoff": LoadMode(max_virtual_time_s=1.5),
}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "kept"])
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("name", SPECS)
def test_a_lazy_workload_replays_to_the_eager_ones_bytes(
    name: str, load: str, stream: bool, tmp_path: Path
) -> None:
    eager = _files(_workload(name, lazy=False), tmp_path / "eager", stream=stream, load=LOADS[load])
    lazy = _files(_workload(name, lazy=True), tmp_path / "lazy", stream=stream, load=LOADS[load])
    assert set(eager) == {"config.json", "requests.jsonl", "summary.json"}
    assert lazy == eager


class _ByIndexOnly(Outcomes):
    """Outcomes that may be read by position only, each at most once."""

    __slots__ = ("read",)

    def __init__(self, outcomes: Outcomes) -> None:
        super().__init__(outcomes._ledger, outcomes._others)
        self.read: list[int] = []

    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("the report listed every outcome")

    def __getitem__(self, index: Any) -> Any:
        assert isinstance(index, int) and index not in self.read
        self.read.append(index)
        return super().__getitem__(index)


@pytest.mark.parametrize("name", SPECS)
def test_the_report_reads_the_drivers_outcomes_by_position(name: str) -> None:
    workload = _workload(name, lazy=True)
    whole = Run.build(workload, topology=_topology(), policy=KVAware(), seed=3)
    whole.advance()  # to the end of the replay, without its report
    replay, echo = whole.parts, whole.echo
    now_ns, events = whole.now_ns, whole.loop.stats().events
    whole.close()
    report = replay.driver_report
    assert report is not None and isinstance(report.requests, Outcomes)
    by_index = _ByIndexOnly(report.requests)

    def finish(requests: Any) -> Any:
        replay.driver_report = attrs.evolve(report, requests=requests)
        return report_run(replay, workload, echo, now_ns=now_ns, events=events, wall_time_s=0.0)

    listed = finish(tuple(report.requests))
    read = finish(by_index)
    assert by_index.read == list(range(len(workload)))
    assert read == listed
    assert [r.request_id for r in read.requests] == [r.id for r in workload.requests]
    eager = run(_workload(name, lazy=False), topology=_topology(), policy=KVAware(), seed=3)
    assert read.summary == eager.summary and read.requests == eager.requests


def test_an_outcome_at_the_wrong_position_is_an_internal_error() -> None:
    workload = _workload("open", lazy=True)
    whole = Run.build(workload, topology=_topology(), policy=KVAware(), seed=3)
    whole.advance()
    whole.close()
    replay = whole.parts
    report = replay.driver_report
    assert report is not None and isinstance(report.requests, Outcomes)
    outcomes = report.requests
    # the outcomes of the same requests, the first two swapped
    swapped = [outcomes[1], outcomes[0], *outcomes[2:]]
    with pytest.raises(
        simclock.InternalError, match="outcome at position 0 is that of request 'syn:1'"
    ):
        finalize(
            replay.journal,
            workload=workload,
            meta=RunMeta(seed=3, engines=replay.engine_usage()),
            driver=attrs.evolve(report, requests=_Swapped(outcomes, swapped)),
        )


class _Swapped(Outcomes):
    """Outcomes listed in another order (a driver bug)."""

    __slots__ = ("_listed",)

    def __init__(self, outcomes: Outcomes, listed: list[Any]) -> None:
        super().__init__(outcomes._ledger, outcomes._others)
        self._listed = listed

    def __getitem__(self, index: Any) -> Any:
        return self._listed[index]


@pytest.mark.parametrize("extra", [[], ["--concurrency", "3"]], ids=["timestamps", "closed-loop"])
@pytest.mark.parametrize("name", SPECS)
def test_the_cli_generates_lazily_and_writes_the_eager_bytes(
    name: str, extra: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generate = config_run.generate_synthetic
    kinds: list[type] = []

    def seen(spec: Any, **options: Any) -> Workload:
        workload = generate(spec, **options)
        kinds.append(type(workload.requests))
        return workload

    def eager(spec: Any, **options: Any) -> Workload:
        return generate(spec, **{**options, "lazy": False})

    args = ["replay", "--synthetic", SPECS[name], "--token-times", "runs", *extra]
    args += ["--timing", "fixed", "--workers", "2", "--quiet"]
    monkeypatch.setattr(config_run, "generate_synthetic", seen)
    assert cli.main([*args, "--output-dir", str(tmp_path / "lazy")]) == cli.EXIT_OK
    assert kinds == [SyntheticRequests]
    monkeypatch.setattr(config_run, "generate_synthetic", eager)
    assert cli.main([*args, "--output-dir", str(tmp_path / "eager")]) == cli.EXIT_OK
    for file in OUTPUT_FILES:
        assert (tmp_path / "lazy" / file).read_bytes() == (tmp_path / "eager" / file).read_bytes()
