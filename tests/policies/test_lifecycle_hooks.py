"""The lifecycle hooks ``on_admitted``, ``on_first_token`` and ``on_preempted``: called with
the engine's event, at its instant, for the requests on the runtime's own engines; the same
calls whether engines step pass by pass or jump over runs of passes, and no change in results."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs

from engines import EngineConfig, EventKind, FixedTiming, LifecycleEvent
from loadgen import LoadMode, generate_synthetic, parse_synthetic
from policies import PDPolicy, RoundRobin
from replay import Aggregated, Disaggregated, KVLink, run, write_outputs


@attrs.define
class Watching(RoundRobin):
    """Round robin that notes every lifecycle hook call."""

    calls: list[tuple[str, str, int | None, int]] = attrs.field(factory=list)

    def on_admitted(self, event: LifecycleEvent) -> None:
        assert event.kind is EventKind.ADMITTED
        self.calls.append(("admitted", event.request_id, event.engine, event.time_ns))

    def on_first_token(self, event: LifecycleEvent) -> None:
        assert event.kind is EventKind.FIRST_TOKEN
        self.calls.append(("first_token", event.request_id, event.engine, event.time_ns))

    def on_preempted(self, event: LifecycleEvent) -> None:
        assert event.kind is EventKind.PREEMPTED
        self.calls.append(("preempted", event.request_id, event.engine, event.time_ns))


def _workload() -> Any:
    spec = parse_synthetic(
        "count=60 arrivals=poisson(20) input=lognormal(900,400) output=lognormal(60,30)"
    )
    return generate_synthetic(spec, seed=3)


def _topology() -> Aggregated:
    # tight on blocks: requests are preempted and readmitted
    return Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=300, block_size=16, max_num_batched_tokens=512),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )


def _files(result: Any) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        names = ("requests.jsonl", "summary.json")
        return {name: (Path(out) / name).read_bytes() for name in names}


def test_the_hooks_see_each_event_at_its_instant_in_both_stepping_modes() -> None:
    macro, per_pass = Watching(), Watching()
    macro_result = run(
        _workload(), topology=_topology(), policy=macro, load=LoadMode(), stepping="macro"
    )
    macro_files = _files(macro_result)
    pass_files = _files(
        run(_workload(), topology=_topology(), policy=per_pass, load=LoadMode(), stepping="pass")
    )
    assert macro.calls == per_pass.calls
    assert macro_files == pass_files
    # and the hooks change nothing
    plain = _files(run(_workload(), topology=_topology(), policy=RoundRobin(), load=LoadMode()))
    assert macro_files == plain
    kinds = [kind for kind, *_ in macro.calls]
    sampling = sum(1 for r in macro_result.requests if r.first_token_ms is not None)
    assert sampling > 50
    assert kinds.count("first_token") == sampling
    assert kinds.count("preempted") == macro_result.summary.preemptions > 0
    # every admission, readmissions too
    assert kinds.count("admitted") == sum(len(r.admissions) for r in macro_result.requests)
    # the events are the journal's: ADMITTED before FIRST_TOKEN for each request
    first: dict[str, str] = {}
    for kind, rid, _, _ in macro.calls:
        first.setdefault(rid, kind)
    assert set(first.values()) == {"admitted"}


def test_each_pool_of_a_pd_run_hears_of_its_own_engines() -> None:
    prefill, decode = Watching(), Watching()
    topology = Disaggregated(
        prefill_workers=1,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=600, block_size=16, max_num_batched_tokens=512),
        decode_engine=EngineConfig(num_blocks=600, block_size=16, max_num_batched_tokens=512),
        link=KVLink(bandwidth_gbps=50.0, kv_bytes_per_token=131072.0),
        prefill_timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
        decode_timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )
    result = run(
        _workload(),
        topology=topology,
        policy=PDPolicy(prefill=prefill, decode=decode),
        load=LoadMode(),
    )
    sampling = sum(1 for r in result.requests if r.first_token_ms is not None)
    assert sampling > 50
    assert {engine for _, _, engine, _ in prefill.calls} == {0}  # the prefill engine
    assert {engine for _, _, engine, _ in decode.calls} == {1, 2}  # the decode engines
    assert [k for k, *_ in prefill.calls].count("admitted") >= sampling
    assert [k for k, *_ in decode.calls].count("first_token") == sampling
