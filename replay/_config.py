"""The ``simclock replay`` configuration: file loading, flag overrides, and the one mapping from
names to objects.

A configuration is a flat table (TOML or JSON) whose keys are the command-line options::

    trace = "conversation_trace.jsonl"   # omitted: the bundled sample
    format = "auto"
    workers = 4
    policy = "kv_aware"                  # or a table: {name = "kv_aware", temperature = 0.5}
    timing = "roofline"                  # or a table: {type = "fixed", prefill_ms = 50, ...}
    gpu = "H100"
    model = "llama-3.1-8b"
    seed = 0
    slo = "ttft=2000,tpot=50"            # or a table: {ttft = 2000, tpot = 50}
    output_dir = "out"
    gpu_memory_utilization = 0.9
    stepping = "macro"                   # or "pass": one engine deadline per pass
    token_times = "full"                 # requests.jsonl: "full", "runs" or "none"
    [engine]                             # any EngineConfig field
    max_num_batched_tokens = 8192
    [workload]                           # load mode, reader options, or a synthetic workload
    speedup = 4                          # any loadgen.LoadMode field
    block_size = 512                     # reader options: block_size, source, nested_basis,
                                         # subagent_join, pacing, failures
    synthetic = "count=1000 arrivals=poisson(5)"   # or a table; instead of a trace

Command-line flags override the file, key by key. :func:`resolve_config` validates everything and
returns a :class:`ReplayConfig`; :meth:`ReplayConfig.build_policy` and
:meth:`ReplayConfig.build_timing` turn names into objects through the explicit tables
:data:`POLICIES` and :data:`TIMINGS` of :mod:`replay._registry` — the only place the command
line maps names to code, with its :data:`SCHEDULERS`.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

import policies
from engines import (
    EngineConfig,
    Scheduler,
    TimingModel,
    gpu_spec,
    kv_bytes_per_token,
    model_arch,
)
from loadgen import FORMATS, LoadMode, SyntheticSpec, WorkloadConfigError, parse_synthetic
from simclock import InternalError

from ._exceptions import ConfigError
from ._factories import POLICY_OPTION_CLASSES
from ._factories import call_factory as _call
from ._factories import check_option_types as _check_option_types
from ._flags import format_name, non_negative_int, positive_float, positive_int
from ._limits import (
    MAX_COUNT,
    MAX_RATE,
    MAX_WORKERS,
    MIN_KV_BANDWIDTH_GBPS,
    MIN_RATE,
    check_count,
    check_rate,
    check_virtual_time,
)
from ._metrics import SLO, SLOError
from ._output import TOKEN_TIMES_MODES, TokenTimesMode
from ._registry import (
    POLICIES,
    SCHEDULERS,
    TIMINGS,
    ComponentSpec,
    parse_spec,
    spec_from_value,
)
from ._runner import STEPPINGS, Stepping

__all__ = (
    "DEFAULT_GPU",
    "DEFAULT_MODEL",
    "DEFAULT_POLICY",
    "DEFAULT_TIMING",
    "DEFAULT_WORKERS",
    "POLICIES",
    "READER_KEYS",
    "RUN_KEYS",
    "SCHEDULERS",
    "TIMINGS",
    "TOPOLOGIES",
    "WORKLOAD_FLAGS",
    "WORKLOAD_GROUPS",
    "WORKLOAD_OPTIONS",
    "ComponentSpec",
    "ConfigError",
    "ReplayConfig",
    "RunKey",
    "kv_blocks_for",
    "load_config_file",
    "parse_spec",
    "reader_option_check",
    "resolve_config",
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

_META_KEYS = frozenset({"schema_version", "simclock_version"})
TOPOLOGIES: tuple[str, ...] = ("aggregated", "pd")
"""Topology names: ``aggregated`` engines, or ``pd`` (disaggregated prefill/decode pools)."""


_T = TypeVar("_T")

_LOAD_KEYS = tuple(f.name for f in attrs.fields(LoadMode))
READER_KEYS = ("block_size", "source", "nested_basis", "subagent_join", "pacing", "failures")
_READER_CHOICES: Mapping[str, tuple[str, ...]] = {
    "nested_basis": ("auto", "relative", "absolute"),
    "subagent_join": ("none", "recorded"),
    "pacing": ("recorded", "dependencies"),
    "failures": ("drop", "prefill_only"),
}
_READER_FORMATS: Mapping[str, tuple[str, ...]] = {
    "nested_basis": ("weka",),
    "subagent_join": ("weka",),
    "pacing": ("weka",),
    "failures": ("burstgpt",),
}
_WORKLOAD_KEYS = ("synthetic", *_LOAD_KEYS, *READER_KEYS)

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
"""``[workload]`` key -> the command-line flag that sets it (flags win over the file)."""


# --------------------------------------------------------------------------------------------
# The resolved configuration.


@attrs.frozen(kw_only=True)
class ReplayConfig:
    """A validated ``simclock replay`` configuration.

    Attributes:
        trace: the trace path, None for the bundled sample.
        format: the trace format (``auto`` or a loadgen format name).
        workers: the number of aggregated engines.
        policy: the policy and its options.
        timing: the timing model and its options.
        gpu: the catalog GPU (roofline timing, KV capacity).
        model: the catalog model (roofline timing, KV capacity).
        seed: the run seed.
        slo: SLO bounds for goodput, None for none.
        output_dir: where to write the report files, None to write none.
        gpu_memory_utilization: the share of GPU memory the engine may use for weights and KV.
        engine: :class:`engines.EngineConfig` fields given explicitly.
        topology: ``aggregated`` (``workers`` engines) or ``pd`` (a prefill pool and a
            decode pool joined by a KV link, REFERENCE-engine §6).
        prefill_workers: engines in the prefill pool (``pd`` only).
        decode_workers: engines in the decode pool (``pd`` only).
        kv_bandwidth_gbps: the KV link's bandwidth in GB/s; None for instant transfers
            (``pd`` only).
        workload: the ``[workload]`` table: :class:`loadgen.LoadMode` fields, reader
            options (``block_size``, ``source``, ``nested_basis``, ``subagent_join``,
            ``pacing``, ``failures``) and ``synthetic`` (a spec string or table, instead of
            a trace), as given.
        origins: key -> where it was set (``run.toml: engine`` or ``--policy``), so errors
            found when a component is built name the file (or flag) and the key.
        stepping: ``macro`` (default) or ``pass`` (one engine deadline per pass); the same
            results either way, so it is not echoed in ``config.json``.
        token_times: how ``requests.jsonl`` holds token times: ``full`` (default), ``runs``
            or ``none``; not echoed in ``config.json``.
        scheduler: the engines' scheduler and its options (a key of
            :data:`engines.SCHEDULERS`); None for the default (vLLM's rules, not echoed).
    """

    trace: str | None = None
    format: str = "auto"
    workers: int = DEFAULT_WORKERS
    policy: ComponentSpec = attrs.field(factory=lambda: ComponentSpec(DEFAULT_POLICY))
    timing: ComponentSpec = attrs.field(factory=lambda: ComponentSpec(DEFAULT_TIMING))
    gpu: str = DEFAULT_GPU
    model: str = DEFAULT_MODEL
    seed: int = 0
    slo: SLO | None = None
    output_dir: str | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    engine: Mapping[str, Any] = attrs.field(factory=dict)
    topology: str = "aggregated"
    prefill_workers: int = 1
    decode_workers: int = 1
    kv_bandwidth_gbps: float | None = None
    workload: Mapping[str, Any] = attrs.field(factory=dict)
    stepping: Stepping = "macro"
    token_times: TokenTimesMode = "full"
    scheduler: ComponentSpec | None = None
    origins: Mapping[str, str] = attrs.field(factory=dict, eq=False, repr=False)

    def origin(self, key: str) -> str:
        """Where ``key`` was set, for error messages: ``run.toml: engine``, ``--policy``, or
        the key itself when it was left at its default (or the config built in Python)."""
        return self.origins.get(key, key)

    def build_load(self) -> LoadMode:
        """The load mode the ``[workload]`` table sets (trace timestamps when it sets none).

        Raises:
            ConfigError: a bad load option (named as ``workload.<key>``).
        """
        wheres = {key: self.origin(f"workload.{key}") for key in self.workload}
        return _load_mode(self.workload, wheres)

    def synthetic_spec(self) -> SyntheticSpec | None:
        """The synthetic workload to generate instead of reading a trace, or None.

        Raises:
            ConfigError: a bad synthetic spec.
        """
        if self.workload.get("synthetic") is None:
            return None
        return _synthetic(self.workload["synthetic"], where="workload.synthetic")

    def reader_options(self) -> dict[str, Any]:
        """The trace reader's options (``block_size``, ``source``, weka and burstgpt ones)."""
        return {k: self.workload[k] for k in READER_KEYS if self.workload.get(k) is not None}

    def build_policy(self) -> policies.Policy:
        """A fresh policy object (policies keep state, so each run needs its own).

        Raises:
            ConfigError: an unknown policy or a bad option.
        """
        factory = POLICIES.get(self.policy.name)
        if factory is None:
            known = ", ".join(POLICIES)
            raise ConfigError(f"policy: unknown policy {self.policy.name!r}; known: {known}")
        where = f"{self.origin('policy')}: {self.policy.name}"
        _check_option_types(where, POLICY_OPTION_CLASSES.get(self.policy.name), self.policy.options)
        return _call(where, factory, **self.policy.options)

    def build_timing(self) -> TimingModel:
        """The timing model.

        Raises:
            ConfigError: an unknown model, a bad option or an unknown GPU/model name.
        """
        factory = TIMINGS.get(self.timing.name)
        if factory is None:
            known = ", ".join(TIMINGS)
            raise ConfigError(f"timing: unknown timing model {self.timing.name!r}; known: {known}")
        where = f"{self.origin('timing')}: {self.timing.name}"
        return _call(where, factory, self.timing.options, self.gpu, self.model)

    def build_scheduler(self) -> Scheduler | None:
        """The engines' scheduler, or None for the default.

        Raises:
            ConfigError: an unknown scheduler or a bad option.
        """
        if self.scheduler is None:
            return None
        factory = SCHEDULERS.get(self.scheduler.name)
        if factory is None:
            known = ", ".join(SCHEDULERS)
            raise ConfigError(
                f"{self.origin('scheduler')}: unknown scheduler {self.scheduler.name!r}; "
                f"known: {known}"
            )
        where = f"{self.origin('scheduler')}: {self.scheduler.name}"
        cls = factory if isinstance(factory, type) else None
        _check_option_types(where, cls, self.scheduler.options)
        scheduler: Scheduler = _call(where, factory, **self.scheduler.options)
        return scheduler

    def build_engine(self) -> EngineConfig:
        """The engine configuration; ``num_blocks`` defaults to what fits on the GPU.

        The tensor-parallel degree is the roofline model's ``tensor_parallel`` (1 for every
        other timing model): an engine is then that many GPUs.

        Raises:
            ConfigError: a bad engine field, or a GPU too small for the model's weights.
        """
        fields = dict(self.engine)
        where = self.origin("engine")
        _check_option_types(where, EngineConfig, fields)
        scheduler = self.build_scheduler()
        if scheduler is not None:
            fields["scheduler"] = scheduler
            # a scheduler with pages (SGLang's) sizes the blocks unless the engine does
            page_size = getattr(scheduler, "page_size", None)
            if isinstance(page_size, int) and "block_size" not in fields:
                fields["block_size"] = page_size
        if "num_blocks" not in fields:
            # Validate the other fields first, so a bad block size is reported as such.
            block_size = _call(where, EngineConfig, **{**fields, "num_blocks": 1}).block_size
            tensor_parallel = 1
            if self.timing.name == "roofline":
                tensor_parallel = self.timing.options.get("tensor_parallel", 1)
            # The KV capacity follows from the model and GPU: name whichever was set.
            sized_by = next((k for k in ("model", "gpu") if k in self.origins), "model")
            try:
                fields["num_blocks"] = kv_blocks_for(
                    self.gpu,
                    self.model,
                    block_size=block_size,
                    gpu_memory_utilization=self.gpu_memory_utilization,
                    tensor_parallel=tensor_parallel,
                )
            except ValueError as exc:
                # "model M does not fit on one G ..." said of the key that was set.
                problem = str(exc).removeprefix("model ")
                raise ConfigError(f"{self.origin(sized_by)}: {problem}") from None
        return _call(where, EngineConfig, **fields)

    def as_json(self) -> dict[str, Any]:
        """The configuration as a flat JSON object that :func:`load_config_file` reads back.

        ``output_dir`` is left out, so the same run written to two directories echoes the
        same configuration.
        """
        out: dict[str, Any] = {
            "trace": self.trace,
            "format": self.format,
            "topology": self.topology,
        }
        if self.topology == "pd":
            out["prefill_workers"] = self.prefill_workers
            out["decode_workers"] = self.decode_workers
            out["kv_bandwidth_gbps"] = self.kv_bandwidth_gbps
        else:
            out["workers"] = self.workers
        out |= {
            "policy": self.policy.as_json(),
            "timing": {"type": self.timing.name, **self.timing.options},
            "gpu": self.gpu,
            "model": self.model,
            "seed": self.seed,
            "slo": None if self.slo is None else self.slo.as_text(),
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "engine": dict(self.engine),
        }
        if self.scheduler is not None:
            out["scheduler"] = self.scheduler.as_json()
        if self.workload:
            out["workload"] = dict(self.workload)
        return out


def kv_blocks_for(
    gpu: str,
    model: str,
    *,
    block_size: int = 64,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    tensor_parallel: int = 1,
) -> int:
    """KV blocks of one engine: the GPU memory left after the weights, as vLLM sizes it.

    ``floor((memory_bytes * utilization - 2 * params / t) / (kv_bytes_per_token * block_size))``
    per GPU, with bf16 weights and KV sharded over ``t = tensor_parallel`` GPUs (the KV bytes
    per token are those of one shard); ``params`` counts the linear layers, the input
    embedding and the output head.

    Raises:
        ValueError: an unknown GPU or model, a bad utilization or tensor-parallel degree, or
            the weights do not fit.
    """
    spec = gpu_spec(gpu)
    arch = model_arch(model)
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    per_token = kv_bytes_per_token(arch, tensor_parallel=tensor_parallel)
    weights = 2.0 * (arch.linear_params + 2 * arch.head_params) / tensor_parallel
    free = spec.memory_bytes * gpu_memory_utilization - weights
    blocks = math.floor(free / (per_token * block_size))
    if blocks < 1:
        gpus = "one" if tensor_parallel == 1 else str(tensor_parallel)
        raise ValueError(f"model {arch.name} does not fit on {gpus} {spec.name} with room for KV")
    return blocks


# --------------------------------------------------------------------------------------------
# Loading and merging.


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a ``.toml`` or ``.json`` configuration file into a plain dict (not yet validated).

    Raises:
        ConfigError: the file is missing or unreadable, not valid TOML/JSON, not a table, or
            has another suffix.
    """
    where = str(path)
    suffix = Path(path).suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(f"{where}: a config file must end in .toml or .json")
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: invalid TOML: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}:{exc.lineno}: -: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}:1: -: the configuration must be a JSON object")
    return data


def _int(value: object, *, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: must be an integer >= {minimum}, got {value!r}")
    return value


def _str(value: object, *, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a non-empty string, got {value!r}")
    return value


def resolve_config(
    file_values: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    source: str = "config",
) -> ReplayConfig:
    """Merge a config file's values with command-line overrides and validate the result.

    Args:
        file_values: what :func:`load_config_file` read (None for no file).
        overrides: values from command-line flags; a key present here wins over the file.
        source: the config file's name, used in error messages.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: an unknown key or a bad value; the message names the file (or
            ``--flag``) and the key.
    """
    merged: dict[str, tuple[str, Any]] = {}
    for key, value in (file_values or {}).items():
        if key in _META_KEYS:
            continue
        if key not in _RUN_KEY:
            known = ", ".join(k.name for k in RUN_KEYS)
            raise ConfigError(f"{source}: {key}: unknown key; known: {known}")
        merged[key] = (f"{source}: {key}", value)
    workload = _file_workload(merged.pop("workload", None))
    for key, value in (overrides or {}).items():
        if key == "workload":
            for name, item in (value or {}).items():
                if item is not None:
                    workload[name] = (WORKLOAD_FLAGS[name], item)
        elif value is not None:
            merged[key] = (f"--{key.replace('_', '-')}", value)
    _one_workload_source(merged, workload)

    kwargs: dict[str, Any] = {}
    for key, (where, value) in merged.items():
        if value is not None:
            kwargs[key] = _RUN_KEY[key].check(value, where)
    topology = kwargs.get("topology", "aggregated")
    for key, (where, value) in merged.items():
        if value is None:
            continue
        if topology == "pd" and key == "workers":
            raise ConfigError(f"{where}: not used by the pd topology (see prefill_workers)")
        if topology == "aggregated" and _RUN_KEY[key].pd_only:
            raise ConfigError(f"{where}: only used with the pd topology")
    if workload:
        kwargs["workload"] = _workload(workload)
    kwargs["origins"] = {key: where for key, (where, _) in merged.items()} | {
        f"workload.{key}": where for key, (where, _) in workload.items()
    }
    config = ReplayConfig(**kwargs)
    # Build once now so a bad name or option fails before any trace is read.
    if config.topology == "aggregated":
        config.build_policy()  # the pd topology builds its own per-pool policies
    config.build_timing()
    config.build_engine()
    return config


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
    return _str(value, where=where)


def _workers(value: object, where: str) -> int:
    count = _int(value, where=where, minimum=1)
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


def _seed(value: object, where: str) -> int:
    return _int(value, where=where, minimum=0)


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
        lambda value, where: _slo(value, where=where),
        {
            "metavar": "SPEC",
            "help": "SLOs for goodput in ms, e.g. ttft=2000,tpot=50,e2e=30000 (bounds inclusive)",
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
)
"""Every top-level key of a run's configuration, in the order errors list them; a key with a
flag is also a ``simclock replay`` option (the command line adds them in this order)."""

_RUN_KEY: Mapping[str, RunKey] = {key.name: key for key in RUN_KEYS}


def _slo(value: object, *, where: str) -> SLO | None:
    try:
        if isinstance(value, str):
            slo = SLO.parse(value)
        elif isinstance(value, Mapping):
            slo = SLO.from_mapping(value, where=where)
        else:
            raise ConfigError(f"{where}: must be a string or a table, got {value!r}")
    except SLOError as exc:
        text = str(exc)
        if text.startswith("slo: "):
            text = f"{where}: {text[5:]}"
        raise ConfigError(text) from None
    return None if slo.is_empty else slo


# --------------------------------------------------------------------------------------------
# The [workload] table: load mode, reader options, synthetic workload.


def _file_workload(entry: tuple[str, Any] | None) -> dict[str, tuple[str, Any]]:
    """The config file's ``[workload]`` table as ``key -> (where, value)``."""
    if entry is None:
        return {}
    where, table = entry
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table")
    out: dict[str, tuple[str, Any]] = {}
    for key, value in table.items():
        if key not in _WORKLOAD_KEYS:
            known = ", ".join(_WORKLOAD_KEYS)
            raise ConfigError(f"{where}.{key}: unknown key; known: {known}")
        out[key] = (f"{where}.{key}", value)
    return out


