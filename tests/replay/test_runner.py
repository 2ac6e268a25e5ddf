"""replay.run: wiring, releases, stops, seeds, metadata and determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import simclock
from engines import TokenizerStage
from policies import KVAware, LeastLoaded, Random, RoundRobin, SessionAffinity
from replay import SEED_STREAMS, WorkloadValidationError, run

from ..policies.support import (
    KeepingTopology,
    engines_of,
    req,
    run_policy,
    statuses,
    topology,
    workload,
)

REPO = Path(__file__).resolve().parents[2]


def mixed_requests() -> list:  # type: ignore[type-arg]
    shared = [10, 11, 12, 13]
    return [
        req("a", prompt=256, output=5, ids=shared, conversation="c1"),
        req("b", prompt=200, output=3, at_ms=3, conversation="c2"),
        req("c", prompt=256, output=4, at_ms=7, ids=shared, conversation="c1"),
        req("d", prompt=64, output=8, at_ms=7, conversation="c3"),
        req("e", prompt=300, output=2, at_ms=40, conversation="c2"),
        req("f", prompt=128, output=6, at_ms=41),
    ]


def test_every_request_of_the_workload_ends_in_exactly_one_state() -> None:
    result = run_policy(RoundRobin(), mixed_requests())
    assert [r.request_id for r in result.requests] == list("abcdef")
    assert set(statuses(result).values()) == {"completed"}
    assert result.summary.status_counts["completed"] == 6


def test_requests_are_released_at_their_arrival_time() -> None:
    result = run_policy(RoundRobin(), mixed_requests())
    assert [r.arrival_ms for r in result.requests] == [0.0, 3.0, 7.0, 7.0, 40.0, 41.0]


def test_a_dependent_request_is_released_after_its_dependency_completes_plus_delay() -> None:
    from loadgen import ArrivalRule, Dep

    first = req("a", output=2)
    second = req("b", output=2)
    second = type(second)(
        id="b",
        input_length=128,
        output_length=2,
        block_size=64,
        hash_ids=second.hash_ids,
        arrival=ArrivalRule(not_before_ms=None, after=(Dep("a", "completion", 25.0),)),
    )
    result = run_policy(RoundRobin(), [first, second])
    a, b = result.requests
    assert a.terminal_ms == 60.0
    assert b.arrival_ms == 85.0


def test_a_dependent_of_a_rejected_request_is_never_released() -> None:
    from engines import EngineConfig

    topo = KeepingTopology(
        inner=topology(1), configs={0: EngineConfig(num_blocks=256, context_length=100)}
    )
    result = run_policy(RoundRobin(), [req("a", prompt=128), req("b", after=["a"])], topo=topo)
    # never released: the driver reports it skipped (REFERENCE-workloads §4.4)
    assert statuses(result) == {"a": "rejected", "b": "skipped"}


def test_same_seed_gives_identical_results_and_the_seed_matters_for_random() -> None:
    def placements(seed: int) -> dict[str, int | None]:
        return engines_of(run_policy(Random(), mixed_requests(), seed=seed))

    first = run_policy(Random(), mixed_requests(), seed=3)
    again = run_policy(Random(), mixed_requests(), seed=3)
    assert first.requests == again.requests
    assert first.summary == again.summary
    assert len({tuple(placements(s).values()) for s in range(6)}) > 1


def test_the_policy_generator_is_the_first_child_of_the_run_seed() -> None:
    import numpy as np

    assert SEED_STREAMS == ("policy", "driver", "topology", "workload")
    seen = engines_of(run_policy(Random(), [req(f"r{i}", at_ms=i) for i in range(8)], seed=9))
    rng = np.random.default_rng(np.random.SeedSequence(9).spawn(3)[0])
    assert list(seen.values()) == [int(x) for x in rng.integers(2, size=8)]


def test_session_affinity_keeps_a_conversation_on_one_engine() -> None:
    result = run_policy(SessionAffinity(fallback=RoundRobin()), mixed_requests())
    placed = engines_of(result)
    assert placed["a"] == placed["c"]
    assert placed["b"] == placed["e"]
    assert placed == {"a": 0, "b": 1, "c": 0, "d": 0, "e": 1, "f": 1}


def test_kv_aware_sends_a_shared_prefix_to_the_engine_that_holds_it() -> None:
    shared = [1, 2, 3, 4]
    requests = [
        req("a", prompt=256, output=2, ids=shared),
        req("x", prompt=256, output=2, at_ms=1),
        req("b", prompt=256, output=2, ids=shared, at_ms=200),
    ]
    result = run_policy(KVAware(), requests)
    placed = engines_of(result)
    assert placed["b"] == placed["a"]
    assert result.requests[2].reused_input_tokens == 192


def test_the_cutoff_stops_the_run_leaving_requests_incomplete_or_never_issued() -> None:
    requests = [req("a", output=50), req("b", output=2, at_ms=500)]
    result = run_policy(LeastLoaded(), requests, max_virtual_time_s=0.2)
    assert statuses(result) == {"a": "incomplete", "b": "never_issued"}
    assert result.meta.virtual_duration_ms == 200.0


def test_the_tokenizer_stage_delays_routing_but_not_the_arrival() -> None:
    stage = TokenizerStage(workers=1, base_ms=5.0, per_input_token_us=500.0)
    requests = [req("a", prompt=4, output=1), req("b", prompt=4, output=1)]
    result = run_policy(RoundRobin(), requests, tokenizer=stage)
    a, b = result.requests
    assert (a.arrival_ms, a.tokenized_ms, a.engine_arrival_ms) == (0.0, 7.0, 7.0)
    assert (b.arrival_ms, b.tokenize_start_ms, b.tokenized_ms) == (0.0, 7.0, 14.0)
    assert a.ttft_ms == 57.0


def test_run_metadata_echoes_the_configuration() -> None:
    result = run_policy(RoundRobin(), mixed_requests(), seed=42)
    meta = result.meta
    assert meta.seed == 42
    assert meta.simclock_version == simclock.__version__
    assert meta.config["policy"] == "round_robin"
    assert meta.config["topology"] == {
        "type": "aggregated",
        "workers": 2,
        "engine": {
            "num_blocks": 256,
            "block_size": 64,
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 256,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
            "context_length": 2**31 - 1,
            "watermark_fraction": 0.0,
            "role": "aggregated",
        },
        "timing": {"type": "FixedTiming", "prefill_ms": 50.0, "decode_ms": 10.0},
    }
    assert meta.virtual_duration_ms == max(r.terminal_ms or 0.0 for r in result.requests)
    assert meta.events_processed > 0
    assert meta.wall_time_s > 0
    assert [e.index for e in meta.engines] == [0, 1]
    assert all(e.passes > 0 for e in meta.engines)


@pytest.mark.parametrize(
    ("seed", "message"),
    [(-1, "seed: must be an int >= 0, got -1"), (1.5, "seed: must be an int >= 0, got 1.5")],
)
def test_a_bad_seed_is_refused(seed: object, message: str) -> None:
    with pytest.raises(WorkloadValidationError) as info:
        run(workload([req("a")]), topology=topology(), policy=RoundRobin(), seed=seed)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_a_bad_cutoff_is_refused() -> None:
    with pytest.raises(WorkloadValidationError) as info:
        run_policy(RoundRobin(), [req("a")], max_virtual_time_s=0.0)
    assert str(info.value) == "max_virtual_time_s: must be finite and > 0, got 0.0"


def test_an_empty_workload_replays_to_an_empty_report() -> None:
    result = run_policy(RoundRobin(), [])
    assert result.requests == ()
    assert result.meta.virtual_duration_ms == 0.0


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {repo!r})
    from tests.replay.test_runner import mixed_requests
    from tests.policies.support import run_policy
    from policies import KVAware, Random, SessionAffinity
    out = []
    for policy in (Random(), KVAware(temperature=0.7), SessionAffinity()):
        result = run_policy(policy, mixed_requests(), seed=5)
        out.append([
            (r.request_id, r.engine, r.ttft_ms, r.e2e_ms, r.reused_input_tokens)
            for r in result.requests
        ])
    print(json.dumps(out))
    """
)


