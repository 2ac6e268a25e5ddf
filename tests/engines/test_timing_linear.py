"""LinearTiming and fit_linear: REFERENCE-engine §5.4."""

from __future__ import annotations

import numpy as np
import pytest

from engines import LinearSample, LinearTiming, TimingConfigError, fit_linear

from .test_timing_shapes import shape

LINEAR = LinearTiming(c0=5.0, c_p=0.02, c_d=0.3, c_kv=0.0001, c_pp=1e-6)


def test_pass_time_is_linear_in_the_aggregates() -> None:
    pass_ = shape((1, 1000, 1000, 1, True), (40, 960, 1000, 0, True), (512, 0, 2000, 0, False))
    n_p, b_d, k = 552, 1, 1001 + 1000 + 512
    pp = 40 * (960 + 20) + 512 * (0 + 256)
    expected = 5.0 + 0.02 * n_p + 0.3 * b_d + 0.0001 * k + 1e-6 * pp
    assert LINEAR.pass_time_ms(pass_) == pytest.approx(expected, rel=1e-12)


def test_empty_pass_costs_nothing_not_c0() -> None:
    assert LINEAR.pass_time_ms(shape()) == 0.0


def test_prefill_role_drops_decode_entries() -> None:
    pass_ = shape((1, 1000, 1000, 1, True), (100, 0, 100, 0, True), role="prefill")
    expected = 5.0 + 0.02 * 100 + 0.0001 * 100 + 1e-6 * 100 * 50
    assert LINEAR.pass_time_ms(pass_) == pytest.approx(expected, rel=1e-12)


def test_decode_role_counts_every_entry_as_decode() -> None:
    pass_ = shape((1, 999, 1000, 0, True), (1, 1000, 1000, 1, True), role="decode")
    expected = 5.0 + 0.3 * 2 + 0.0001 * (1000 + 1001)
    assert LINEAR.pass_time_ms(pass_) == pytest.approx(expected, rel=1e-12)


def test_sample_from_shape_reduces_to_the_regressors() -> None:
    sample = LinearSample.from_shape(shape((1, 9, 5, 5, True), (8, 0, 8, 0, True)), time_ms=2.5)
    assert sample == LinearSample(
        prefill_tokens=8, decode_count=1, kv_positions=18, prefill_attention=32, time_ms=2.5
    )


def _synthetic(model: LinearTiming, count: int, seed: int) -> list[LinearSample]:
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        entries = []
        for _ in range(int(rng.integers(1, 6))):
            prompt = int(rng.integers(1, 4000))
            if rng.random() < 0.5:
                entries.append((1, prompt + 5, prompt, 6, True))
            else:
                done = int(rng.integers(0, prompt))
                entries.append((prompt - done, done, prompt, 0, True))
        pass_ = shape(*entries)
        samples.append(LinearSample.from_shape(pass_, time_ms=model.pass_time_ms(pass_)))
    return samples


def test_fit_recovers_known_coefficients_from_exact_data() -> None:
    truth = LinearTiming(c0=4.0, c_p=0.015, c_d=0.25, c_kv=2e-4)
    fitted = fit_linear(_synthetic(truth, 60, seed=1))
    for name in ("c0", "c_p", "c_d", "c_kv"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-8)
    assert fitted.c_pp == 0.0


def test_fit_recovers_the_long_prompt_term_when_asked() -> None:
    truth = LinearTiming(c0=4.0, c_p=0.015, c_d=0.25, c_kv=2e-4, c_pp=3e-7)
    fitted = fit_linear(_synthetic(truth, 80, seed=2), fit_c_pp=True)
    for name in ("c0", "c_p", "c_d", "c_kv", "c_pp"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6)


def test_fit_keeps_coefficients_non_negative() -> None:
    truth = LinearTiming(c0=4.0, c_p=0.015, c_d=0.0, c_kv=2e-4)
    rng = np.random.default_rng(3)
    noisy = [
        LinearSample(
            prefill_tokens=s.prefill_tokens,
            decode_count=s.decode_count,
            kv_positions=s.kv_positions,
            time_ms=max(0.0, s.time_ms + float(rng.normal(0, 0.5))),
        )
        for s in _synthetic(truth, 200, seed=4)
    ]
    fitted = fit_linear(noisy)
    assert min(fitted.c0, fitted.c_p, fitted.c_d, fitted.c_kv) >= 0.0
    assert fitted.c_p == pytest.approx(0.015, rel=0.05)


def test_fit_needs_as_many_samples_as_coefficients() -> None:
    with pytest.raises(TimingConfigError) as info:
        fit_linear([LinearSample(prefill_tokens=1, decode_count=0, kv_positions=1, time_ms=1)])
    assert str(info.value) == "fit_linear needs at least 4 samples to fit 4 coefficients, got 1"


def test_fit_refuses_samples_that_never_vary_a_regressor() -> None:
    only_prefill = [
        LinearSample(prefill_tokens=n, decode_count=0, kv_positions=n, time_ms=1 + n / 100)
        for n in (100, 200, 300, 400, 500)
    ]
    with pytest.raises(TimingConfigError) as info:
        fit_linear(only_prefill)
    assert str(info.value) == (
        "fit_linear: the samples determine only 2 of the 4 coefficients c0, c_p, c_d, c_kv; "
        "measure passes that vary each regressor"
    )


def test_negative_coefficient_raises() -> None:
    with pytest.raises(TimingConfigError) as info:
        LinearTiming(c0=-1.0, c_p=0.0, c_d=0.0, c_kv=0.0)
    assert str(info.value) == "LinearTiming.c0 must be a finite number >= 0, got -1.0"
