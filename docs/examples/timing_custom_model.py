"""A custom timing model: decode batches padded to CUDA-graph sizes.

Serving engines replay decode passes from CUDA graphs captured for a few batch sizes, so a
decode batch of 5 costs what a batch of 8 costs. This model charges the decode part by the
padded batch and the prefill part by tokens, and adds the two for a mixed pass.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from engines import FixedTiming, PassShape, Role, TimingModel


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


@attrs.frozen(kw_only=True)
class PaddedDecodeTiming:
    """Prefill: ``prefill_base_ms + prefill_token_ms * N_p``; decode: ``decode_slot_ms`` per
    slot of the smallest captured batch size that holds ``B_d`` (eager beyond the largest)."""

    prefill_base_ms: float = attrs.field(validator=_positive)
    prefill_token_ms: float = attrs.field(validator=_positive)
    decode_base_ms: float = attrs.field(validator=_positive)
    decode_slot_ms: float = attrs.field(validator=_positive)
    graph_sizes: tuple[int, ...] = attrs.field(default=(1, 2, 4, 8, 16, 32, 64, 128, 256))

    @graph_sizes.validator
    def _check_sizes(self, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
        if not value or list(value) != sorted(set(value)) or value[0] < 1:
            raise ValueError(f"graph_sizes must be increasing and >= 1, got {value!r}")

    def padded_batch(self, batch: int) -> int:
        """The captured size a decode batch runs at (itself past the largest graph)."""
        index = int(np.searchsorted(np.asarray(self.graph_sizes), batch))
        return self.graph_sizes[index] if index < len(self.graph_sizes) else batch

    def pass_time_ms(self, shape: PassShape) -> float:
        decode = shape.is_decode  # every entry on a decode-role engine
        prefill_tokens = int(shape.scheduled[~decode].sum())
        batch = int(decode.sum())
        total = 0.0
        if prefill_tokens and shape.role != "decode":
            total += self.prefill_base_ms + self.prefill_token_ms * prefill_tokens
        if batch and shape.role != "prefill":
            total += self.decode_base_ms + self.decode_slot_ms * self.padded_batch(batch)
        return total


def decodes(batch: int, *, role: Role = "aggregated") -> PassShape:
    """A pass of ``batch`` decode entries at context 1000."""
    ones = np.ones(batch, dtype=np.int64)
    return PassShape(
        scheduled=ones,
        computed=ones * 1000,
        prompt_length=ones * 1000,
        output_before=ones,
        samples=np.ones(batch, dtype=np.bool_),
        role=role,
    )


def prompt(tokens: int) -> PassShape:
    """A pass that computes one whole fresh prompt."""
    one = np.ones(1, dtype=np.int64)
    return PassShape(
        scheduled=one * tokens,
        computed=one * 0,
        prompt_length=one * tokens,
        output_before=one * 0,
        samples=np.ones(1, dtype=np.bool_),
    )


def concat(a: PassShape, b: PassShape) -> PassShape:
    """Both passes' entries in one pass."""
    return PassShape(
        scheduled=np.concatenate([a.scheduled, b.scheduled]),
        computed=np.concatenate([a.computed, b.computed]),
        prompt_length=np.concatenate([a.prompt_length, b.prompt_length]),
        output_before=np.concatenate([a.output_before, b.output_before]),
        samples=np.concatenate([a.samples, b.samples]),
    )


def main() -> None:
    model: TimingModel = PaddedDecodeTiming(
        prefill_base_ms=8.0, prefill_token_ms=0.02, decode_base_ms=4.0, decode_slot_ms=0.05
    )
    for batch in (1, 5, 8, 9, 300):
        print(f"decode batch {batch:>3}: {model.pass_time_ms(decodes(batch)):.2f} ms")
    print(f"prompt 1000 tokens: {model.pass_time_ms(prompt(1000)):.2f} ms")
    print(
        f"mixed (5 decodes + prompt): {model.pass_time_ms(concat(decodes(5), prompt(1000))):.2f} ms"
    )
    print(f"prefill role, 5 decodes: {model.pass_time_ms(decodes(5, role='prefill')):.2f} ms")
    fixed = FixedTiming(prefill_ms=50, decode_ms=10)
    print(f"fixed 50/10, mixed: {fixed.pass_time_ms(concat(decodes(5), prompt(1000))):.2f} ms")
    try:
        PaddedDecodeTiming(
            prefill_base_ms=8.0, prefill_token_ms=-1.0, decode_base_ms=4.0, decode_slot_ms=0.05
        )
    except ValueError as error:
        print(f"rejected: {error}")


if __name__ == "__main__":
    main()
