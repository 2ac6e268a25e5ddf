"""The scheduler seam: ``EngineConfig(scheduler=...)`` decides every pass of an engine."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest

from engines import (
    SCHEDULERS,
    EngineConfig,
    EngineCore,
    EngineScheduler,
    FixedTiming,
    KVCache,
    Pass,
    Scheduler,
    SGLangScheduler,
    VLLMRules,
    VLLMScheduler,
)
from loadgen import LoadMode, generate_synthetic, parse_synthetic
from policies import RoundRobin
from replay import Aggregated, run, write_outputs

from .sim import core, req, simulate


def test_the_default_scheduler_is_vllm_and_every_built_in_is_named() -> None:
    config = EngineConfig(num_blocks=10)
    assert config.scheduler == VLLMScheduler()
    assert isinstance(config.scheduler, Scheduler)
    assert dict(SCHEDULERS) == {"vllm": VLLMScheduler, "sglang": SGLangScheduler}
    assert VLLMScheduler().name == "vllm"
    assert VLLMScheduler().options() == {}
    assert VLLMScheduler(evict_empty_first=True).options() == {"evict_empty_first": True}
    c = core(config, FixedTiming(prefill_ms=5, decode_ms=1))
    assert isinstance(c.scheduler, EngineScheduler)
    assert isinstance(c.scheduler, VLLMRules)
    assert c.kv.empty is None  # vLLM's one free queue
    evicting = core(
        EngineConfig(num_blocks=10, scheduler=VLLMScheduler(evict_empty_first=True)),
        FixedTiming(prefill_ms=5, decode_ms=1),
    )
    assert evicting.kv.empty is not None  # AISimulate's order: blocks caching nothing first


@attrs.frozen
class Counting:
    """vLLM's rules, counting the passes it is asked for and the runs it plans; with
    ``macro=False`` it plans none, leaving its engine to per-pass steps."""

    macro: bool = True
    calls: dict[str, int] = attrs.field(factory=dict, eq=False)

    @property
    def name(self) -> str:
        return "counting"

    def options(self) -> dict[str, Any]:
        return {"macro": self.macro}

    def make_cache(self, config: EngineConfig) -> KVCache:
        return KVCache(config.num_blocks, config.block_size)

    def bind(self, core: EngineCore) -> EngineScheduler:
        return _CountingRules(core, self)


class _CountingRules(VLLMRules):
    __slots__ = ("_owner",)

    def __init__(self, core: EngineCore, owner: Counting) -> None:
        super().__init__(core, VLLMScheduler())
        self._owner = owner

    def schedule(self, now_ns: int) -> Pass | None:
        calls = self._owner.calls
        calls["schedule"] = calls.get("schedule", 0) + 1
        return super().schedule(now_ns)

    def plan_run(self, now_ns: int, publish: Any, max_passes: int) -> Any:
        if not self._owner.macro:
            return None
        run = super().plan_run(now_ns, publish, max_passes)
        if run is not None:
            calls = self._owner.calls
            calls["runs"] = calls.get("runs", 0) + 1
        return run


def _replay(scheduler: Scheduler | None, stepping: str = "macro") -> dict[str, bytes]:
    """``requests.jsonl`` and ``summary.json`` of a replay of 60 synthetic requests on two
    engines tight enough on blocks to preempt."""
    spec = parse_synthetic(
        "count=60 arrivals=poisson(20) input=lognormal(900,400) output=lognormal(60,30)"
    )
    workload = generate_synthetic(spec, seed=3)
    engine = EngineConfig(num_blocks=300, block_size=16, max_num_batched_tokens=512)
    if scheduler is not None:
        engine = attrs.evolve(engine, scheduler=scheduler)
    result = run(
        workload,
        topology=Aggregated(
            workers=2, engine=engine, timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0)
        ),
        policy=RoundRobin(),
        load=LoadMode(),
        stepping=stepping,  # type: ignore[arg-type]
    )
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, out)
        names = ("requests.jsonl", "summary.json")
        return {name: (Path(out) / name).read_bytes() for name in names}


def test_an_engine_asks_its_scheduler_for_every_pass_and_run() -> None:
    counting = Counting()
    outputs = _replay(counting)
    assert outputs == _replay(None)  # vLLM's rules through the seam: the same bytes
    assert json.loads(outputs["summary.json"])["preemptions"] > 0
    assert counting.calls["schedule"] > 50
    assert counting.calls["runs"] > 5  # macro-stepped runs were planned by the scheduler


def test_a_scheduler_that_plans_no_runs_gives_the_per_pass_results() -> None:
    per_pass = Counting(macro=False)
    assert _replay(per_pass) == _replay(None, stepping="pass")
    assert "runs" not in per_pass.calls
    # every pass was scheduled one at a time: more passes asked for than with runs
    macro = Counting()
    _replay(macro)
    assert per_pass.calls["schedule"] > macro.calls["schedule"]


def test_a_scheduler_option_changes_the_schedule() -> None:
    """``admit_whole_prompt`` through the seam (the worked example of the scheduler tests)."""
    config = EngineConfig(
        num_blocks=8,
        block_size=16,
        max_num_batched_tokens=32,
        scheduler=VLLMScheduler(admit_whole_prompt=True),
    )
    c = core(config, FixedTiming(prefill_ms=50, decode_ms=10))
    simulate(c, [req("a", 32, 40), req("b", 96, 2, arrival_ms=10)])
    assert c.journal.traces["b"].num_preemptions == 0
    assert c.journal.traces["b"].first_admit_ns == 440 * 1_000_000


def test_an_object_that_is_not_a_scheduler_is_refused() -> None:
    class NoBind:
        name = "x"

        def options(self) -> dict[str, Any]:
            return {}

    with pytest.raises(ValueError, match="must be a Scheduler"):
        EngineConfig(num_blocks=4, scheduler=NoBind())  # type: ignore[arg-type]
