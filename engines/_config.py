"""Engine configuration (REFERENCE-engine §2)."""

from __future__ import annotations

from typing import Any, get_args

import attrs

from ._exceptions import EngineConfigError
from ._pass import Role
from ._scheduler import Scheduler, VLLMScheduler

__all__ = ("DEFAULT_CONTEXT_LENGTH", "EngineConfig")

#: The context length used when none is configured: large enough never to bind.
DEFAULT_CONTEXT_LENGTH = 2**31 - 1


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngineConfigError(f"EngineConfig.{attribute.name} must be an int >= 1, got {value!r}")


def _fraction(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0.0 <= value < 1.0  # also rejects NaN
    ):
        raise EngineConfigError(
            f"EngineConfig.{attribute.name} must be a number in [0, 1), got {value!r}"
        )


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise EngineConfigError(f"EngineConfig.{attribute.name} must be a bool, got {value!r}")


def _role(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in get_args(Role):
        raise EngineConfigError(
            f"EngineConfig.role must be one of 'aggregated', 'prefill', 'decode', got {value!r}"
        )


def _scheduler(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Scheduler):
        raise EngineConfigError(
            "EngineConfig.scheduler must be a Scheduler (name, options, make_cache, bind), "
            f"got {value!r}"
        )


# field metadata: echo the field only when it differs from its default (EngineConfig.as_dict)
_ECHO_IF_SET = "simclock.echo_if_set"


@attrs.frozen(kw_only=True)
class EngineConfig:
    """The knobs of one engine (REFERENCE-engine §2); every field is keyword-only.

    Attributes:
        num_blocks: usable KV blocks (vLLM's ``num_gpu_blocks - 1``: no null block here).
        block_size: token slots per KV block, ``E``.
        max_num_batched_tokens: the token budget of one pass.
        max_num_seqs: the cap on the number of running requests.
        enable_chunked_prefill: split prompts longer than the budget across passes; when
            off, a prompt that does not fit the remaining budget waits, and a prompt longer
            than the whole budget is rejected.
        enable_prefix_caching: key full blocks and reuse them across requests.
        context_length: prompt + output limit; a prompt of at least this many tokens is
            rejected, and generation stops when a request reaches it.
        watermark_fraction: blocks kept free when admitting a waiting request while something
            is already scheduled in the pass (``floor(fraction * num_blocks)``), in ``[0, 1)``.
        role: ``"aggregated"``, ``"prefill"`` or ``"decode"`` (REFERENCE-engine §6).
        scheduler: the batching policy deciding each pass (:class:`~engines.Scheduler`):
            vLLM v1's rules by default (:class:`~engines.VLLMScheduler`).
        reserve_one_per_pass: decode role: make at most one reservation per pass boundary
            (an idle engine makes the next one at once), as AISimulate's replay does; by
            default (``False``) every queued reservation the free blocks allow is made at
            each boundary.

    Raises:
        EngineConfigError: a field has a bad value.
    """

    num_blocks: int = attrs.field(validator=_positive_int)
    block_size: int = attrs.field(default=64, validator=_positive_int)
    max_num_batched_tokens: int = attrs.field(default=8192, validator=_positive_int)
    max_num_seqs: int = attrs.field(default=256, validator=_positive_int)
    enable_chunked_prefill: bool = attrs.field(default=True, validator=_bool)
    enable_prefix_caching: bool = attrs.field(default=True, validator=_bool)
    context_length: int = attrs.field(default=DEFAULT_CONTEXT_LENGTH, validator=_positive_int)
    watermark_fraction: float = attrs.field(default=0.0, validator=_fraction)
    role: Role = attrs.field(default="aggregated", validator=_role)
    scheduler: Scheduler = attrs.field(factory=VLLMScheduler, validator=_scheduler)
    reserve_one_per_pass: bool = attrs.field(
        default=False, validator=_bool, metadata={_ECHO_IF_SET: True}
    )

    @property
    def watermark_blocks(self) -> int:
        """``floor(watermark_fraction * num_blocks)``: the admission watermark in blocks."""
        return int(self.watermark_fraction * self.num_blocks)

    def as_dict(self) -> dict[str, object]:
        """The fields by name, as a run's configuration echo holds them (``config.json``).

        An option left at its default is left out, so a run that does not use it echoes the
        same configuration as before the option existed; a scheduler is echoed as
        ``{"name": ..., **options}``.
        """
        out: dict[str, object] = {}
        for a in attrs.fields(EngineConfig):
            value = getattr(self, a.name)
            if a.name == "scheduler":
                if value == VLLMScheduler():
                    continue
                value = {"name": value.name, **value.options()}
            elif a.metadata.get(_ECHO_IF_SET) and value == a.default:
                continue
            out[a.name] = value
        return out
