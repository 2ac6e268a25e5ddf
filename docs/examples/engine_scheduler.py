"""A scheduler of one's own: vLLM's rules with the shortest waiting prompt admitted first.

Run: ``python docs/examples/engine_scheduler.py``. The scheduler is one class that
describes it (options, KV cache, binding) and one that applies it to an engine; both
stepping modes give the same results with it.
"""

from __future__ import annotations

import attrs

from engines import (
    EngineConfig,
    EngineCore,
    FixedTiming,
    KVCache,
    Pass,
    Scheduler,
    VLLMRules,
    VLLMScheduler,
)
from loadgen import ArrivalRule, LoadMode, Request, Workload
from policies import RoundRobin
from replay import Aggregated, run


@attrs.frozen
class ShortestPromptFirst:
    """vLLM's rules, except that fresh waiting requests are admitted shortest prompt first
    (preempted requests keep their place at the front)."""

    @property
    def name(self) -> str:
        return "shortest_prompt_first"

    def options(self) -> dict[str, object]:
        return {}

    def make_cache(self, config: EngineConfig) -> KVCache:
        return KVCache(config.num_blocks, config.block_size)

    def bind(self, core: EngineCore) -> _ShortestFirstRules:
        return _ShortestFirstRules(core)


class _ShortestFirstRules(VLLMRules):
    __slots__ = ()

    def __init__(self, core: EngineCore) -> None:
        super().__init__(core, VLLMScheduler())

    def schedule(self, now_ns: int) -> Pass | None:
        waiting = self.core.waiting
        if len(waiting) > 1:
            resumed = [s for s in waiting if s.num_preemptions]
            fresh = sorted((s for s in waiting if not s.num_preemptions), key=lambda s: s.prompt)
            waiting.clear()
            waiting.extend(resumed + fresh)  # sorted() is stable: ties keep arrival order
        return super().schedule(now_ns)


def request(rid: str, prompt: int, *, at_ms: float, first_id: int) -> Request:
    ids = list(range(first_id, first_id + -(-prompt // 16)))  # distinct content: no reuse
    return Request(
        id=rid,
        input_length=prompt,
        output_length=4,
        block_size=16,
        hash_ids=ids,
        arrival=ArrivalRule(not_before_ms=at_ms),
    )


def replay(scheduler: Scheduler | None, stepping: str) -> dict[str, float]:
    # one engine, a budget of 256 tokens a pass: prompts queue behind one another
    requests = [
        request("long", 2000, at_ms=0.0, first_id=0),
        request("mid", 900, at_ms=1.0, first_id=100),
        request("short", 100, at_ms=2.0, first_id=200),
    ]
    engine = EngineConfig(num_blocks=400, block_size=16, max_num_batched_tokens=256)
    if scheduler is not None:
        engine = attrs.evolve(engine, scheduler=scheduler)
    timing = FixedTiming(prefill_ms=20, decode_ms=5)
    result = run(
        Workload(requests=requests, source="example", format="python"),
        topology=Aggregated(workers=1, engine=engine, timing=timing),
        policy=RoundRobin(),
        load=LoadMode(),
        stepping=stepping,  # type: ignore[arg-type]
    )
    return {r.request_id: r.ttft_ms for r in result.requests if r.ttft_ms is not None}


if __name__ == "__main__":
    for name, scheduler in (("vllm", None), ("shortest_prompt_first", ShortestPromptFirst())):
        ttft = replay(scheduler, "macro")
        assert ttft == replay(scheduler, "pass")  # macro-stepped and per-pass runs agree
        print(f"{name}: " + ", ".join(f"{rid} TTFT {ms:g} ms" for rid, ms in ttft.items()))
