"""Pass-timing models (REFERENCE-engine §5).

Every model is a frozen ``attrs`` value with one method, ``pass_time_ms(shape)``, that turns
the :class:`~engines.PassShape` of a scheduled pass into its duration in float milliseconds.
Models are validated when they are built; a bad parameter raises :class:`TimingConfigError`.

Every family splits a pass into a prefill part and a decode part and adds them (a mixed pass
costs both). The role overrides of §5.2 apply to every family: a prefill-role engine never
charges the decode part, a decode-role engine never charges the prefill part.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from simclock import SimulationError

from ._pass import PassShape

__all__ = ("FixedTiming", "TimingConfigError")


class TimingConfigError(SimulationError, ValueError):
    """A timing model, GPU spec, model architecture or tokenizer stage got a bad parameter."""


def _finite_non_negative(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a real, finite number ``>= 0`` (``bool`` is not a number here)."""
    _check_number(type(instance).__name__, attribute.name, value, positive=False)


def _finite_positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a real, finite number ``> 0``."""
    _check_number(type(instance).__name__, attribute.name, value, positive=True)


def _check_number(owner: str, name: str, value: object, *, positive: bool) -> None:
    bound = "> 0" if positive else ">= 0"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        raise TimingConfigError(f"{owner}.{name} must be a finite number {bound}, got {value!r}")


def _charges(shape: PassShape) -> tuple[bool, bool]:
    """Whether the role lets a pass charge its prefill part and its decode part (§5.2)."""
    return shape.role != "decode", shape.role != "prefill"


@attrs.frozen
class FixedTiming:
    """Two constants: ``prefill_ms`` if the pass touches a prompt position, ``decode_ms`` if it
    samples for a request that had already sampled (REFERENCE-engine §5.2, AIS parity rule).

    ``T = prefill_ms·has_prefill + decode_ms·has_decode`` where ``has_prefill`` holds when some
    entry's range ``[c_r, c_r + n_r)`` starts before its prompt ends (``c_r < P``) and
    ``has_decode`` holds when some entry samples at the end of the pass and had
    ``num_output >= 1`` before it. Hence a lone pass completing a fresh prompt costs
    ``prefill_ms`` only, a mixed pass costs both, and a pass in which a preempted request finishes
    recomputing its prompt costs both even alone. A prefill-role engine never charges
    ``decode_ms``; a decode-role engine never charges ``prefill_ms`` and counts every sampling
    entry as a decode.

    Attributes:
        prefill_ms: the cost of a pass with prompt work, in milliseconds (finite, ``>= 0``).
        decode_ms: the cost of a pass with decode work, in milliseconds (finite, ``>= 0``).

    Raises:
        TimingConfigError: a parameter is not a finite number ``>= 0``.
    """

    prefill_ms: float = attrs.field(validator=_finite_non_negative)
    decode_ms: float = attrs.field(validator=_finite_non_negative)

    def pass_time_ms(self, shape: PassShape) -> float:
        """Return the duration of the pass in milliseconds.

        Args:
            shape: the scheduled pass.

        Returns:
            ``prefill_ms·has_prefill + decode_ms·has_decode`` (``0.0`` for an empty pass).
        """
        charge_prefill, charge_decode = _charges(shape)
        has_prefill = charge_prefill and bool(np.any(shape.computed < shape.prompt_length))
        if shape.role == "decode":
            has_decode = bool(np.any(shape.samples))
        else:
            has_decode = charge_decode and bool(np.any(shape.samples & (shape.output_before >= 1)))
        return float(self.prefill_ms) * has_prefill + float(self.decode_ms) * has_decode
