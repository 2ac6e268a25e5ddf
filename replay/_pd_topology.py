"""The disaggregated topology (REFERENCE-engine §6): a prefill pool and a decode pool joined
by a KV link; :class:`Disaggregated` builds their engines and the runtime that joins them
(:mod:`replay._pd`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

import attrs
import numpy as np

from engines import (
    BlockKeyer,
    Engine,
    EngineConfig,
    FixedTiming,
    Journal,
    ModelArch,
    TimingModel,
    kv_bytes_per_token,
    model_arch,
)
from policies import (
    PDPolicy,
    Policy,
    policy_name,
)

from ._cluster import ClusterError, EngineSpec
from ._exceptions import ReplayError
from ._topology import _timing_echo

if TYPE_CHECKING:
    from ._pd import PDRuntime

__all__ = (
    "PLACEMENT_ORDERS",
    "TRANSFER_MODES",
    "Disaggregated",
    "KVLink",
    "PDConfigError",
    "PlacementOrder",
    "TransferMode",
)


TransferMode = Literal["destination_missing", "full_prompt"]
"""What the KV link carries: the blocks the decode engine lacks (default) or the whole prompt."""

PlacementOrder = Literal["source_first", "destination_first"]
"""When the decode engine is chosen: at prefill completion (default) or at dispatch."""

TRANSFER_MODES: tuple[str, ...] = get_args(TransferMode)
"""The transfer modes, default first."""

PLACEMENT_ORDERS: tuple[str, ...] = get_args(PlacementOrder)
"""The placement orders, default first."""


class PDConfigError(ReplayError, ValueError):
    """A disaggregated topology or KV link is misconfigured."""


# --------------------------------------------------------------------------------------------
# the KV link


def _finite_at_least_zero(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise PDConfigError(f"KVLink.{name} must be a finite number >= 0, got {value!r}")


def _check_link(instance: KVLink, attribute: attrs.Attribute[Any], value: object) -> None:
    if attribute.name == "mode":
        if value not in TRANSFER_MODES:
            raise PDConfigError(
                f"KVLink.mode must be one of {', '.join(map(repr, TRANSFER_MODES))}, got {value!r}"
            )
    elif attribute.name == "bandwidth_gbps":
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise PDConfigError(
                f"KVLink.bandwidth_gbps must be a finite number > 0 or None, got {value!r}"
            )
    else:
        _finite_at_least_zero(attribute.name, value)


@attrs.frozen(kw_only=True)
class KVLink:
    """The KV-transfer link between the pools (REFERENCE-engine §6.3).

    One transfer per request, no contention, no layout conversion::

        transfer_ms = latency_ms + tokens * kv_bytes_per_token / (bandwidth_gbps * 1e9) * 1000

    with ``tokens = P`` (``full_prompt``) or ``missing_blocks * E`` (``destination_missing``:
    the decode engine's missing whole blocks, a partial last block counting as a full one).
    Without a bandwidth the size term is 0 (AIS); ``latency_ms`` is this simulator's optional
    addition (default 0).

    Attributes:
        mode: ``"destination_missing"`` (default) or ``"full_prompt"``.
        kv_bytes_per_token: KV bytes per token on one tensor-parallel shard of the prefill
            engine (shards send in parallel); see :meth:`for_model`.
        bandwidth_gbps: link bandwidth in GB/s (1e9 bytes/s); None for instant transfers.
        latency_ms: a fixed cost added to every transfer.

    Raises:
        PDConfigError: a field has a bad value.
    """

    mode: TransferMode = attrs.field(default="destination_missing", validator=_check_link)
    kv_bytes_per_token: float = attrs.field(default=0.0, validator=_check_link)
    bandwidth_gbps: float | None = attrs.field(default=None, validator=_check_link)
    latency_ms: float = attrs.field(default=0.0, validator=_check_link)

    @classmethod
    def for_model(
        cls,
        model: ModelArch | str,
        *,
        tensor_parallel: int = 1,
        dtype_bytes: float = 2,
        bandwidth_gbps: float | None = None,
        latency_ms: float = 0.0,
        mode: TransferMode = "destination_missing",
    ) -> KVLink:
        """A link whose bytes per token come from a model architecture, per TP shard.

        ``kv_bytes_per_token = 2·L·H_kv·h·a / t`` (one KV head per shard when ``t > H_kv``).

        Args:
            model: an architecture or a catalog model name.
            tensor_parallel: the prefill engines' tensor-parallel degree ``t``.
            dtype_bytes: ``a``, bytes per KV element.
            bandwidth_gbps: link bandwidth in GB/s, None for instant transfers.
            latency_ms: fixed cost per transfer.
            mode: what the link carries.
        """
        arch = model_arch(model) if isinstance(model, str) else model
        return cls(
            mode=mode,
            kv_bytes_per_token=kv_bytes_per_token(
                arch, dtype_bytes=dtype_bytes, tensor_parallel=tensor_parallel
            ),
            bandwidth_gbps=bandwidth_gbps,
            latency_ms=latency_ms,
        )

    def transfer_tokens(self, *, prompt_tokens: int, missing_blocks: int, block_size: int) -> int:
        """Return the tokens whose KV crosses the link for one request."""
        if self.mode == "full_prompt":
            return prompt_tokens
        return missing_blocks * block_size

    def transfer_ms(self, tokens: int) -> float:
        """Return the duration of a transfer of ``tokens`` tokens, in milliseconds."""
        if self.bandwidth_gbps is None:
            return float(self.latency_ms)
        size_ms = tokens * self.kv_bytes_per_token / (self.bandwidth_gbps * 1e9) * 1000
        return self.latency_ms + size_ms


# --------------------------------------------------------------------------------------------
# the topology


def _count(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PDConfigError(f"Disaggregated.{name} must be an int >= 1, got {value!r}")

    return check


def _order(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in PLACEMENT_ORDERS:
        raise PDConfigError(
            f"Disaggregated.order must be one of {', '.join(map(repr, PLACEMENT_ORDERS))}, "
            f"got {value!r}"
        )


def _pool_config(config: EngineConfig, role: Literal["prefill", "decode"]) -> EngineConfig:
    if config.role == role:
        return config
    if config.role != "aggregated":
        raise PDConfigError(
            f"Disaggregated.{role}_engine has role {config.role!r}; it must be {role!r} "
            "(or 'aggregated', which the pool turns into its role)"
        )
    return attrs.evolve(config, role=role)


@attrs.frozen(kw_only=True)
class Disaggregated:
    """A prefill pool and a decode pool joined by a KV link (REFERENCE-engine §6).

    Engines are indexed prefill first (``0 .. prefill_workers-1``), then decode; an engine
    added during the run (:meth:`engine_spec`) takes the next unused id whatever its pool. An
    engine
    configuration given with the default role ``"aggregated"`` is given the pool's role.

    Attributes:
        prefill_workers: engines in the prefill pool (>= 1).
        decode_workers: engines in the decode pool (>= 1).
        prefill_engine: every prefill engine's configuration.
        decode_engine: every decode engine's configuration (same ``block_size``).
        prefill_timing: the prefill engines' timing model (the role override drops the decode
            part of every pass).
        decode_timing: the decode engines' timing model (the role override drops the prefill
            part).
        link: the KV-transfer link.
        order: ``"source_first"`` (default) or ``"destination_first"``.

    Raises:
        PDConfigError: a bad count, role, order, or different block sizes.
    """

    prefill_workers: int = attrs.field(default=1, validator=_count("prefill_workers"))
    decode_workers: int = attrs.field(default=1, validator=_count("decode_workers"))
    prefill_engine: EngineConfig = attrs.field(
        factory=lambda: EngineConfig(num_blocks=4096, role="prefill")
    )
    decode_engine: EngineConfig = attrs.field(
        factory=lambda: EngineConfig(num_blocks=4096, role="decode")
    )
    prefill_timing: TimingModel = attrs.field(
        factory=lambda: FixedTiming(prefill_ms=50.0, decode_ms=10.0)
    )
    decode_timing: TimingModel = attrs.field(
        factory=lambda: FixedTiming(prefill_ms=50.0, decode_ms=10.0)
    )
    link: KVLink = attrs.field(factory=KVLink)
    order: PlacementOrder = attrs.field(default="source_first", validator=_order)

    def __attrs_post_init__(self) -> None:
        prefill = _pool_config(self.prefill_engine, "prefill")
        decode = _pool_config(self.decode_engine, "decode")
        if prefill.block_size != decode.block_size:
            raise PDConfigError(
                f"Disaggregated: prefill block_size {prefill.block_size} and decode block_size "
                f"{decode.block_size} differ; both pools must use one block size"
            )
        object.__setattr__(self, "prefill_engine", prefill)
        object.__setattr__(self, "decode_engine", decode)

    @property
    def block_size(self) -> int:
        """The engines' KV block size (both pools)."""
        return self.prefill_engine.block_size

    def build(self, *, keyer: BlockKeyer, journal: Journal) -> tuple[Engine, ...]:
        """Build fresh engines: prefill ``0 .. P-1``, then decode ``P .. P+D-1``."""
        prefill = [
            Engine(i, self.prefill_engine, self.prefill_timing, keyer=keyer, journal=journal)
            for i in range(self.prefill_workers)
        ]
        decode = [
            Engine(
                self.prefill_workers + i,
                self.decode_engine,
                self.decode_timing,
                keyer=keyer,
                journal=journal,
            )
            for i in range(self.decode_workers)
        ]
        return (*prefill, *decode)

    def engine_spec(self, *, pool: str | None = None, spec: EngineSpec | None = None) -> EngineSpec:
        """The spec of an engine added to ``pool``: ``spec`` (given the pool's role), or the
        pool's.

        Raises:
            ClusterError: ``pool`` is not ``"prefill"`` or ``"decode"``, or ``spec`` has
                another block size.
            PDConfigError: ``spec`` has the other pool's role.
        """
        role: Literal["prefill", "decode"]
        if pool == "prefill":
            role = "prefill"
            default = EngineSpec(config=self.prefill_engine, timing=self.prefill_timing)
        elif pool == "decode":
            role = "decode"
            default = EngineSpec(config=self.decode_engine, timing=self.decode_timing)
        else:
            raise ClusterError(
                f"pool: a disaggregated topology adds to 'prefill' or 'decode', got {pool!r}"
            )
        if spec is None:
            return default
        config = _pool_config(spec.config, role)
        if config.block_size != self.block_size:
            raise ClusterError(
                f"an added engine's block_size {config.block_size} differs from the "
                f"topology's {self.block_size}"
            )
        return EngineSpec(config=config, timing=spec.timing)

    def describe(self) -> Mapping[str, object]:
        """Return the topology's configuration as JSON-compatible values."""
        return {
            "type": "pd",
            "order": self.order,
            "prefill_workers": self.prefill_workers,
            "decode_workers": self.decode_workers,
            "prefill_engine": self.prefill_engine.as_dict(),
            "decode_engine": self.decode_engine.as_dict(),
            "prefill_timing": _timing_echo(self.prefill_timing),
            "decode_timing": _timing_echo(self.decode_timing),
            "link": attrs.asdict(self.link),
        }

    def make_runtime(
        self,
        policy: Policy,
        engines: Sequence[Engine],
        *,
        journal: Journal,
        keyer: BlockKeyer,
        rng: np.random.Generator,
        on_poison: Callable[[BaseException], None] | None = None,
    ) -> PDRuntime:
        """Return the policy runtime of a run over ``engines`` (built by :meth:`build`).

        Raises:
            PDConfigError: ``policy`` is not a :class:`policies.PDPolicy`, or ``engines`` do not
                match the pools.
        """
        if not isinstance(policy, PDPolicy):
            raise PDConfigError(
                f"a disaggregated topology needs a policies.PDPolicy, got {policy_name(policy)!r}"
            )
        if len(engines) != self.prefill_workers + self.decode_workers:
            raise PDConfigError(
                f"expected {self.prefill_workers + self.decode_workers} engines, got {len(engines)}"
            )
        from ._pd import PDRuntime  # the runtime's module imports this one

        return PDRuntime(
            policy,
            tuple(engines[: self.prefill_workers]),
            tuple(engines[self.prefill_workers :]),
            journal=journal,
            keyer=keyer,
            rng=rng,
            link=self.link,
            order=self.order,
            on_poison=on_poison,
        )
