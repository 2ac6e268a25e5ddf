"""A small catalog of GPU specs and dense/GQA transformer architectures (REFERENCE-engine §5.5).

The figures are the vendors' published ones; ``docs/reference/timing.md`` names the source of
each. Look entries up by name with :func:`gpu_spec` and :func:`model_arch` (case-insensitive),
or build your own :class:`GPUSpec` / :class:`ModelArch` values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import attrs

from ._timing import TimingConfigError

__all__ = (
    "GPUS",
    "MODELS",
    "GPUSpec",
    "ModelArch",
    "gpu_spec",
    "kv_bytes_per_token",
    "model_arch",
)


def _positive_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise TimingConfigError(
            f"{type(instance).__name__}.{attribute.name} must be a finite number > 0, got {value!r}"
        )


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TimingConfigError(
            f"{type(instance).__name__}.{attribute.name} must be an integer > 0, got {value!r}"
        )


def _non_empty_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise TimingConfigError(
            f"{type(instance).__name__}.{attribute.name} must be a non-empty string, got {value!r}"
        )


@attrs.frozen
class GPUSpec:
    """Peak figures of one GPU, as its vendor publishes them.

    Attributes:
        name: a short name (``"H100"``).
        bf16_flops: peak dense (no sparsity) BF16 tensor-core throughput, FLOP/s.
        memory_bandwidth_bytes_per_s: peak memory bandwidth, bytes/s.
        memory_bytes: memory capacity, bytes.
        description: the exact part the figures belong to (form factor, memory size).

    Raises:
        TimingConfigError: a figure is not a finite number ``> 0``.
    """

    name: str = attrs.field(validator=_non_empty_name)
    bf16_flops: float = attrs.field(validator=_positive_number)
    memory_bandwidth_bytes_per_s: float = attrs.field(validator=_positive_number)
    memory_bytes: float = attrs.field(validator=_positive_number)
    description: str = attrs.field(default="", kw_only=True)


@attrs.frozen
class ModelArch:
    """The shape of a dense decoder-only transformer with grouped-query attention.

    Field names follow the Hugging Face ``config.json`` of the model in parentheses.

    Attributes:
        name: a short name (``"llama-3.1-8b"``).
        num_layers: ``L`` (``num_hidden_layers``).
        hidden_size: ``d`` (``hidden_size``).
        num_heads: ``H_q``, query heads (``num_attention_heads``).
        num_kv_heads: ``H_kv``, key/value heads (``num_key_value_heads``).
        head_dim: ``h`` (``head_dim``, else ``hidden_size / num_attention_heads``).
        ffn_size: ``f``, gated-FFN width (``intermediate_size``).
        vocab_size: ``V`` (``vocab_size``).
        context_length: the longest supported sequence (``max_position_embeddings``).
        description: where the figures come from (the model's repository id).

    Raises:
        TimingConfigError: a dimension is not an integer ``> 0``, or ``num_heads`` is not a
            multiple of ``num_kv_heads``.
    """

    name: str = attrs.field(validator=_non_empty_name)
    num_layers: int = attrs.field(validator=_positive_int)
    hidden_size: int = attrs.field(validator=_positive_int)
    num_heads: int = attrs.field(validator=_positive_int)
    num_kv_heads: int = attrs.field(validator=_positive_int)
    head_dim: int = attrs.field(validator=_positive_int)
    ffn_size: int = attrs.field(validator=_positive_int)
    vocab_size: int = attrs.field(validator=_positive_int)
    context_length: int = attrs.field(validator=_positive_int)
    description: str = attrs.field(default="", kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise TimingConfigError(
                f"ModelArch.num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )

    @property
    def linear_params(self) -> int:
        """``P_lin = L·(2·d·H_q·h + 2·d·H_kv·h + 3·d·f)``: Q, O, K, V and gate, up, down."""
        d, h = self.hidden_size, self.head_dim
        per_layer = (
            2 * d * self.num_heads * h + 2 * d * self.num_kv_heads * h + 3 * d * self.ffn_size
        )
        return self.num_layers * per_layer

    @property
    def head_params(self) -> int:
        """``P_head = d·V``: the output projection (LM head)."""
        return self.hidden_size * self.vocab_size


def kv_bytes_per_token(
    model: ModelArch, *, dtype_bytes: float = 2, tensor_parallel: int = 1
) -> float:
    """KV-cache bytes one token occupies on one tensor-parallel shard (REFERENCE-engine §6.3).

    ``2·L·H_kv·h·a / t``; when ``t > H_kv`` each shard holds one (replicated) KV head, so the
    result is ``2·L·h·a``.

    Args:
        model: the architecture.
        dtype_bytes: ``a``, bytes per KV element (2 for bf16/fp16, 1 for fp8).
        tensor_parallel: ``t``, the tensor-parallel degree (integer ``>= 1``). ``H_kv`` must be
            a multiple of ``t``, or ``t`` a multiple of ``H_kv``.

    Returns:
        Bytes per token per shard (an integer value for integer ``dtype_bytes``).

    Raises:
        TimingConfigError: ``dtype_bytes`` is not a finite number ``> 0``, or
            ``tensor_parallel`` is not an integer ``>= 1`` compatible with ``H_kv``.
    """
    if (
        isinstance(dtype_bytes, bool)
        or not isinstance(dtype_bytes, int | float)
        or not math.isfinite(dtype_bytes)
        or dtype_bytes <= 0
    ):
        raise TimingConfigError(f"dtype_bytes must be a finite number > 0, got {dtype_bytes!r}")
    heads = _kv_heads_per_shard(model, tensor_parallel)
    return 2 * model.num_layers * heads * model.head_dim * dtype_bytes


def _kv_heads_per_shard(model: ModelArch, tensor_parallel: int) -> int:
    t, kv = tensor_parallel, model.num_kv_heads
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise TimingConfigError(f"tensor_parallel must be an integer >= 1, got {t!r}")
    if (t <= kv and kv % t) or (t > kv and t % kv):
        raise TimingConfigError(
            f"tensor_parallel {t} does not split the {kv} KV heads of {model.name} evenly"
        )
    return max(1, kv // t)


_T = TypeVar("_T")

_TB = 1e12
_GB = 1e9

GPUS: Mapping[str, GPUSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            GPUSpec(
                "A100",
                312 * _TB,
                2039 * _GB,
                80 * _GB,
                description="NVIDIA A100 SXM4 80GB",
            ),
            GPUSpec(
                "H100",
                989 * _TB,
                3350 * _GB,
                80 * _GB,
                description="NVIDIA H100 SXM5 80GB",
            ),
            GPUSpec(
                "H200",
                989 * _TB,
                4800 * _GB,
                141 * _GB,
                description="NVIDIA H200 SXM 141GB",
            ),
            GPUSpec(
                "B200",
                2250 * _TB,
                8000 * _GB,
                180 * _GB,
                description="NVIDIA B200 in HGX B200 (1000 W)",
            ),
            GPUSpec(
                "L40S",
                362.05 * _TB,
                864 * _GB,
                48 * _GB,
                description="NVIDIA L40S 48GB GDDR6 (PCIe)",
            ),
        )
    }
)
"""The GPU catalog, keyed by canonical name (look up with :func:`gpu_spec`)."""

MODELS: Mapping[str, ModelArch] = MappingProxyType(
    {
        arch.name: arch
        for arch in (
            ModelArch(
                "llama-3.1-8b",
                num_layers=32,
                hidden_size=4096,
                num_heads=32,
                num_kv_heads=8,
                head_dim=128,
                ffn_size=14336,
                vocab_size=128256,
                context_length=131072,
                description="meta-llama/Llama-3.1-8B",
            ),
            ModelArch(
                "llama-3.1-70b",
                num_layers=80,
                hidden_size=8192,
                num_heads=64,
                num_kv_heads=8,
                head_dim=128,
                ffn_size=28672,
                vocab_size=128256,
                context_length=131072,
                description="meta-llama/Llama-3.1-70B",
            ),
            ModelArch(
                "qwen3-8b",
                num_layers=36,
                hidden_size=4096,
                num_heads=32,
                num_kv_heads=8,
                head_dim=128,
                ffn_size=12288,
                vocab_size=151936,
                context_length=40960,
                description="Qwen/Qwen3-8B",
            ),
            ModelArch(
                "qwen3-32b",
                num_layers=64,
                hidden_size=5120,
                num_heads=64,
                num_kv_heads=8,
                head_dim=128,
                ffn_size=25600,
                vocab_size=151936,
                context_length=40960,
                description="Qwen/Qwen3-32B",
            ),
        )
    }
)
"""The model catalog, keyed by canonical lower-case name (look up with :func:`model_arch`)."""


def gpu_spec(name: str) -> GPUSpec:
    """Return the catalog's GPU named ``name`` (case-insensitive).

    Args:
        name: ``"A100"``, ``"H100"``, ``"H200"``, ``"B200"`` or ``"L40S"``.

    Returns:
        The :class:`GPUSpec`.

    Raises:
        TimingConfigError: no GPU has that name; the message lists the known names.
    """
    return _lookup("GPU", GPUS, name)


def model_arch(name: str) -> ModelArch:
    """Return the catalog's model architecture named ``name`` (case-insensitive).

    Args:
        name: ``"llama-3.1-8b"``, ``"llama-3.1-70b"``, ``"qwen3-8b"`` or ``"qwen3-32b"``.

    Returns:
        The :class:`ModelArch`.

    Raises:
        TimingConfigError: no model has that name; the message lists the known names.
    """
    return _lookup("model", MODELS, name)


def _lookup(kind: str, catalog: Mapping[str, _T], name: str) -> _T:
    if isinstance(name, str):
        wanted = name.strip().casefold()
        for key, value in catalog.items():
            if key.casefold() == wanted:
                return value
    known = ", ".join(sorted(catalog))
    raise TimingConfigError(f"unknown {kind} {name!r}; known: {known}")
