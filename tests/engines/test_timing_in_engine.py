"""Every timing family drives a real engine core; closed forms hold for a lone request."""

from __future__ import annotations

import pytest

from engines import (
    EngineConfig,
    FixedTiming,
    LinearTiming,
    PolynomialTiming,
    RooflineTiming,
    TableTiming,
    TimingModel,
    gpu_spec,
    model_arch,
)

from .sim import MS, core, req, simulate
from .test_timing_shapes import shape

FAMILIES: dict[str, TimingModel] = {
    "fixed": FixedTiming(prefill_ms=50, decode_ms=10),
    "polynomial": PolynomialTiming(),
    "linear": LinearTiming(c0=2.0, c_p=0.015, c_d=0.1, c_kv=1e-4, c_pp=1e-7),
    "roofline": RooflineTiming(
        gpu=gpu_spec("H100"), model=model_arch("llama-3.1-8b"), overhead_ms=0.5
    ),
    "table": TableTiming(
        prefill_tokens=[128, 1024, 8192],
        prefill_ms=[12.0, 30.0, 180.0],
        decode_batch=[1, 16, 256],
        decode_context=[512, 8192, 65536],
        decode_ms=[[6, 7, 12], [7, 10, 30], [12, 30, 200]],
    ),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_runs_a_small_workload_to_completion(name: str) -> None:
    c = core(EngineConfig(num_blocks=40, max_num_batched_tokens=1024), FAMILIES[name])
    requests = [req(f"r{i}", 300 + 97 * i, 5 + i, arrival_ms=3.0 * i) for i in range(8)]
    simulate(c, requests, check=True)
    for r in requests:
        trace = c.journal.traces[r.id]
        assert trace.terminal_status == "completed"
        assert len(trace.token_times_ns) == r.output_length
        assert trace.token_times_ns == sorted(set(trace.token_times_ns))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_lone_request_token_times_are_the_model_pass_times(name: str) -> None:
    model = FAMILIES[name]
    prompt, output = 700, 4
    c = core(EngineConfig(num_blocks=1000), model)
    simulate(c, [req("a", prompt, output)], check=True)
    capacity = 1000 * 64
    expected = [
        round(model.pass_time_ms(shape((prompt, 0, prompt, 0, True), capacity=capacity)) * MS)
    ]
    for k in range(1, output):
        decode = shape((1, prompt + k - 1, prompt, k, True), capacity=capacity)
        expected.append(expected[-1] + round(model.pass_time_ms(decode) * MS))
    assert c.journal.traces["a"].token_times_ns == expected


def test_linear_ttft_closed_form() -> None:
    model = FAMILIES["linear"]
    assert isinstance(model, LinearTiming)
    prompt = 700
    c = core(EngineConfig(num_blocks=1000), model)
    simulate(c, [req("a", prompt, 1)])
    ttft_ms = model.c0 + (model.c_p + model.c_kv) * prompt + model.c_pp * prompt * prompt / 2
    assert c.journal.traces["a"].token_times_ns == [round(ttft_ms * MS)]
