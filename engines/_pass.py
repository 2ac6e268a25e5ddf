"""The shape of one engine pass, as every timing model sees it (REFERENCE-engine §5.1)."""

from __future__ import annotations

from typing import Literal, Protocol

import attrs
import numpy as np
import numpy.typing as npt

__all__ = ("PassShape", "Role", "TimingModel")

Role = Literal["aggregated", "prefill", "decode"]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@attrs.frozen(eq=False)
class PassShape:
    """One scheduled pass: parallel arrays with one row per entry, in scheduling order.

    Attributes:
        scheduled: ``n_r``, positions computed by this pass for the entry.
        computed: ``c_r``, positions already computed before the pass (prefix hit included).
        prompt_length: ``P`` of the entry's request.
        output_before: ``num_output`` of the request before the pass.
        samples: whether the entry samples a token at the end of the pass.
        role: the engine's role (``aggregated``, ``prefill`` or ``decode``).
        kv_capacity_tokens: ``num_blocks * block_size`` of the engine.
    """

    scheduled: IntArray
    computed: IntArray
    prompt_length: IntArray
    output_before: IntArray
    samples: BoolArray
    role: Role = "aggregated"
    kv_capacity_tokens: int = 0

    @property
    def is_decode(self) -> BoolArray:
        """Decode entries: one position for a request that has sampled (all, on decode role)."""
        if self.role == "decode":
            return np.ones(len(self.scheduled), dtype=np.bool_)
        decode: BoolArray = (self.scheduled == 1) & (self.output_before >= 1)
        return decode

    @property
    def prefill_tokens(self) -> int:
        """``N_p``: positions scheduled by prefill entries."""
        return int(self.scheduled[~self.is_decode].sum())

    @property
    def decode_count(self) -> int:
        """``B_d``: the number of decode entries."""
        return int(self.is_decode.sum())

    @property
    def kv_positions(self) -> int:
        """``K``: KV positions read, ``sum(c_r + n_r)`` over all entries."""
        return int((self.computed + self.scheduled).sum())

    @property
    def sampling_count(self) -> int:
        """``S``: entries that sample a token this pass."""
        return int(self.samples.sum())


class TimingModel(Protocol):
    """How long a pass takes. Implementations are frozen values (``@attrs.frozen``)."""

    def pass_time_ms(self, shape: PassShape) -> float:
        """Return the duration of the pass described by ``shape``, in milliseconds (>= 0)."""
        ...
