"""What a run was set up as — GPU, model, tensor parallelism, scheduler, load — read from the
configuration echo a run keeps (:attr:`replay.RunMeta.config`), for the console table and the
exports.

The command line's settings (the echo's ``config`` key) name the catalog GPU and model, the
timing model and the ``[workload]`` table as given; a run built in Python has only the
runner's echo (its topology and load mode), so fewer facts are known and the rest stay None.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from engines import model_arch
from loadgen import Constant, Gamma, Poisson, WorkloadConfigError, parse_arrivals, parse_synthetic
from simclock import SimulationError

__all__ = ("RunFacts", "run_facts")


@attrs.frozen
class RunFacts:
    """A run's setup, as far as its configuration echo tells it.

    Attributes:
        gpu: the catalog GPU name, None when unknown.
        model: the catalog model name, None when unknown.
        model_id: the model's repository id (the catalog's description, e.g.
            ``meta-llama/Llama-3.1-8B``), else its name, else None.
        tensor_parallel: GPUs per engine (roofline timing's ``tensor_parallel``; 1 for other
            timing models), None when unknown.
        timing: the timing model's name.
        scheduler: the engines' scheduler name (``vllm`` when the command line left the
            default), None when unknown (a run built in Python).
        load: the load mode in words (``workload timestamps``, ``closed loop, 8 sessions``,
            ...).
        request_rate: the release rate in requests per second, None when requests keep the
            trace's times (or are released all at once).
        burstiness: the gamma shape of the gaps (vLLM's ``burstiness``): 1 for Poisson,
            ``1 / cv**2`` for gamma, infinite for constant gaps.
        concurrency: the closed loop's session limit, None for none.
        prefill_workers: engines of the prefill pool (``0 .. P-1``) in a prefill/decode
            topology, None otherwise.
    """

    gpu: str | None = None
    model: str | None = None
    model_id: str | None = None
    tensor_parallel: int | None = None
    timing: str | None = None
    scheduler: str | None = None
    load: str = "workload timestamps"
    request_rate: float | None = None
    burstiness: float = 1.0
    concurrency: int | None = None
    prefill_workers: int | None = None

    def engine_role(self, index: int) -> str | None:
        """``prefill`` or ``decode`` for an engine of a prefill/decode topology, else None."""
        if self.prefill_workers is None:
            return None
        return "prefill" if index < self.prefill_workers else "decode"


def run_facts(config: Mapping[str, object]) -> RunFacts:
    """The facts of a run from its configuration echo (``RunMeta.config``)."""
    cli = config.get("config")
    settings: Mapping[str, object] = cli if isinstance(cli, Mapping) else {}
    topology = config.get("topology")
    topo: Mapping[str, object] = topology if isinstance(topology, Mapping) else {}
    facts: dict[str, object] = {}
    gpu, model = settings.get("gpu"), settings.get("model")
    if isinstance(gpu, str):
        facts["gpu"] = gpu
    if isinstance(model, str):
        facts["model"] = model
        facts["model_id"] = _model_id(model)
    timing = settings.get("timing")
    if isinstance(timing, Mapping) and isinstance(timing.get("type"), str):
        facts["timing"] = timing["type"]
        tp = timing.get("tensor_parallel", 1) if timing["type"] == "roofline" else 1
        facts["tensor_parallel"] = tp if isinstance(tp, int) else None
    else:
        echoed = topo.get("timing", topo.get("prefill_timing"))
        if isinstance(echoed, Mapping) and isinstance(echoed.get("type"), str):
            facts["timing"] = echoed["type"]
            tp = echoed.get("tensor_parallel")
            if isinstance(tp, int):
                facts["tensor_parallel"] = tp
    scheduler = settings.get("scheduler")
    if isinstance(scheduler, Mapping) and isinstance(scheduler.get("name"), str):
        facts["scheduler"] = scheduler["name"]
    elif settings:
        facts["scheduler"] = "vllm"
    if topo.get("type") == "pd" and isinstance(topo.get("prefill_workers"), int):
        facts["prefill_workers"] = topo["prefill_workers"]
    return RunFacts(**facts, **_load_facts(config, settings))  # type: ignore[arg-type]


def _model_id(model: str) -> str:
    try:
        description = model_arch(model).description
    except SimulationError:
        return model
    return description or model


def _load_facts(config: Mapping[str, object], settings: Mapping[str, object]) -> dict[str, object]:
    """``load``, ``request_rate``, ``burstiness`` and ``concurrency`` of the run."""
    workload = settings.get("workload")
    given: Mapping[str, object] = workload if isinstance(workload, Mapping) else {}
    echoed = config.get("load")
    load: Mapping[str, object] = echoed if isinstance(echoed, Mapping) else {}
    out: dict[str, object] = {}
    parts: list[str] = []
    arrivals = given.get("arrivals")
    synthetic = given.get("synthetic")
    process = None
    if isinstance(arrivals, str | Mapping):
        process = _arrivals(arrivals)
    elif isinstance(synthetic, str):
        try:
            process = parse_synthetic(synthetic).arrivals
        except WorkloadConfigError:
            process = None
    if synthetic is not None:
        parts.append("synthetic")
    if process is not None:
        parts.append(f"{type(process).__name__.lower()} arrivals at {process.rate:g}/s")
        out["request_rate"] = float(process.rate)
        if isinstance(process, Gamma):
            out["burstiness"] = process.shape
        elif isinstance(process, Constant):
            out["burstiness"] = float("inf")
    target = load.get("target_rate", given.get("target_rate"))
    if isinstance(target, int | float) and not isinstance(target, bool):
        parts.append(f"trace paced to {target:g} sessions/s")
        out["request_rate"] = float(target)
    speedup = load.get("speedup", given.get("speedup"))
    if isinstance(speedup, int | float) and speedup != 1:
        parts.append(f"trace at {speedup:g}x speed")
    concurrency = load.get("concurrency", given.get("concurrency"))
    if isinstance(concurrency, int) and not isinstance(concurrency, bool):
        parts.append(f"closed loop, {concurrency} sessions")
        out["concurrency"] = concurrency
    lanes = load.get("lanes", given.get("lanes"))
    if isinstance(lanes, int) and not isinstance(lanes, bool):
        parts.append(f"{lanes} lanes")
    if parts:
        out["load"] = ", ".join(parts)
    return out


def _arrivals(spec: object) -> Poisson | Gamma | Constant | None:
    try:
        return parse_arrivals(spec)
    except (WorkloadConfigError, ValueError):
        return None
