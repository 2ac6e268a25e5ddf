"""The shape of one engine pass, as every timing model sees it (REFERENCE-engine §5.1)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, Protocol

import attrs
import numpy as np
import numpy.typing as npt

__all__ = (
    "DecodeRun",
    "PassShape",
    "Role",
    "TimingModel",
    "decode_run_times_ms",
    "model_method",
    "per_pass_times_ms",
)

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


@attrs.frozen(eq=False)
class DecodeRun:
    """A run of consecutive passes in which every entry is a decode step (REFERENCE-engine §5.1).

    Entry ``j`` (in running order) is in passes ``0 .. remaining[j] - 1``; in pass ``i`` it
    has computed ``computed[j] + i`` positions, sampled ``output_before[j] + i`` tokens,
    schedules one position and samples. Entries leave after their last pass, so the batch only
    shrinks. :meth:`shape` gives pass ``i`` as the :class:`PassShape` a per-pass engine would
    price; :meth:`columns` gives all passes at once as ragged arrays.

    Attributes:
        passes: the number of passes.
        computed: ``c_r`` of each entry at the first pass.
        prompt_length: ``P`` of each entry.
        output_before: ``num_output`` of each entry at the first pass.
        remaining: passes each entry takes part in (``>= 1``).
        role: the engine's role.
        kv_capacity_tokens: ``num_blocks * block_size`` of the engine.
    """

    passes: int
    computed: IntArray
    prompt_length: IntArray
    output_before: IntArray
    remaining: IntArray
    role: Role = "aggregated"
    kv_capacity_tokens: int = 0

    def shape(self, i: int) -> PassShape:
        """Pass ``i`` as one :class:`PassShape`."""
        live = self.remaining > i
        k = int(np.count_nonzero(live))
        return PassShape(
            np.ones(k, dtype=np.int64),
            self.computed[live] + i,
            self.prompt_length[live],
            self.output_before[live] + i,
            np.ones(k, dtype=np.bool_),
            self.role,
            self.kv_capacity_tokens,
        )

    def batch_sizes(self) -> IntArray:
        """Entries per pass."""
        counts: IntArray = np.bincount(
            np.minimum(self.remaining, self.passes), minlength=self.passes + 1
        )
        sizes: IntArray = counts[::-1].cumsum()[::-1][1:]
        return sizes

    def live_sums(self, values: IntArray) -> IntArray:
        """Per pass, the sum of ``values`` (one per entry) over the entries in that pass."""
        span = np.minimum(self.remaining, self.passes)
        leaving = np.zeros(self.passes + 1, dtype=np.int64)
        np.add.at(leaving, span, values.astype(np.int64))
        left: IntArray = np.cumsum(leaving)[: self.passes]
        total = int(values.sum())
        return total - left

    def columns(self) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
        """Every pass's entries in one ragged layout.

        Returns:
            ``(pass_index, entry, computed, prompt_length, output_before)``: one row per
            (pass, entry) pair, passes in order and entries in running order within a pass.
        """
        k = len(self.remaining)
        span = np.minimum(self.remaining, self.passes)
        pass_index = np.repeat(np.arange(self.passes, dtype=np.int64)[None, :], k, axis=0)
        live = pass_index < span[:, None]
        # pass-major order: transpose so rows run over passes, then entries
        live_t = live.T
        entry = np.broadcast_to(np.arange(k, dtype=np.int64)[None, :], live_t.shape)[live_t]
        index = pass_index.T[live_t]
        return (
            index,
            entry,
            self.computed[entry] + index,
            self.prompt_length[entry],
            self.output_before[entry] + index,
        )


def model_method(timing: TimingModel, name: str) -> Callable[..., Any] | None:
    """``timing``'s optional method ``name`` (``decode_run_ms``, ``steady_decode_ms``,
    ``pass_time_ms_lists``: shortcuts that must agree with ``pass_time_ms``), or None.

    None also when the class that defines the shortcut is not the class that defines
    ``pass_time_ms`` or one of its subclasses: a model that overrides ``pass_time_ms`` below
    the shortcut (a subclass of a built-in model that prices passes its own way) is priced
    through its ``pass_time_ms``, never by the shortcut it inherits.
    """
    mro = type(timing).__mro__
    owner = next((c for c in mro if name in vars(c)), None)
    if owner is None:
        return None
    pricer = next((c for c in mro if "pass_time_ms" in vars(c)), None)
    if pricer is not None and not issubclass(owner, pricer):
        return None
    method: Callable[..., Any] = getattr(timing, name)
    return method


def decode_run_times_ms(timing: TimingModel, run: DecodeRun) -> npt.NDArray[np.float64]:
    """Durations of every pass of ``run``, in ms: ``timing.decode_run_ms(run)`` when the model
    has that batch method, else one :meth:`TimingModel.pass_time_ms` call per pass.

    Both must give, pass for pass, the number ``pass_time_ms`` gives for that pass's shape.
    """
    batch = model_method(timing, "decode_run_ms")
    if batch is not None:
        out = np.asarray(batch(run), dtype=np.float64)
        if out.shape != (run.passes,):
            raise ValueError(
                f"{type(timing).__name__}.decode_run_ms returned shape {out.shape}, "
                f"expected ({run.passes},)"
            )
        return out
    return per_pass_times_ms(timing, run)


def per_pass_times_ms(timing: TimingModel, run: DecodeRun) -> npt.NDArray[np.float64]:
    """Durations of every pass of ``run``, one :meth:`TimingModel.pass_time_ms` call each
    (a value that is not a number reads as NaN: the engine reports it at that pass)."""
    values = []
    for i in range(run.passes):
        ms = timing.pass_time_ms(run.shape(i))
        if isinstance(ms, bool) or not isinstance(ms, int | float):
            ms = math.nan
        values.append(float(ms))
    return np.array(values, dtype=np.float64)