def test_results_do_not_depend_on_the_hash_seed() -> None:
    outputs = []
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT.format(repo=str(REPO))],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert len(json.loads(outputs[0])) == 3


def test_the_load_mode_drives_releases() -> None:
    from loadgen import LoadMode

    requests = [req("a", output=1), req("b", output=1, at_ms=100), req("c", output=1, at_ms=300)]
    result = run_policy(RoundRobin(), requests, load=LoadMode(speedup=2.0))
    assert [r.arrival_ms for r in result.requests] == [0.0, 50.0, 150.0]
    assert result.meta.config["load"]["speedup"] == 2.0  # type: ignore[index]
    capped = run_policy(RoundRobin(), requests, load=LoadMode(max_requests=2))
    assert statuses(capped) == {"a": "completed", "b": "completed", "c": "never_issued"}


def test_an_engine_failure_ends_the_run_with_a_report() -> None:
    import attrs

    from engines import EngineConfig, PassTimingError
    from replay import Aggregated, ReplayFailedError

    @attrs.frozen
    class Broken:
        def pass_time_ms(self, shape: object) -> float:
            return -1.0

    topo = Aggregated(workers=1, engine=EngineConfig(num_blocks=64), timing=Broken())
    with pytest.raises(ReplayFailedError) as info:
        run(workload([req("a")]), topology=topo, policy=RoundRobin(), seed=0)
    assert isinstance(info.value.__cause__, PassTimingError)
    assert statuses(info.value.result) == {"a": "incomplete"}


def test_engine_usage_reports_busy_time_and_passes() -> None:
    # one request alone on engine 0: a 50 ms prefill pass, then 2 decode passes of 10 ms
    result = run_policy(RoundRobin(), [req("a", output=3)])
    usage = {e.index: (e.busy_ns, e.passes) for e in result.meta.engines}
    assert usage == {0: (70_000_000, 3), 1: (0, 0)}
