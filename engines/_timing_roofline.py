"""The roofline timing model for a dense GQA transformer (REFERENCE-engine §5.5)."""

from __future__ import annotations

from operator import mul
from typing import NamedTuple

import attrs
import numpy as np
import numpy.typing as npt

from ._catalog import GPUSpec, ModelArch, _kv_heads_per_shard
from ._pass import DecodeRun, PassShape, per_pass_times_ms
from ._timing import (
    SMALL_PASS_ENTRIES,
    TimingConfigError,
    _finite_non_negative,
    _finite_positive,
    _int_column,
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


class _Constants(NamedTuple):
    """What a pass costs per unit, derived once from the model's parameters.

    Each value is computed with the same operations, in the same order, as the §5.5 formula
    spelled out per pass, so results are bit-for-bit those of the formula.
    """

    flops_per_token: float  # 2·P_lin
    flops_per_sample: float  # 2·P_head
    flops_per_attention: int  # 4·L·H_q·h
    weight_bytes: float  # (P_lin + P_head)·w
    kv_bytes_per_token: float  # 2·L·H_kv·h·a
    compute_rate: float  # t·F·η_c, FLOP/s
    memory_rate: float  # t·BW·η_m, B/s
    overhead_ms: float
    comm_per_byte: float  # 2·L·2·(t-1)/t; 0 when T_comm is off
    comm_rate: float  # link bandwidth, B/s
    comm_bytes_per_token: float  # d·activation_bytes


def _sums(shape: PassShape) -> tuple[int, int, int, int] | None:
    """``(Σn_r, S, 2·Σ (n_r·c_r + n_r·(n_r+1)/2), Σ (c_r + n_r))`` over the entries the role
    charges (all of them, except decode entries on a prefill-role engine), as exact integers;
    ``None`` when it charges none."""
    skip_decodes = shape.role == "prefill"
    if len(shape.scheduled) <= SMALL_PASS_ENTRIES:
        n_l: list[int] = shape.scheduled.tolist()
        c_l: list[int] = shape.computed.tolist()
        s_l: list[bool] = shape.samples.tolist()
        if skip_decodes:
            o_l: list[int] = shape.output_before.tolist()
            keep = [not (n == 1 and o >= 1) for n, o in zip(n_l, o_l, strict=True)]
            n_l = [n for n, k in zip(n_l, keep, strict=True) if k]
            c_l = [c for c, k in zip(c_l, keep, strict=True) if k]
            s_l = [s for s, k in zip(s_l, keep, strict=True) if k]
        if not n_l:
            return None
        tokens = sum(n_l)
        # Σ n·(2c + n + 1) as C-level map/sum calls: cheaper than a Python-level loop here.
        attention = 2 * sum(map(mul, n_l, c_l)) + sum(map(mul, n_l, n_l)) + tokens
        return tokens, s_l.count(True), attention, sum(c_l) + tokens
    n_a = _int_column(shape.scheduled)
    c_a = _int_column(shape.computed)
    samples = shape.samples
    if skip_decodes:
        keep = (n_a != 1) | (shape.output_before < 1)
        n_a, c_a, samples = n_a[keep], c_a[keep], samples[keep]
        if not len(n_a):
            return None
    tokens = int(n_a.sum())
    attention = int((n_a * (2 * c_a + n_a + 1)).sum())
    return tokens, int(np.count_nonzero(samples)), attention, int(c_a.sum()) + tokens


class _CachedConstants:
    """A slot, outside the attrs fields (so never compared, copied or echoed), that holds the
    constants a frozen model derives from its fields, computed on first use."""

    __slots__ = ("_constants",)
    _constants: _Constants


@attrs.frozen(kw_only=True)
class RooflineTiming(_CachedConstants):
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
        sums = _sums(shape)
        if sums is None:
            return 0.0, 0.0
        return self._flops_and_bytes(sums, self._derived())

    def _derived(self) -> _Constants:
        try:
            return self._constants
        except AttributeError:  # first use (or a copy made without __init__)
            pass
        m = self.model
        t = self.tensor_parallel
        p_lin = float(m.linear_params)
        p_head = float(m.head_params)
        comm = self.link_bandwidth_GBps is not None and t > 1
        constants = _Constants(
            flops_per_token=2 * p_lin,
            flops_per_sample=2 * p_head,
            flops_per_attention=4 * m.num_layers * m.num_heads * m.head_dim,
            weight_bytes=(p_lin + p_head) * float(self.weight_bytes),
            kv_bytes_per_token=2
            * m.num_layers
            * m.num_kv_heads
            * m.head_dim
            * float(self.kv_bytes),
            compute_rate=t * self.gpu.bf16_flops * self.compute_efficiency,
            memory_rate=t * self.gpu.memory_bandwidth_bytes_per_s * self.memory_efficiency,
            overhead_ms=float(self.overhead_ms),
            comm_per_byte=2 * m.num_layers * 2 * (t - 1) / t if comm else 0.0,
            comm_rate=(self.link_bandwidth_GBps or 1.0) * 1e9,
            comm_bytes_per_token=float(m.hidden_size),
        )
        object.__setattr__(self, "_constants", constants)
        return constants

    @staticmethod
    def _flops_and_bytes(sums: tuple[int, int, int, int], k: _Constants) -> tuple[float, float]:
        tokens, sampling, attention2, kv = sums
        flops = (
            k.flops_per_token * float(tokens)
            + k.flops_per_sample * float(sampling)
            + k.flops_per_attention * float(attention2 // 2)
        )
        return flops, k.weight_bytes + k.kv_bytes_per_token * float(kv)

    def pass_time_ms(self, shape: PassShape) -> float:
        """Return the duration of the pass in milliseconds.

        Args:
            shape: the scheduled pass.

        Returns:
            ``T_0 + max(compute, memory) [+ T_comm]``; ``0.0`` for an empty pass.
        """
        sums = _sums(shape)
        if sums is None:
            return 0.0
        k = self._derived()
        flops, moved = self._flops_and_bytes(sums, k)
        total_ms = k.overhead_ms + max(flops / k.compute_rate, moved / k.memory_rate) * 1000.0
        if k.comm_per_byte:
            volume = float(sums[0]) * k.comm_bytes_per_token * float(self.activation_bytes)
            total_ms += (k.comm_per_byte * volume) / k.comm_rate * 1000.0
        return total_ms

    def decode_run_ms(self, run: DecodeRun) -> npt.NDArray[np.float64]:
        """Durations of every pass of a run of decode steps (see :meth:`pass_time_ms`), with
        the same operations in the same order, one array at a time.

        In pass ``i`` each of the ``B_i`` entries schedules one position after ``c_r + i``
        and samples, so ``Σn_r = S = B_i``, ``Σ (n_r·c_r + n_r·(n_r+1)/2) = Σc_r + (i+1)·B_i``
        and ``Σ (c_r + n_r) = Σc_r + (i+1)·B_i``.
        """
        if run.role == "prefill":  # decode entries are not charged there
            return per_pass_times_ms(self, run)
        k = self._derived()
        sizes = run.batch_sizes()
        index = np.arange(1, run.passes + 1, dtype=np.int64)
        context = run.live_sums(run.computed) + index * sizes
        tokens = sizes.astype(np.float64)
        flops = (
            k.flops_per_token * tokens
            + k.flops_per_sample * tokens
            + k.flops_per_attention * context.astype(np.float64)
        )
        moved = k.weight_bytes + k.kv_bytes_per_token * context.astype(np.float64)
        total: npt.NDArray[np.float64] = (
            k.overhead_ms + np.maximum(flops / k.compute_rate, moved / k.memory_rate) * 1000.0
        )
        if k.comm_per_byte:
            volume = tokens * k.comm_bytes_per_token * float(self.activation_bytes)
            total = total + (k.comm_per_byte * volume) / k.comm_rate * 1000.0
        return total