def _one_workload_source(
    merged: dict[str, tuple[str, Any]], workload: dict[str, tuple[str, Any]]
) -> None:
    """Keep one of a trace and a synthetic workload: a flag wins over the file."""
    trace, synthetic = merged.get("trace"), workload.get("synthetic")
    if trace is None or synthetic is None or trace[1] is None or synthetic[1] is None:
        return
    trace_flag, synthetic_flag = trace[0].startswith("--"), synthetic[0].startswith("--")
    if trace_flag and synthetic_flag:
        raise ConfigError("--synthetic: not allowed with a TRACE")
    if trace_flag:
        del workload["synthetic"]
    elif synthetic_flag:
        del merged["trace"]
    else:
        raise ConfigError(f"{synthetic[0]}: not allowed with trace")


def _workload(entries: Mapping[str, tuple[str, Any]]) -> dict[str, Any]:
    """Validate the merged ``[workload]`` entries; return the table, keys in a fixed order."""
    table = {key: entries[key][1] for key in _WORKLOAD_KEYS if key in entries}
    wheres = {key: entries[key][0] for key in table}
    for key in READER_KEYS:
        if key not in table:
            continue
        value, where = table[key], wheres[key]
        if table.get("synthetic") is not None:
            raise ConfigError(f"{where}: only used with a trace, not with synthetic")
        if key == "block_size":
            _int(value, where=where, minimum=1)
        elif key == "source":
            _str(value, where=where)
        elif value not in _READER_CHOICES[key]:
            choices = ", ".join(_READER_CHOICES[key])
            raise ConfigError(f"{where}: must be one of {choices}, got {value!r}")
    if table.get("synthetic") is not None:
        _synthetic(table["synthetic"], where=wheres["synthetic"])
    _load_mode(table, wheres)
    for key in ("speedup", "target_rate"):
        check_rate(table.get(key), where=wheres.get(key, key), minimum=MIN_RATE, maximum=MAX_RATE)
    for key in ("concurrency", "lanes", "warmup_repeats"):
        check_count(table.get(key), where=wheres.get(key, key), maximum=MAX_COUNT)
    check_virtual_time(table.get("max_virtual_time_s"), where=wheres.get("max_virtual_time_s", ""))
    return table


