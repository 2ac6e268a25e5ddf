"""A run built from a resolved configuration: what ``simclock replay`` and a sweep's runs do
alike, so the same configuration replays the same way from both.

:func:`read_workload` reads (or generates) the workload a configuration names;
:func:`configured_run` builds the topology, the policy and the load around it, and the run
options :func:`replay.run` takes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import attrs
import numpy as np

from loadgen import LoadMode, Workload, dataset_path, detect_format, generate_synthetic, read_trace
from policies import Policy

from ._cli_datasets import resolve_trace
from ._config import ConfigError, ReplayConfig, reader_option_check
from ._faults import fault_plan
from ._limits import check_schedule
from ._pd_options import pd_from_config
from ._runner import SEED_STREAMS
from ._topology import Aggregated, Topology

__all__ = ("SAMPLE_TRACE", "ConfiguredRun", "configured_run", "read_workload")

SAMPLE_TRACE = "mooncake-sample"
"""The bundled dataset replayed when no trace is given (``loadgen.DATASETS``)."""


@contextlib.contextmanager
def _trace_path(trace: str | None) -> Iterator[Path]:
    if trace is not None:
        yield resolve_trace(trace)
        return
    yield dataset_path(SAMPLE_TRACE)


def read_workload(config: ReplayConfig) -> Workload:
    """The workload ``config`` names: its synthetic spec generated, or its trace read.

    A synthetic workload is drawn from the run seed's ``workload`` stream (the runner draws
    its policy and driver streams from the same seed, so the workload needs a child of its
    own); its requests stay columns, each built when read (the same replay in a tenth of the
    memory). A trace is read with the configuration's reader options; no trace is the
    bundled sample.

    Raises:
        ConfigError: the trace cannot be read, or a reader option does not apply to it.
        TraceFormatError: a malformed trace.
    """
    spec = config.synthetic_spec()
    if spec is not None:
        streams = np.random.SeedSequence(config.seed).spawn(len(SEED_STREAMS))
        return generate_synthetic(spec, seed=streams[SEED_STREAMS.index("workload")], lazy=True)
    with _trace_path(config.trace) as path:
        try:
            options = config.reader_options()
            if options:
                name = config.format
                if name == "auto":
                    name = detect_format(path).name
                reader_option_check(config, name)
            return read_trace(path, format=config.format, **options)
        except OSError as exc:
            raise ConfigError(f"{config.trace or path}: {exc.strerror or exc}") from None


@attrs.frozen
class ConfiguredRun:
    """What :func:`replay.run` is given for a configuration, but the workload.

    Attributes:
        topology: the engines (aggregated, or prefill/decode pools).
        policy: the placement policy (for prefill/decode, the pools' policy).
        load: the load mode, with the default lanes of a workload of plays.
        options: the other run options (seed, SLO, the configuration echo, stepping,
            dispatch latency, the autoscaler, the cold start and the faults when set).
    """

    topology: Topology
    policy: Policy
    load: LoadMode
    options: dict[str, Any]

    def run_options(self) -> dict[str, Any]:
        """Every run option: ``replay.run(workload, **configured.run_options(), ...)``."""
        return {
            "topology": self.topology,
            "policy": self.policy,
            "load": self.load,
            **self.options,
        }


def configured_run(config: ReplayConfig, workload: Workload) -> ConfiguredRun:
    """Build the run ``config`` describes around ``workload``.

    The schedule is checked against the load (a pace that overflows virtual time is bad
    input), and a workload of plays without lanes gets one lane per engine that takes
    prompts (:meth:`loadgen.LoadMode.with_default_lanes`): all its plays at once would start
    every conversation together.

    Raises:
        ConfigError: the load, the topology or the policy cannot be built.
    """
    load = config.build_load()
    pace = next((k for k in ("target_rate", "speedup") if k in config.workload), None)
    where = config.origin(f"workload.{pace}") if pace else (config.trace or "the sample trace")
    check_schedule(workload, load, where=where)
    topology: Topology
    policy: Policy
    if config.topology == "pd":
        topology, pd_policy = pd_from_config(
            config,
            prefill_workers=config.prefill_workers,
            decode_workers=config.decode_workers,
            kv_bandwidth_gbps=config.kv_bandwidth_gbps,
        )
        # The pd topology supplies its own runtime, which drives this per-pool policy.
        policy = cast("Policy", pd_policy)
    else:
        topology = Aggregated(
            workers=config.workers, engine=config.build_engine(), timing=config.build_timing()
        )
        policy = config.build_policy()
    takers = config.prefill_workers if config.topology == "pd" else config.workers
    load = load.with_default_lanes(plays=len(workload.plays), engines=takers)
    options: dict[str, Any] = {
        "seed": config.seed,
        "slo": config.slo,
        "config": config.as_json(),
        "stepping": config.stepping,
        "dispatch_latency_ms": config.dispatch_latency_ms,
    }
    autoscaler = config.build_autoscaler()
    if autoscaler is not None:
        options["autoscaler"] = autoscaler
    if config.cold_start_s:
        options["cold_start_s"] = config.cold_start_s
    if config.faults is not None:
        # checked against the topology's engines now, naming the file
        initial = (
            config.prefill_workers + config.decode_workers
            if config.topology == "pd"
            else config.workers
        )
        fault_plan(config.faults, initial, where=config.origin("faults"))
        options["faults"] = config.faults
    return ConfiguredRun(topology=topology, policy=policy, load=load, options=options)
