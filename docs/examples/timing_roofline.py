"""Roofline timing from the catalog: the sanity numbers of the reference, and TP / efficiency."""

from __future__ import annotations

import numpy as np

from engines import PassShape, RooflineTiming, gpu_spec, kv_bytes_per_token, model_arch


def one_request(scheduled: int, computed: int, *, sampled_before: int) -> PassShape:
    """A pass with one entry: ``scheduled`` positions after ``computed`` ones."""
    prompt = computed + scheduled if sampled_before == 0 else computed
    return PassShape(
        scheduled=np.array([scheduled]),
        computed=np.array([computed]),
        prompt_length=np.array([prompt]),
        output_before=np.array([sampled_before]),
        samples=np.array([True]),
    )


def main() -> None:
    llama = model_arch("Llama-3.1-8B")
    h200 = gpu_spec("h200")
    print(f"{llama.name}: P_lin = {llama.linear_params / 1e9:.2f}e9")
    print(f"KV bytes/token (bf16, TP 1): {kv_bytes_per_token(llama):,}")
    ideal = RooflineTiming(gpu=h200, model=llama, compute_efficiency=1.0, memory_efficiency=1.0)
    decode = one_request(1, 1000, sampled_before=1)
    prefill = one_request(1000, 0, sampled_before=0)
    flops, moved = ideal.flops_and_bytes(decode)
    print(f"decode at context 1000: {moved / 1e9:.1f} GB -> {ideal.pass_time_ms(decode):.2f} ms")
    flops, moved = ideal.flops_and_bytes(prefill)
    print(f"1000-token prefill: {flops / 1e12:.1f} TFLOP -> {ideal.pass_time_ms(prefill):.1f} ms")
    realistic = RooflineTiming(gpu=h200, model=llama, overhead_ms=1.5)
    print(f"eta_c 0.6, eta_m 0.8, T_0 1.5 ms: decode {realistic.pass_time_ms(decode):.2f} ms")
    big = RooflineTiming(gpu=gpu_spec("H100"), model=model_arch("llama-3.1-70b"), tensor_parallel=4)
    print(
        f"llama-3.1-70b on 4x H100: decode {big.pass_time_ms(decode):.2f} ms, "
        f"prefill {big.pass_time_ms(prefill):.2f} ms"
    )


if __name__ == "__main__":
    main()
