"""A disaggregated topology from options: the command line, config files and Python."""

from __future__ import annotations

import attrs

from engines import (
    EngineConfig,
    FixedTiming,
    ModelArch,
    TimingModel,
)
from policies import (
    PDPolicy,
    pd_policy,
)

from ._config import ConfigError, ReplayConfig
from ._pd_topology import Disaggregated, KVLink, PlacementOrder, TransferMode
from ._registry import is_own_class

__all__ = (
    "pd_from_config",
    "pd_topology_from_options",
)

# --------------------------------------------------------------------------------------------
# options (the command line and config files)


def pd_topology_from_options(
    *,
    prefill_workers: int = 1,
    decode_workers: int = 1,
    engine: EngineConfig | None = None,
    timing: TimingModel | None = None,
    prefill_engine: EngineConfig | None = None,
    decode_engine: EngineConfig | None = None,
    prefill_timing: TimingModel | None = None,
    decode_timing: TimingModel | None = None,
    kv_bandwidth_gbps: float | None = None,
    kv_latency_ms: float = 0.0,
    kv_transfer: TransferMode = "destination_missing",
    kv_bytes_per_token: float | None = None,
    model: ModelArch | str | None = None,
    prefill_tensor_parallel: int = 1,
    order: PlacementOrder = "source_first",
) -> Disaggregated:
    """Build a :class:`Disaggregated` topology from flat options (command line, config file).

    ``engine`` and ``timing`` apply to both pools unless a pool's own is given. The link's
    bytes per token are ``kv_bytes_per_token`` when given, else derived from ``model`` at
    ``prefill_tensor_parallel`` (:meth:`KVLink.for_model`), else 0.

    Raises:
        PDConfigError: a bad option.
    """
    base_engine = engine if engine is not None else EngineConfig(num_blocks=4096)
    base_timing = timing if timing is not None else FixedTiming(prefill_ms=50.0, decode_ms=10.0)
    if kv_bytes_per_token is not None:
        link = KVLink(
            mode=kv_transfer,
            kv_bytes_per_token=kv_bytes_per_token,
            bandwidth_gbps=kv_bandwidth_gbps,
            latency_ms=kv_latency_ms,
        )
    elif model is not None:
        link = KVLink.for_model(
            model,
            tensor_parallel=prefill_tensor_parallel,
            bandwidth_gbps=kv_bandwidth_gbps,
            latency_ms=kv_latency_ms,
            mode=kv_transfer,
        )
    else:
        link = KVLink(mode=kv_transfer, bandwidth_gbps=kv_bandwidth_gbps, latency_ms=kv_latency_ms)
    return Disaggregated(
        prefill_workers=prefill_workers,
        decode_workers=decode_workers,
        prefill_engine=attrs.evolve(prefill_engine or base_engine, role="prefill"),
        decode_engine=attrs.evolve(decode_engine or base_engine, role="decode"),
        prefill_timing=prefill_timing or base_timing,
        decode_timing=decode_timing or base_timing,
        link=link,
        order=order,
    )


def pd_from_config(
    config: ReplayConfig,
    *,
    prefill_workers: int = 1,
    decode_workers: int = 1,
    kv_bandwidth_gbps: float | None = None,
    kv_latency_ms: float = 0.0,
    kv_transfer: TransferMode = "destination_missing",
    order: PlacementOrder = "source_first",
) -> tuple[Disaggregated, PDPolicy]:
    """The P/D topology and policy of a ``simclock replay --topology pd`` configuration.

    Both pools use ``config``'s engine (``num_blocks`` sized for the GPU as for an aggregated
    engine) and timing model; the link's bytes per token come from ``config.model`` at the
    roofline's ``tensor_parallel`` (1 for other timing models); the policy is the built-in
    P/D policy of ``config.policy``'s name and options (:func:`policies.pd_policy`).

    Args:
        config: the resolved command-line configuration.
        prefill_workers: ``--prefill-workers``.
        decode_workers: ``--decode-workers``.
        kv_bandwidth_gbps: ``--kv-bandwidth-gbps`` (None: instant transfers).
        kv_latency_ms: fixed cost per transfer.
        kv_transfer: ``destination_missing`` or ``full_prompt``.
        order: ``source_first`` or ``destination_first``.

    Raises:
        PDConfigError: a bad count, bandwidth, latency, transfer mode or order.
        policies.PDPolicyError: an unknown P/D policy name or fallback.
        ConfigError: a bad engine, timing or policy option.
    """
    tensor_parallel = 1
    if config.timing.name == "roofline":
        tensor_parallel = int(config.timing.options.get("tensor_parallel", 1))
    topology = pd_topology_from_options(
        prefill_workers=prefill_workers,
        decode_workers=decode_workers,
        engine=config.build_engine(),
        timing=config.build_timing(),
        model=config.model,
        prefill_tensor_parallel=tensor_parallel,
        kv_bandwidth_gbps=kv_bandwidth_gbps,
        kv_latency_ms=kv_latency_ms,
        kv_transfer=kv_transfer,
        order=order,
    )
    if is_own_class(config.policy.name):
        # a P/D policy of one's own, or an aggregated one applied to each pool
        own = config.build_own_policy()
        policy = (
            own
            if isinstance(own, PDPolicy)
            else PDPolicy(prefill=own, decode=config.build_own_policy())
        )
        return topology, policy
    try:
        policy = pd_policy(config.policy.name, **config.policy.options)
    except TypeError as exc:
        raise ConfigError(f"{config.origin('policy')}: {config.policy.name}: {exc}") from None
    return topology, policy
