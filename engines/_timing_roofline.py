"""The roofline timing model for a dense GQA transformer (REFERENCE-engine §5.5)."""

from __future__ import annotations

import attrs
import numpy as np

from ._catalog import GPUSpec, ModelArch, _kv_heads_per_shard
from ._pass import PassShape
from ._timing import (
    TimingConfigError,
    _entry_masks,
    _finite_non_negative,
    _finite_positive,
)

__all__ = ("RooflineTiming",)


def _efficiency(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    _finite_positive(instance, attribute, value)
    if isinstance(value, int | float) and value > 1:
        raise TimingConfigError(
            f"{type(instance).__name__}.{attribute.name} must be in (0, 1], got {value!r}"
        )


def _tensor_parallel(instance: RooflineTiming, attribute: attrs.Attribute[int], value: int) -> None:
    _kv_heads_per_shard(instance.model, value)


def _optional_positive(
    instance: object, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is not None:
        _finite_positive(instance, attribute, value)


@attrs.frozen(kw_only=True)
class RooflineTiming:
    """A roofline: a pass takes the longer of its compute time and its memory time (§5.5).

    With ``L, d, H_q, H_kv, h, f, V`` from :class:`ModelArch`, ``w`` = ``weight_bytes``,
    ``a`` = ``kv_bytes``, ``t`` = ``tensor_parallel``, summing over the entries of the pass::

        P_lin  = L·(2·d·H_q·h + 2·d·H_kv·h + 3·d·f)
        P_head = d·V
        FLOPs  = 2·P_lin·Σn_r + 2·P_head·S + 4·L·H_q·h·Σ (n_r·c_r + n_r·(n_r+1)/2)
        Bytes  = (P_lin + P_head)·w + 2·L·H_kv·h·a·Σ (c_r + n_r)
        T      = T_0 + max(FLOPs / (t·F·η_c), Bytes / (t·BW·η_m)) [+ T_comm]
        T_comm = 2·L · 2·(t-1)/t · Σn_r·d·activation_bytes / link_bandwidth   (when given)

    The pass is costed as a whole (weights are read once per pass), not as a prefill part plus
    a decode part; a prefill-role engine leaves out decode entries, a decode-role engine has
    only decode entries. An empty pass takes 0 ms.

    Attributes:
        gpu: the GPU (``F`` = ``bf16_flops``, ``BW`` = ``memory_bandwidth_bytes_per_s``).
        model: the architecture.
        tensor_parallel: ``t``, GPUs per engine (integer ``>= 1`` that splits ``H_kv``).
        weight_bytes: ``w``, bytes per weight (2 for bf16, 1 for fp8); default 2.
        kv_bytes: ``a``, bytes per KV element; default 2.
        compute_efficiency: ``η_c`` in ``(0, 1]``; default 0.6.
        memory_efficiency: ``η_m`` in ``(0, 1]``; default 0.8.
        overhead_ms: ``T_0``, fixed cost per pass, ms; default 0.
        link_bandwidth_GBps: all-reduce link bandwidth, GB/s (1e9 B/s); ``None`` (default)
            leaves ``T_comm`` out. Only used when ``tensor_parallel > 1``.
        activation_bytes: bytes per activation element in the all-reduce; default 2.

    Raises:
        TimingConfigError: a parameter is out of range.
    """

    gpu: GPUSpec = attrs.field(validator=attrs.validators.instance_of(GPUSpec))
    model: ModelArch = attrs.field(validator=attrs.validators.instance_of(ModelArch))
    tensor_parallel: int = attrs.field(default=1, validator=_tensor_parallel)
    weight_bytes: float = attrs.field(default=2.0, validator=_finite_positive)
    kv_bytes: float = attrs.field(default=2.0, validator=_finite_positive)
    compute_efficiency: float = attrs.field(default=0.6, validator=_efficiency)
    memory_efficiency: float = attrs.field(default=0.8, validator=_efficiency)
    overhead_ms: float = attrs.field(default=0.0, validator=_finite_non_negative)
    link_bandwidth_GBps: float | None = attrs.field(default=None, validator=_optional_positive)
    activation_bytes: float = attrs.field(default=2.0, validator=_finite_positive)

    def flops_and_bytes(self, shape: PassShape) -> tuple[float, float]:
        """Return the pass's ``(FLOPs, Bytes)`` for the whole model (all shards together).

        Args:
            shape: the scheduled pass.

        Returns:
            Floating-point operations and bytes moved; ``(0.0, 0.0)`` for an empty pass.
        """
        prefill, decode = _entry_masks(shape)
        charged = prefill | decode
        if not bool(np.any(charged)):
            return 0.0, 0.0
        m = self.model
        n = shape.scheduled[charged].astype(np.float64)
        c = shape.computed[charged].astype(np.float64)
        sampling = float(np.count_nonzero(shape.samples[charged]))
        p_lin = float(m.linear_params)
        p_head = float(m.head_params)
        attention = float((n * c + n * (n + 1) / 2).sum())
        flops = (
            2 * p_lin * float(n.sum())
            + 2 * p_head * sampling
            + 4 * m.num_layers * m.num_heads * m.head_dim * attention
        )
        kv_bpt = 2 * m.num_layers * m.num_kv_heads * m.head_dim * float(self.kv_bytes)
        moved = (p_lin + p_head) * float(self.weight_bytes) + kv_bpt * float((c + n).sum())
        return flops, moved

    def pass_time_ms(self, shape: PassShape) -> float:
        """Return the duration of the pass in milliseconds.

        Args:
            shape: the scheduled pass.

        Returns:
            ``T_0 + max(compute, memory) [+ T_comm]``; ``0.0`` for an empty pass.
        """
        flops, moved = self.flops_and_bytes(shape)
        if flops == 0.0 and moved == 0.0:
            return 0.0
        t = self.tensor_parallel
        compute_s = flops / (t * self.gpu.bf16_flops * self.compute_efficiency)
        memory_s = moved / (t * self.gpu.memory_bandwidth_bytes_per_s * self.memory_efficiency)
        total_ms = float(self.overhead_ms) + max(compute_s, memory_s) * 1000.0
        if self.link_bandwidth_GBps is not None and t > 1:
            prefill, decode = _entry_masks(shape)
            tokens = float(shape.scheduled[prefill | decode].sum())
            volume = tokens * self.model.hidden_size * float(self.activation_bytes)
            comm_s = (2 * self.model.num_layers * 2 * (t - 1) / t * volume) / (
                self.link_bandwidth_GBps * 1e9
            )
            total_ms += comm_s * 1000.0
        return total_ms
