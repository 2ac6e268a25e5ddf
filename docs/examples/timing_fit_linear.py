"""Calibrate the linear timing model from measured pass times."""

from __future__ import annotations

from engines import LinearSample, fit_linear

# (prefill tokens N_p, decode entries B_d, KV positions K, measured ms), e.g. from engine logs.
MEASURED = [
    (0, 1, 1001, 6.21),
    (0, 32, 48_000, 14.05),
    (0, 128, 260_000, 44.71),
    (2048, 0, 2048, 36.95),
    (8192, 0, 8192, 129.62),
    (4096, 16, 40_000, 73.10),
    (512, 64, 120_000, 32.02),
]


def main() -> None:
    samples = [
        LinearSample(prefill_tokens=n_p, decode_count=b_d, kv_positions=k, time_ms=ms)
        for n_p, b_d, k, ms in MEASURED
    ]
    model = fit_linear(samples)
    print(f"c0 = {model.c0:.3f} ms")
    print(f"c_p = {model.c_p * 1000:.3f} us/token")
    print(f"c_d = {model.c_d * 1000:.3f} us/sequence")
    print(f"c_kv = {model.c_kv * 1e6:.3f} ns/KV position")
    for sample in samples:
        fitted = (
            model.c0
            + model.c_p * sample.prefill_tokens
            + model.c_d * sample.decode_count
            + model.c_kv * sample.kv_positions
        )
        print(f"measured {sample.time_ms:7.2f} ms, fitted {fitted:7.2f} ms")


if __name__ == "__main__":
    main()
