"""Pass-timing models (REFERENCE-engine §5).

Every model is a frozen ``attrs`` value with one method, ``pass_time_ms(shape)``, that turns
the :class:`~engines.PassShape` of a scheduled pass into its duration in float milliseconds.
Models are validated when they are built; a bad parameter raises :class:`TimingConfigError`.

Every family here splits a pass into a prefill part and a decode part and adds them (a mixed
pass costs both); the roofline (``_timing_roofline``) prices a pass as a whole. The role
overrides of §5.2 apply to every family: a prefill-role engine never charges the decode part, a
decode-role engine never charges the prefill part.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import combinations, repeat
from operator import and_, le, lt
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._exceptions import EngineError
from ._pass import DecodeRun, PassShape, Role, per_pass_times_ms

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

__all__ = (
    "FixedTiming",
    "LinearSample",
    "LinearTiming",
    "PolynomialTiming",
    "TimingConfigError",
    "fit_linear",
)


class TimingConfigError(EngineError, ValueError):
    """A timing model, GPU spec, model architecture or tokenizer stage got a bad parameter.

    Derives from :class:`~engines.EngineError` (hence :class:`simclock.SimulationError`) and
    from :class:`ValueError`.
    """


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


def _finite(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a real, finite number of either sign."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TimingConfigError(
            f"{type(instance).__name__}.{attribute.name} must be a finite number, got {value!r}"
        )


def _sampling_decodes(shape: PassShape) -> BoolArray:
    """The §5.2 ``has_decode`` set: entries that sample and had sampled before (any sampling
    entry on a decode-role engine; none on a prefill-role engine)."""
    if shape.role == "decode":
        return shape.samples.copy()
    if shape.role == "prefill":
        return np.zeros_like(shape.samples)
    mask: BoolArray = shape.samples & (shape.output_before >= 1)
    return mask


#: Passes with at most this many entries are reduced in plain Python over ``tolist()`` copies
#: of the columns; larger ones with numpy. Below it the fixed cost of each numpy call (about a
#: microsecond) dominates; above it numpy's per-entry cost wins (``bench/engine_pass.py``).
#: Both paths compute the same integers, so the choice never changes a result.
SMALL_PASS_ENTRIES = 48


def _int_column(values: npt.NDArray[Any]) -> IntArray:
    """``values`` as int64 (no copy when it already is), so products cannot overflow int32."""
    column: IntArray = np.asarray(values, dtype=np.int64)
    return column


def _entry_sums(shape: PassShape) -> tuple[int, int, int, int, int] | None:
    """The §5.1 aggregates over the entries the role charges, as exact integers.

    Returns:
        ``(N_p, B_d, K_p, K_d, A2)``: prefill positions, decode entries, KV positions
        ``Σ (c_r + n_r)`` of the prefill and of the decode entries, and twice the prefill
        attention work ``A2 = Σ_{prefill} n_r·(2·c_r + n_r)``; ``None`` when the role charges
        no entry (an empty pass, or only decode entries on a prefill-role engine).
    """
    role = shape.role
    if len(shape.scheduled) <= SMALL_PASS_ENTRIES:
        n_l: list[int] = shape.scheduled.tolist()
        c_l: list[int] = shape.computed.tolist()
        if role == "decode":  # every entry is a decode entry
            return (0, len(n_l), 0, sum(c_l) + sum(n_l), 0) if n_l else None
        tokens = decodes = prefill_kv = decode_kv = attention = 0
        for n, c, o in zip(n_l, c_l, shape.output_before.tolist(), strict=True):
            if n == 1 and o >= 1:
                decodes += 1
                decode_kv += c + 1
            else:
                tokens += n
                prefill_kv += c + n
                attention += n * (2 * c + n)
        if role == "prefill":
            if decodes == len(n_l):
                return None
            return tokens, 0, prefill_kv, 0, attention
        return (tokens, decodes, prefill_kv, decode_kv, attention) if n_l else None
    n_a = _int_column(shape.scheduled)
    c_a = _int_column(shape.computed)
    if role == "decode":
        return 0, len(n_a), 0, int(c_a.sum()) + int(n_a.sum()), 0
    decode = (n_a == 1) & (shape.output_before >= 1)
    decodes = int(np.count_nonzero(decode))
    if role == "prefill" and decodes == len(n_a):
        return None
    prefill = ~decode
    n_p, c_p = n_a[prefill], c_a[prefill]
    tokens = int(n_p.sum())
    prefill_kv = int(c_p.sum()) + tokens
    attention = int((n_p * (2 * c_p + n_p)).sum())
    if role == "prefill":
        return tokens, 0, prefill_kv, 0, attention
    return tokens, decodes, prefill_kv, int(c_a[decode].sum()) + decodes, attention


def _polynomial_sums(shape: PassShape) -> tuple[int, int, int]:
    """``(N, |D|, Σ_{r in D} (P_r + num_output_r))`` for :class:`PolynomialTiming`: prefill
    positions, and the size and active tokens of the §5.2 ``has_decode`` set ``D`` (see
    :func:`_sampling_decodes`), in one sweep."""
    role = shape.role
    if len(shape.scheduled) <= SMALL_PASS_ENTRIES:
        s_l: list[bool] = shape.samples.tolist()
        p_l: list[int] = shape.prompt_length.tolist()
        o_l: list[int] = shape.output_before.tolist()
        count = active = 0
        if role == "decode":  # no prefill entries; every sampling entry is in D
            for s, p, o in zip(s_l, p_l, o_l, strict=True):
                if s:
                    count += 1
                    active += p + o
            return 0, count, active
        tokens = 0
        counts_decodes = role != "prefill"
        for n, s, p, o in zip(shape.scheduled.tolist(), s_l, p_l, o_l, strict=True):
            if o >= 1:
                if n != 1:
                    tokens += n
                if s and counts_decodes:
                    count += 1
                    active += p + o
            else:
                tokens += n
        return tokens, count, active
    tokens = 0
    if role != "decode":
        n_a = _int_column(shape.scheduled)
        tokens = int(n_a[(n_a != 1) | (shape.output_before < 1)].sum())
    mask = _sampling_decodes(shape)
    count = int(np.count_nonzero(mask))
    if not count:
        return tokens, 0, 0
    prompts = _int_column(shape.prompt_length)[mask]
    return tokens, count, int(prompts.sum()) + int(_int_column(shape.output_before)[mask].sum())


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
        role = shape.role
        if len(shape.scheduled) <= SMALL_PASS_ENTRIES:
            return self.pass_time_ms_lists(
                shape.computed.tolist(),
                shape.prompt_length.tolist(),
                shape.output_before.tolist(),
                shape.samples.tolist(),
                role,
            )
        if role == "decode":
            has_prefill = False
            has_decode = bool(shape.samples.any())
        else:
            has_prefill = bool((shape.computed < shape.prompt_length).any())
            has_decode = role != "prefill" and bool(
                (shape.samples & (shape.output_before >= 1)).any()
            )
        return float(self.prefill_ms) * has_prefill + float(self.decode_ms) * has_decode

    def decode_run_ms(self, run: DecodeRun) -> npt.NDArray[np.float64]:
        """Durations of every pass of a run of decode steps (see :meth:`pass_time_ms`)."""
        if run.role != "decode" and bool(
            (run.computed < run.prompt_length).any() or (run.output_before < 1).any()
        ):
            return per_pass_times_ms(self, run)
        # no entry touches a prompt position; every pass samples for entries that had sampled
        has_decode = run.role != "prefill"
        value = float(self.prefill_ms) * False + float(self.decode_ms) * has_decode
        return np.full(run.passes, value, dtype=np.float64)

    def steady_decode_ms(self, role: Role) -> float:
        """The duration of every pass of a run of decode steps in which every entry sampled
        before the run (what :meth:`decode_run_ms` gives each pass of such a run): for this
        model it does not depend on the batch."""
        return float(self.prefill_ms) * False + float(self.decode_ms) * (role != "prefill")

    def pass_time_ms_lists(
        self,
        computed: list[int],
        prompts: list[int],
        outputs: list[int],
        samples: list[bool],
        role: str,
    ) -> float:
        """:meth:`pass_time_ms` of a pass given as plain lists (its small-pass branch): the
        entries' ``computed``, prompt lengths, outputs sampled before and whether each samples.

        Engines call it directly for passes of at most ``SMALL_PASS_ENTRIES`` entries, which
        saves building a :class:`PassShape`; the result is the same number.
        """
        # ``True in map(...)`` stops at the first hit without a Python-level loop.
        if role == "decode":
            has_prefill = False
            has_decode = True in samples
        else:
            has_prefill = True in map(lt, computed, prompts)  # c_r < P
            has_decode = role != "prefill" and True in map(
                and_,
                samples,
                map(le, repeat(1), outputs),  # samples and o >= 1
            )
        return float(self.prefill_ms) * has_prefill + float(self.decode_ms) * has_decode


@attrs.frozen(kw_only=True)
class PolynomialTiming:
    """A quadratic in new prompt tokens plus a quadratic in active-KV fraction
    (REFERENCE-engine §5.3; the Dynamo mocker's default)::

        N         = Σ n_r over prefill entries (prompt chunks and recomputes, after prefix hits)
        T_prefill = prefill_a2·N² + prefill_a1·N + prefill_a0            if N > 0 else 0
        u         = min(1, Σ_{r in D} (P_r + num_output_r) / kv_capacity_tokens)
        T_decode  = max(decode_floor_ms, decode_b2·u² + decode_b1·u + decode_b0)
                                                                       if D non-empty else 0
        T         = T_prefill + T_decode

    ``D`` is the §5.2 ``has_decode`` set (entries that sample and had sampled before; every
    sampling entry on a decode-role engine), ``num_output`` is counted before the pass. With the
    default coefficients ``N = 1000`` gives 32.1 ms. A prefill-role engine drops ``T_decode``; a
    decode-role engine has no prefill entries.

    Attributes:
        prefill_a2: ms per token², default ``4.209989e-7``.
        prefill_a1: ms per token, default ``1.518344e-2``.
        prefill_a0: ms, default ``16.50142``.
        decode_b2: ms, default ``-25.74``.
        decode_b1: ms, default ``54.01``.
        decode_b0: ms, default ``5.74``.
        decode_floor_ms: the least decode part, ms, default ``1.0``.

    Raises:
        TimingConfigError: a coefficient is not finite, or ``decode_floor_ms`` is negative.
    """

    prefill_a2: float = attrs.field(default=4.209989e-7, validator=_finite)
    prefill_a1: float = attrs.field(default=1.518344e-2, validator=_finite)
    prefill_a0: float = attrs.field(default=16.50142, validator=_finite)
    decode_b2: float = attrs.field(default=-25.74, validator=_finite)
    decode_b1: float = attrs.field(default=54.01, validator=_finite)
    decode_b0: float = attrs.field(default=5.74, validator=_finite)
    decode_floor_ms: float = attrs.field(default=1.0, validator=_finite_non_negative)

    def prefill_time_ms(self, prompt_tokens: int) -> float:
        """``T_prefill`` for ``prompt_tokens`` new prompt tokens (0 for none), clamped at 0."""
        n = float(prompt_tokens)
        if n <= 0:
            return 0.0
        return max(0.0, self.prefill_a2 * n * n + self.prefill_a1 * n + self.prefill_a0)

    def decode_time_ms(self, kv_fraction: float) -> float:
        """``T_decode`` at active-KV fraction ``kv_fraction`` (clipped to ``[0, 1]``)."""
        u = min(1.0, max(0.0, float(kv_fraction)))
        return max(
            float(self.decode_floor_ms),
            self.decode_b2 * u * u + self.decode_b1 * u + self.decode_b0,
        )

    def pass_time_ms(self, shape: PassShape) -> float:
        """Return ``T_prefill + T_decode`` for the pass, in milliseconds.

        Args:
            shape: the scheduled pass; ``kv_capacity_tokens`` must be ``> 0`` when the pass
                has decode work.

        Returns:
            The pass duration (``0.0`` for an empty pass).

        Raises:
            TimingConfigError: the pass has decode work and ``shape.kv_capacity_tokens <= 0``.
        """
        prefill_tokens, decodes, active = _polynomial_sums(shape)
        total = self.prefill_time_ms(prefill_tokens)
        if decodes:
            capacity = shape.kv_capacity_tokens
            if capacity <= 0:
                raise TimingConfigError(
                    "PolynomialTiming needs kv_capacity_tokens > 0 in the pass shape, "
                    f"got {capacity!r}"
                )
            total += self.decode_time_ms(active / capacity)
        return total

    def decode_run_ms(self, run: DecodeRun) -> npt.NDArray[np.float64]:
        """Durations of every pass of a run of decode steps (see :meth:`pass_time_ms`):
        no prefill part, and ``|D|`` and the active tokens computed per pass exactly."""
        capacity = run.kv_capacity_tokens
        if capacity <= 0 or (
            run.role != "decode"
            and bool((run.output_before < 1).any() or (run.computed < run.prompt_length).any())
        ):
            return per_pass_times_ms(self, run)
        sizes = run.batch_sizes()
        index = np.arange(run.passes, dtype=np.int64)
        active = run.live_sums(run.prompt_length + run.output_before) + index * sizes
        u = np.minimum(1.0, np.maximum(0.0, active / capacity))
        decode = np.maximum(
            float(self.decode_floor_ms),
            self.decode_b2 * u * u + self.decode_b1 * u + self.decode_b0,
        )
        out: npt.NDArray[np.float64] = self.prefill_time_ms(0) + decode
        return out


@attrs.frozen(kw_only=True)
class LinearTiming:
    """A linear model in the §5.1 aggregates, the recommended calibratable model (§5.4)::

        T = c0 + c_p·N_p + c_d·B_d + c_kv·K + c_pp·Σ_{prefill} n_r·(c_r + n_r/2)

    (``T = 0`` only when the pass has nothing to charge). The pass splits additively into a
    prefill part (``c_p·N_p``, ``c_kv`` over prefill entries, the ``c_pp`` term) and a decode part
    (``c_d·B_d``, ``c_kv`` over decode entries); a prefill-role engine drops the decode part, a
    decode-role engine has only decode entries. ``c0`` is charged once per pass that has
    something left to charge.
    Fit the coefficients to measured pass times with :func:`fit_linear`.

    Attributes:
        c0: fixed cost per pass, ms.
        c_p: ms per prefill position (``N_p``).
        c_d: ms per decode entry (``B_d``).
        c_kv: ms per KV position read (``K = Σ (c_r + n_r)``).
        c_pp: ms per unit of prefill attention work ``n_r·(c_r + n_r/2)``; default 0.

    Raises:
        TimingConfigError: a coefficient is not a finite number ``>= 0``.
    """

    c0: float = attrs.field(validator=_finite_non_negative)
    c_p: float = attrs.field(validator=_finite_non_negative)
    c_d: float = attrs.field(validator=_finite_non_negative)
    c_kv: float = attrs.field(validator=_finite_non_negative)
    c_pp: float = attrs.field(default=0.0, validator=_finite_non_negative)

    def pass_time_ms(self, shape: PassShape) -> float:
        """Return the duration of the pass in milliseconds.

        Args:
            shape: the scheduled pass.

        Returns:
            ``c0 + c_p·N_p + c_d·B_d + c_kv·K + c_pp·(prefill attention)``; ``0.0`` if empty.
        """
        sums = _entry_sums(shape)
        if sums is None:
            return 0.0
        prefill_tokens, decode_count, kv_positions, prefill_attention = _regressors(sums)
        return float(
            self.c0
            + self.c_p * prefill_tokens
            + self.c_d * decode_count
            + self.c_kv * kv_positions
            + self.c_pp * prefill_attention
        )

    def decode_run_ms(self, run: DecodeRun) -> npt.NDArray[np.float64]:
        """Durations of every pass of a run of decode steps (see :meth:`pass_time_ms`):
        ``B_d`` and ``K`` computed per pass exactly, then the same sum in the same order."""
        if run.role != "decode" and bool(
            (run.output_before < 1).any() or (run.computed < run.prompt_length).any()
        ):
            return per_pass_times_ms(self, run)
        sizes = run.batch_sizes()
        index = np.arange(run.passes, dtype=np.int64)
        kv = run.live_sums(run.computed) + (index + 1) * sizes
        zero = np.zeros(run.passes, dtype=np.float64)
        out: npt.NDArray[np.float64] = (
            self.c0
            + self.c_p * zero
            + self.c_d * sizes.astype(np.float64)
            + self.c_kv * kv.astype(np.float64)
            + self.c_pp * zero
        )
        return out


def _linear_regressors(shape: PassShape) -> tuple[float, float, float, float]:
    """``(N_p, B_d, K, Σ_{prefill} n_r·(c_r + n_r/2))`` over the entries the role charges."""
    sums = _entry_sums(shape)
    return (0.0, 0.0, 0.0, 0.0) if sums is None else _regressors(sums)


def _regressors(sums: tuple[int, int, int, int, int]) -> tuple[float, float, float, float]:
    """The :class:`LinearTiming` regressors from :func:`_entry_sums`."""
    tokens, decodes, prefill_kv, decode_kv, attention = sums
    # attention is twice an integer or half-integer sum; the true division is exact below 2**53.
    return float(tokens), float(decodes), float(prefill_kv + decode_kv), attention / 2


@attrs.frozen(kw_only=True)
class LinearSample:
    """One measured pass, reduced to the regressors of :class:`LinearTiming`.

    Attributes:
        prefill_tokens: ``N_p``.
        decode_count: ``B_d``.
        kv_positions: ``K``, over the entries the role charges.
        prefill_attention: ``Σ_{prefill} n_r·(c_r + n_r/2)``; default 0.
        time_ms: the measured pass time, ms.

    Raises:
        TimingConfigError: a value is not a finite number ``>= 0``.
    """

    prefill_tokens: float = attrs.field(validator=_finite_non_negative)
    decode_count: float = attrs.field(validator=_finite_non_negative)
    kv_positions: float = attrs.field(validator=_finite_non_negative)
    prefill_attention: float = attrs.field(default=0.0, validator=_finite_non_negative)
    time_ms: float = attrs.field(validator=_finite_non_negative)

    @classmethod
    def from_shape(cls, shape: PassShape, *, time_ms: float) -> LinearSample:
        """Reduce a pass shape (with the role overrides applied) and its measured time.

        Args:
            shape: the pass.
            time_ms: its measured duration, ms.

        Returns:
            The sample.
        """
        prefill_tokens, decode_count, kv_positions, prefill_attention = _linear_regressors(shape)
        return cls(
            prefill_tokens=prefill_tokens,
            decode_count=decode_count,
            kv_positions=kv_positions,
            prefill_attention=prefill_attention,
            time_ms=time_ms,
        )


_LINEAR_NAMES = ("c0", "c_p", "c_d", "c_kv", "c_pp")


def fit_linear(samples: Iterable[LinearSample], *, fit_c_pp: bool = False) -> LinearTiming:
    """Fit :class:`LinearTiming` to measured pass times by non-negative least squares.

    Every subset of the coefficients is fitted with ``numpy.linalg.lstsq`` (the others held at
    0) and the best fit whose coefficients are all ``>= 0`` wins, which is the exact
    non-negative least-squares solution for these few regressors. Exact data is recovered
    exactly (to rounding).

    Args:
        samples: the measured passes (at least as many as coefficients fitted).
        fit_c_pp: also fit ``c_pp`` (long-prompt attention); otherwise ``c_pp = 0``.

    Returns:
        The fitted model.

    Raises:
        TimingConfigError: fewer samples than coefficients, or no sample varies a regressor
            enough to fit it (for example no pass ever had decode entries).
    """
    rows = list(samples)
    width = 5 if fit_c_pp else 4
    if len(rows) < width:
        raise TimingConfigError(
            f"fit_linear needs at least {width} samples to fit {width} coefficients, "
            f"got {len(rows)}"
        )
    x: FloatArray = np.array(
        [
            [1.0, r.prefill_tokens, r.decode_count, r.kv_positions, r.prefill_attention][:width]
            for r in rows
        ],
        dtype=np.float64,
    )
    y: FloatArray = np.array([r.time_ms for r in rows], dtype=np.float64)
    rank = int(np.linalg.matrix_rank(x))
    if rank < width:
        raise TimingConfigError(
            f"fit_linear: the samples determine only {rank} of the {width} coefficients "
            f"{', '.join(_LINEAR_NAMES[:width])}; measure passes that vary each regressor"
        )
    best: FloatArray | None = None
    best_residual = math.inf
    for size in range(width, 0, -1):
        for subset in combinations(range(width), size):
            cols = list(subset)
            coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
            if np.any(coef < 0):
                continue
            full: FloatArray = np.zeros(width, dtype=np.float64)
            full[cols] = coef
            residual = float(np.sum((x @ full - y) ** 2))
            if residual < best_residual * (1 - 1e-12):
                best, best_residual = full, residual
    if best is None:  # only the all-zero model is left
        best = np.zeros(width, dtype=np.float64)
    values = [float(v) for v in best] + [0.0] * (5 - width)
    return LinearTiming(**dict(zip(_LINEAR_NAMES, values, strict=True)))
