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
    export = ["vllm", "csv"]             # also write vllm_bench.json and requests.csv
    autoscaler = "hpa:metric=running,target=8"   # or a table; scale the engines during the run
    cold_start_s = 30                    # an added engine loads this long before it serves
    [engine]                             # any EngineConfig field
    max_num_batched_tokens = 8192
    [workload]                           # load mode, reader options, or a synthetic workload
    speedup = 4                          # any loadgen.LoadMode field
    block_size = 512                     # reader options: block_size, source, nested_basis,
                                         # subagent_join, pacing, failures
    synthetic = "count=1000 arrivals=poisson(5)"   # or a table; instead of a trace
    [faults]                             # crashes, drains, stale views (replay.Faults)
    on_crash = "requeue"
    crashes = [{at_s = 1.5, engine = 0, restart_s = 2}]

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

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
from loadgen import LoadMode, SyntheticSpec, WorkloadConfigError, parse_synthetic

from ._autoscale import Autoscaler
from ._autoscalers import AUTOSCALERS
from ._exceptions import ConfigError
from ._factories import POLICY_OPTION_CLASSES
from ._factories import call_factory as _call
from ._factories import check_option_types as _check_option_types
from ._faults import Faults
from ._limits import (
    MAX_COUNT,
    MAX_RATE,
    MIN_RATE,
    check_count,
    check_rate,
    check_virtual_time,
)
from ._metrics import SLO
from ._output import TokenTimesMode
from ._registry import (
    POLICIES,
    SCHEDULERS,
    TIMINGS,
    ComponentSpec,
    is_own_class,
    load_class,
    parse_spec,
)
from ._run_keys import (
    DEFAULT_GPU,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MODEL,
    DEFAULT_POLICY,
    DEFAULT_TIMING,
    DEFAULT_WORKERS,
    RUN_KEY,
    RUN_KEYS,
    TOPOLOGIES,
    WORKLOAD_FLAGS,
    WORKLOAD_GROUPS,
    WORKLOAD_OPTIONS,
    RunKey,
    check_int,
    check_str,
)
from ._runner import Stepping

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

_META_KEYS = frozenset({"schema_version", "simclock_version"})
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
        dispatch_latency_ms: the router-to-engine latency of each handshake phase, in ms
            (0: instantaneous); echoed in ``config.json`` when not 0.
        token_times: how ``requests.jsonl`` holds token times: ``full`` (default), ``runs``
            or ``none``; not echoed in ``config.json``.
        scheduler: the engines' scheduler and its options (a key of
            :data:`engines.SCHEDULERS`); None for the default (vLLM's rules, not echoed).
        export: other layouts written with the report files (``vllm``, ``csv``; see
            :func:`replay.write_outputs`); not echoed in ``config.json``.
        autoscaler: the autoscaler and its options (a key of :data:`replay.AUTOSCALERS`, or
            a class of one's own); None for none. Echoed when set.
        cold_start_s: how long an engine added during the run loads before it serves;
            echoed when not 0.
        faults: the ``[faults]`` table (:class:`replay.Faults`), None for none.
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
    dispatch_latency_ms: float = 0.0
    token_times: TokenTimesMode = "full"
    scheduler: ComponentSpec | None = None
    export: tuple[str, ...] = ()
    autoscaler: ComponentSpec | None = None
    cold_start_s: float = 0.0
    faults: Faults | None = None
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
        if is_own_class(self.policy.name):
            own: policies.Policy = self.build_own_policy()
            return own
        factory = POLICIES.get(self.policy.name)
        if factory is None:
            known = ", ".join(POLICIES)
            raise ConfigError(
                f"policy: unknown policy {self.policy.name!r}; known: {known}, or "
                "path/to/file.py:ClassName or package.module:ClassName"
            )
        where = f"{self.origin('policy')}: {self.policy.name}"
        _check_option_types(where, POLICY_OPTION_CLASSES.get(self.policy.name), self.policy.options)
        return _call(where, factory, **self.policy.options)

    def build_own_policy(self) -> Any:
        """A fresh object of the policy class ``policy`` names (``module:ClassName``), built
        with its options: a policy, or (with the pd topology) a ``policies.PDPolicy``.

        Raises:
            ConfigError: the class cannot be loaded, takes other options, or does not make
                an object with a ``run`` coroutine.
        """
        where = self.origin("policy")
        factory = load_class(self.policy.name, where=where)
        where = f"{where}: {self.policy.name}"
        options = self.policy.options
        _check_option_types(where, factory if isinstance(factory, type) else None, options)
        policy = _call(where, factory, **options)
        if not callable(getattr(policy, "run", None)) and not isinstance(policy, policies.PDPolicy):
            name = type(policy).__name__
            raise ConfigError(f"{where}: not a policy: {name} has no run coroutine")
        return policy

    def build_autoscaler(self) -> Autoscaler | None:
        """A fresh autoscaler (it keeps state, so each run needs its own), or None.

        Raises:
            ConfigError: an unknown autoscaler, a bad option, or a class of one's own that
                cannot be loaded or makes no object with a ``run`` coroutine.
        """
        spec = self.autoscaler
        if spec is None:
            return None
        where = self.origin("autoscaler")
        factory: Any
        if is_own_class(spec.name):
            factory = load_class(spec.name, where=where)
        else:
            factory = AUTOSCALERS.get(spec.name)
            if factory is None:
                known = ", ".join(AUTOSCALERS)
                raise ConfigError(
                    f"{where}: unknown autoscaler {spec.name!r}; known: {known}, or "
                    "path/to/file.py:ClassName or package.module:ClassName"
                )
        where = f"{where}: {spec.name}"
        _check_option_types(where, factory if isinstance(factory, type) else None, spec.options)
        autoscaler = _call(where, factory, **spec.options)
        if not callable(getattr(autoscaler, "run", None)):
            name = type(autoscaler).__name__
            raise ConfigError(f"{where}: not an autoscaler: {name} has no run coroutine")
        return cast("Autoscaler", autoscaler)

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
        if self.dispatch_latency_ms:
            out["dispatch_latency_ms"] = self.dispatch_latency_ms
        if self.autoscaler is not None:
            out["autoscaler"] = self.autoscaler.as_json()
        if self.cold_start_s:
            out["cold_start_s"] = self.cold_start_s
        if self.workload:
            out["workload"] = dict(self.workload)
        if self.faults is not None:
            out["faults"] = self.faults.as_dict()
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
        if key not in RUN_KEY:
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
            kwargs[key] = RUN_KEY[key].check(value, where)
    topology = kwargs.get("topology", "aggregated")
    for key, (where, value) in merged.items():
        if value is None:
            continue
        if topology == "pd" and key == "workers":
            raise ConfigError(f"{where}: not used by the pd topology (see prefill_workers)")
        if topology == "aggregated" and RUN_KEY[key].pd_only:
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
    config.build_autoscaler()
    return config


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
            check_int(value, where=where, minimum=1)
        elif key == "source":
            check_str(value, where=where)
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
