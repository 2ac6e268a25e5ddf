"""A run's configuration keys and flags, declared once: the defaults, every top-level key of a
config file with its check and its ``simclock replay`` flag (:data:`RUN_KEYS`), and every
``[workload]`` key's flag (:data:`WORKLOAD_OPTIONS`). :func:`replay._config.resolve_config`
checks a file's keys and the flags' values with them; the command line adds its flags from
them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from engines import (
    EngineConfig,
)
from loadgen import FORMATS
from simclock import InternalError

from ._exceptions import ConfigError
from ._export import EXPORTS
from ._faults import FaultError, Faults
from ._flags import (
    format_name,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from ._limits import (
    MAX_RATE,
    MAX_WORKERS,
    MIN_KV_BANDWIDTH_GBPS,
    check_count,
    check_rate,
)
from ._metrics import SLO, SLOError
from ._output import TOKEN_TIMES_MODES
from ._registry import (
    ComponentSpec,
    spec_from_value,
)
from ._runner import STEPPINGS

__all__ = (
    "DEFAULT_GPU",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MODEL",
    "DEFAULT_POLICY",
    "DEFAULT_TIMING",
    "DEFAULT_WORKERS",
    "RUN_KEY",
    "RUN_KEYS",
    "TOPOLOGIES",
    "WORKLOAD_FLAGS",
    "WORKLOAD_GROUPS",
    "WORKLOAD_OPTIONS",
    "RunKey",
    "WorkloadFlag",
    "check_exports",
    "check_int",
    "check_slo",
    "check_str",
)


DEFAULT_WORKERS = 4
"""Engines in the default topology."""
DEFAULT_POLICY = "round_robin"
"""The default policy name."""
DEFAULT_TIMING = "roofline"
"""The default timing model name."""
DEFAULT_GPU = "H100"
"""The default catalog GPU (roofline timing and KV capacity)."""
DEFAULT_MODEL = "llama-3.1-8b"
"""The default catalog model (roofline timing and KV capacity)."""
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


TOPOLOGIES: tuple[str, ...] = ("aggregated", "pd")
"""Topology names: ``aggregated`` engines, or ``pd`` (disaggregated prefill/decode pools)."""


@attrs.frozen
class WorkloadFlag:
    """The command-line flag of one ``[workload]`` key (flags win over the file).

    Attributes:
        key: the ``[workload]`` key.
        flag: the flag.
        group: the help section it is listed in (a key of :data:`WORKLOAD_GROUPS`).
        options: its :meth:`argparse.ArgumentParser.add_argument` options.
    """

    key: str
    flag: str
    group: str
    options: Mapping[str, Any]


WORKLOAD_GROUPS: Mapping[str, tuple[str, str | None]] = {
    "load": (
        "workload and load mode",
        "how requests are released (default: at the trace's timestamps); each flag overrides "
        "the same key of the config file's [workload] table",
    ),
    "agentic": ("agentic plays (weka, agentic formats)", None),
    "reader": ("trace reader options", None),
}
"""Help sections of the workload flags: title and description."""

WORKLOAD_OPTIONS: tuple[WorkloadFlag, ...] = (
    WorkloadFlag(
        "synthetic",
        "--synthetic",
        "load",
        {
            "metavar": "SPEC",
            "help": 'generate the workload instead of reading a TRACE, e.g. "count=1000 '
            'arrivals=poisson(5) input=lognormal(12035,6909) output=300"',
        },
    ),
    WorkloadFlag(
        "speedup",
        "--speedup",
        "load",
        {
            "type": positive_float,
            "metavar": "X",
            "help": "release at X times the trace's pace: root times and delays divided by X "
            "(default: 1)",
        },
    ),
    WorkloadFlag(
        "concurrency",
        "--concurrency",
        "load",
        {
            "type": positive_int,
            "metavar": "N",
            "help": "closed loop: at most N sessions in flight, each holding its slot through its "
            "think times",
        },
    ),
    WorkloadFlag(
        "arrivals",
        "--arrivals",
        "load",
        {
            "metavar": "PROCESS",
            "help": "re-time session starts with poisson(rate), gamma(rate,cv) or constant(rate), "
            "keeping lengths, content and delays",
        },
    ),
    WorkloadFlag(
        "target_rate",
        "--target-rate",
        "load",
        {
            "type": positive_float,
            "metavar": "R",
            "help": "scale the trace's pace so sessions start at R per second",
        },
    ),
    WorkloadFlag(
        "max_requests",
        "--max-requests",
        "load",
        {
            "type": non_negative_int,
            "metavar": "N",
            "help": "release the first N requests; later ones end never_issued",
        },
    ),
    WorkloadFlag(
        "max_sessions",
        "--max-sessions",
        "load",
        {
            "type": non_negative_int,
            "metavar": "N",
            "help": "start the first N sessions and run them to their end",
        },
    ),
    WorkloadFlag(
        "max_virtual_time_s",
        "--max-virtual-time",
        "load",
        {
            "type": positive_float,
            "metavar": "SECONDS",
            "help": "stop releasing requests after this virtual time; in-flight ones end "
            "incomplete, "
            "later ones never_issued",
        },
    ),
    WorkloadFlag(
        "lanes",
        "--lanes",
        "agentic",
        {
            "type": positive_int,
            "metavar": "N",
            "help": "run at most N plays at once; a freed lane starts the next play",
        },
    ),
    WorkloadFlag(
        "snapshots",
        "--snapshots",
        "agentic",
        {
            "action": "store_const",
            "const": True,
            "help": "cut each initial lane's play at a seeded point in 25-75%% of its span; "
            "earlier "
            "requests are history (needs --lanes)",
        },
    ),
    WorkloadFlag(
        "snapshot_seed",
        "--snapshot-seed",
        "agentic",
        {
            "type": non_negative_int,
            "metavar": "N",
            "help": "the seed of the snapshot cuts; implies --snapshots (default: the run seed)",
        },
    ),
    WorkloadFlag(
        "warmup",
        "--warmup",
        "agentic",
        {
            "action": "store_const",
            "const": True,
            "help": "prime the caches with the history and wait for idle engines before measuring "
            "(needs --snapshots)",
        },
    ),
    WorkloadFlag(
        "warmup_repeats",
        "--warmup-repeats",
        "agentic",
        {
            "type": non_negative_int,
            "metavar": "N",
            "help": "warm-up requests per lane (default: 10)",
        },
    ),
    WorkloadFlag(
        "block_size",
        "--block-size",
        "reader",
        {
            "type": positive_int,
            "metavar": "T",
            "help": "tokens per content id of the trace (mooncake default 512; csv formats 64)",
        },
    ),
    WorkloadFlag(
        "source",
        "--source",
        "reader",
        {
            "metavar": "LABEL",
            "help": "the source label in request ids (default: the file name up to its first dot)",
        },
    ),
    WorkloadFlag(
        "nested_basis",
        "--nested-basis",
        "reader",
        {
            "choices": ("auto", "relative", "absolute"),
            "help": "weka: the clock of subagent calls (default: auto, decided per group)",
        },
    ),
    WorkloadFlag(
        "subagent_join",
        "--subagent-join",
        "reader",
        {
            "choices": ("none", "recorded"),
            "help": "weka: recorded makes the parent's next call wait for a completed subagent "
            "(default: none)",
        },
    ),
    WorkloadFlag(
        "pacing",
        "--pacing",
        "reader",
        {
            "choices": ("recorded", "dependencies"),
            "help": "weka: recorded keeps every call's recorded start as a floor; "
            "dependencies only "
            "for calls without dependencies (default: recorded)",
        },
    ),
    WorkloadFlag(
        "failures",
        "--failures",
        "reader",
        {
            "choices": ("drop", "prefill_only"),
            "help": "burstgpt: drop failed requests (default) or keep them as prefill-only",
        },
    ),
)
"""Every ``[workload]`` key's flag, declared once (``simclock replay`` adds them in this
order)."""

WORKLOAD_FLAGS: Mapping[str, str] = {w.key: w.flag for w in WORKLOAD_OPTIONS}


def check_int(value: object, *, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: must be an integer >= {minimum}, got {value!r}")
    return value


def check_str(value: object, *, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a non-empty string, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# The run's keys, declared once: a config file's top-level keys and the command line's flags.


@attrs.frozen
class RunKey:
    """One top-level key of a run's configuration: how its value is checked, and the flag
    (``--name-with-dashes``) that gives it on the command line.

    Attributes:
        name: the config file key (and :class:`ReplayConfig` field).
        check: ``check(value, where)``: the value as :class:`ReplayConfig` holds it, or a
            :class:`ConfigError` naming ``where`` (``run.toml: seed`` or ``--seed``).
        flag: the flag's :meth:`argparse.ArgumentParser.add_argument` options; None for a
            key only a file sets (a table) or one the command line takes another way (the
            trace, a positional argument).
        pd_only: only used with the pd topology.
    """

    name: str
    check: Callable[[object, str], Any]
    flag: Mapping[str, Any] | None = None
    pd_only: bool = False

    @property
    def flag_name(self) -> str:
        """``--name-with-dashes``."""
        return "--" + self.name.replace("_", "-")


def _text(value: object, where: str) -> str:
    return check_str(value, where=where)


def _workers(value: object, where: str) -> int:
    count = check_int(value, where=where, minimum=1)
    check_count(value, where=where, maximum=MAX_WORKERS)
    return count


def _choice(choices: tuple[str, ...]) -> Callable[[object, str], str]:
    def check(value: object, where: str) -> str:
        if value not in choices:
            raise ConfigError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    return check


def _kv_bandwidth(value: object, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"{where}: must be a finite number > 0 (GB/s), got {value!r}")
    check_rate(value, where=where, minimum=MIN_KV_BANDWIDTH_GBPS, maximum=MAX_RATE)
    return float(value)


def _latency(value: object, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(f"{where}: must be a finite number >= 0 (ms), got {value!r}")
    return float(value)


def _cold_start(value: object, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(f"{where}: must be a finite number >= 0 (seconds), got {value!r}")
    return float(value)


def _seed(value: object, where: str) -> int:
    return check_int(value, where=where, minimum=0)


def _named(name_key: str) -> Callable[[object, str], ComponentSpec]:
    def check(value: object, where: str) -> ComponentSpec:
        return spec_from_value(value, where=where, name_key=name_key)

    return check


def _memory_utilization(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{where}: must be a number in (0, 1], got {value!r}")
    return float(value)


def _engine_table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table of EngineConfig fields")
    known = {f.name for f in attrs.fields(EngineConfig)} - {"scheduler"}
    for name in value:
        if name == "scheduler":
            raise ConfigError(
                f"{where}: scheduler: not an engine field; set the top-level "
                "scheduler key (or --scheduler)"
            )
        if name not in known:
            raise ConfigError(
                f"{where}: {name}: unknown engine field; known: {', '.join(sorted(known))}"
            )
    return dict(value)


def _faults_table(value: object, where: str) -> Faults | None:
    try:
        faults = Faults.from_mapping(value, where=where)
    except FaultError as exc:
        raise ConfigError(str(exc)) from None
    return None if faults.is_empty else faults


def _workload_table(value: object, where: str) -> Any:
    raise InternalError("the workload table is resolved on its own")  # pragma: no cover


RUN_KEYS: tuple[RunKey, ...] = (
    RunKey("trace", _text),
    RunKey(
        "format",
        _text,
        {
            "type": format_name,
            "metavar": "NAME",
            "help": f"the trace format: auto (detect from the file; default), {', '.join(FORMATS)}",
        },
    ),
    RunKey(
        "workers",
        _workers,
        {
            "type": positive_int,
            "metavar": "N",
            "help": f"number of aggregated engines (default: {DEFAULT_WORKERS})",
        },
    ),
    RunKey(
        "policy",
        _named("name"),
        {
            "metavar": "SPEC",
            "help": f"placement policy NAME[:key=value,...] (default: {DEFAULT_POLICY})",
        },
    ),
    RunKey(
        "timing",
        _named("type"),
        {
            "metavar": "SPEC",
            "help": f"pass-timing model NAME[:key=value,...] (default: {DEFAULT_TIMING})",
        },
    ),
    RunKey(
        "gpu",
        _text,
        {
            "metavar": "NAME",
            "help": f"catalog GPU for roofline timing and KV capacity (default: {DEFAULT_GPU})",
        },
    ),
    RunKey(
        "model",
        _text,
        {
            "metavar": "NAME",
            "help": f"catalog model for roofline timing and KV capacity (default: {DEFAULT_MODEL})",
        },
    ),
    RunKey(
        "seed",
        _seed,
        {
            "type": non_negative_int,
            "metavar": "N",
            "help": "run seed for every random choice (default: 0)",
        },
    ),
    RunKey(
        "slo",
        lambda value, where: check_slo(value, where=where),
        {
            "metavar": "SPEC",
            "nargs": "+",
            "help": "SLOs for goodput in ms, e.g. ttft=2000,tpot=50,e2e=30000, or vLLM's "
            "--goodput form ttft:2000 tpot:50 e2el:30000 (bounds inclusive)",
        },
    ),
    RunKey(
        "output_dir",
        _text,
        {"metavar": "DIR", "help": "write summary.json, requests.jsonl and config.json into DIR"},
    ),
    RunKey("gpu_memory_utilization", _memory_utilization),
    RunKey("engine", _engine_table),
    RunKey(
        "topology",
        _choice(TOPOLOGIES),
        {
            "choices": TOPOLOGIES,
            "help": "aggregated engines, or pd: a prefill pool and a decode pool joined by a KV "
            "link (default: aggregated)",
        },
    ),
    RunKey(
        "prefill_workers",
        _workers,
        {
            "type": positive_int,
            "metavar": "N",
            "help": "pd topology: engines in the prefill pool (default: 1)",
        },
        pd_only=True,
    ),
    RunKey(
        "decode_workers",
        _workers,
        {
            "type": positive_int,
            "metavar": "N",
            "help": "pd topology: engines in the decode pool (default: 1)",
        },
        pd_only=True,
    ),
    RunKey(
        "kv_bandwidth_gbps",
        _kv_bandwidth,
        {
            "type": positive_float,
            "metavar": "X",
            "help": "pd topology: KV link bandwidth in GB/s (default: instant transfers)",
        },
        pd_only=True,
    ),
    RunKey("workload", _workload_table),
    RunKey(
        "stepping",
        _choice(STEPPINGS),
        {
            "choices": STEPPINGS,
            "help": "macro: engines jump over passes whose outcome is known (default); pass: "
            "one engine deadline per pass, the reference (the same results)",
        },
    ),
    RunKey(
        "dispatch_latency_ms",
        _latency,
        {
            "type": non_negative_float,
            "metavar": "X",
            "help": "router-to-engine latency of each handshake phase (offer, answer, "
            "commit) in ms (default 0: instantaneous; aggregated topology)",
        },
    ),
    RunKey(
        "token_times",
        _choice(TOKEN_TIMES_MODES),
        {
            "choices": TOKEN_TIMES_MODES,
            "help": "how requests.jsonl holds token times: full (default), runs of equal "
            "spacing [start_ms, step_ms, count], or none",
        },
    ),
    RunKey(
        "scheduler",
        _named("name"),
        {"metavar": "SPEC", "help": "engine scheduler NAME[:key=value,...] (default: vllm)"},
    ),
    RunKey(
        "export",
        lambda value, where: check_exports(value, where=where),
        {
            "metavar": "NAMES",
            "help": "also write, into --output-dir: vllm (vllm_bench.json, vLLM's bench serve "
            "result file), csv (requests.csv, one row per request); e.g. vllm,csv",
        },
    ),
    RunKey(
        "autoscaler",
        _named("name"),
        {
            "metavar": "SPEC",
            "help": "scale the engines during the run: hpa or slo_planner NAME[:key=value,...], "
            "or path/to/file.py:ClassName (default: none; docs/reference/autoscaling.md)",
        },
    ),
    RunKey(
        "cold_start_s",
        _cold_start,
        {
            "type": non_negative_float,
            "metavar": "SECONDS",
            "help": "an engine added during the run loads this long before it serves "
            "(default 0: at once)",
        },
    ),
    RunKey("faults", _faults_table),
)
"""Every top-level key of a run's configuration, in the order errors list them; a key with a
flag is also a ``simclock replay`` option (the command line adds them in this order)."""

RUN_KEY: Mapping[str, RunKey] = {key.name: key for key in RUN_KEYS}


def check_exports(value: object, *, where: str) -> tuple[str, ...]:
    """The exports ``value`` names (``"vllm,csv"`` or a list of names), in
    :data:`replay.EXPORTS` order."""
    if isinstance(value, str):
        names = [name.strip() for name in value.split(",") if name.strip()]
    elif isinstance(value, list | tuple) and all(isinstance(name, str) for name in value):
        names = [name.strip() for name in value]
    else:
        raise ConfigError(f"{where}: must be a string or a list of strings, got {value!r}")
    for name in names:
        if name not in EXPORTS:
            raise ConfigError(f"{where}: unknown export {name!r}; known: {', '.join(EXPORTS)}")
    return tuple(name for name in EXPORTS if name in names)


def check_slo(value: object, *, where: str) -> SLO | None:
    """An SLO from a spec string, a list of spec items (vLLM's ``--goodput ttft:500
    tpot:50``, as the command line gives them) or a table; None for an empty one."""
    try:
        if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
            value = " ".join(value)
        if isinstance(value, str):
            slo = SLO.parse(value)
        elif isinstance(value, Mapping):
            slo = SLO.from_mapping(value, where=where)
        else:
            raise ConfigError(
                f"{where}: must be a string, a list of strings or a table, got {value!r}"
            )
    except SLOError as exc:
        text = str(exc)
        if text.startswith("slo: "):
            text = f"{where}: {text[5:]}"
        raise ConfigError(text) from None
    return None if slo.is_empty else slo