def _synthetic(value: object, *, where: str) -> SyntheticSpec:
    try:
        if isinstance(value, str):
            return parse_synthetic(value)
        if isinstance(value, Mapping):
            return SyntheticSpec.from_dict(value)
    except WorkloadConfigError as exc:
        text = str(exc)
        if text.startswith("synthetic: "):
            text = text[len("synthetic: ") :]
        raise ConfigError(f"{where}: {text}") from None
    raise ConfigError(f"{where}: must be a spec string or a table, got {value!r}")


def _load_mode(table: Mapping[str, Any], wheres: Mapping[str, str]) -> LoadMode:
    """The :class:`loadgen.LoadMode` of the load keys; an error names the key's origin."""
    values = {key: table[key] for key in _LOAD_KEYS if table.get(key) is not None}
    if "snapshot_seed" in values and "snapshots" not in values:
        values["snapshots"] = True  # a snapshot seed asks for snapshots
    try:
        return LoadMode.from_dict(values)
    except WorkloadConfigError as exc:
        text = str(exc)
        key, sep, problem = text.partition(": ")
        where = wheres.get(key.split(".")[0]) if sep else None
        if where is None:
            where = "workload"
            problem = text
        raise ConfigError(f"{where}: {problem}") from None


def reader_option_check(config: ReplayConfig, format_name: str) -> None:
    """Check that each reader option given applies to ``format_name``.

    Raises:
        ConfigError: e.g. ``--failures: only used with the burstgpt format, not azure``.
    """
    for key, formats in _READER_FORMATS.items():
        if config.workload.get(key) is not None and format_name not in formats:
            flag = WORKLOAD_FLAGS[key]
            raise ConfigError(
                f"{flag}: only used with the {' or '.join(formats)} format, not {format_name}"
            )
