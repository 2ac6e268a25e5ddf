"""Time one AISimulate replay; run with the interpreter of AISimulate's own environment.

Usage: ``python _aisim_once.py TRACE WORKERS KV_BLOCKS [PER_REQUEST.json|-] [pd]`` — prints
``aisim_cpu_s SECONDS`` and ``completed N``, and writes AISimulate's per-request records to
``PER_REQUEST.json`` when given (``bench/fidelity.py`` reads them). It compiles AISimulate's
public prediction config with the knobs of ``bench/vs_aisimulate.py`` (vLLM scheduler,
chunked prefill, block 64, prefix caching, fixed KV capacity, fixed pass timing 50/10 ms,
trace hash ids of 512 tokens, trace timestamps at speedup 1, round robin) and times
``runner.run(spec)`` with per-request capture on, which includes AISimulate's own trace load.
With ``pd`` it replays disaggregated: WORKERS prefill and WORKERS decode workers, a KV link of
50 GB/s at 262,144 bytes per token. Kept free of simclock imports: it runs in another venv.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    trace, workers, blocks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    per_request = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
    # "pd": as many prefill as decode workers (WORKERS each), a 50 GB/s link of 256 KiB/token
    disaggregated = len(sys.argv) > 5 and sys.argv[5] == "pd"
    from aisimulate.compiler import prediction_to_replay_spec
    from aisimulate.config.cli import CorePredictionConfig
    from aisimulate.runner import EngineReplayRunnerFactory
    from aisimulate.sweeper.replay import ReplayOutputRequirements

    def worker(replicas: int) -> dict[str, object]:
        return {
            "parallelism": {"replicas": replicas, "tensor": 1},
            "context_length": 262_144,
            "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256},
            "kv_cache": {
                "block_size": 64,
                "prefix_caching": True,
                "capacity": {"type": "fixed", "blocks": blocks},
            },
            "timing": {"type": "fixed", "prefill_ms": 50.0, "decode_ms": 10.0},
        }

    config = {
        "engine": {
            "model": "Qwen/Qwen3-32B-FP8",
            "hardware": "h200_sxm",
            "backend": "vllm",
            "context_length": 262_144,
            "enable_chunked_prefill": True,
            "tokenization": {"workers": 1, "base_ms": 0.0, "per_input_token_us": 0.0},
            "mode": "aggregated",
            "workers": {"aggregated": worker(workers)},
        },
        "traffic": {
            "source": {"type": "trace", "format": "mooncake", "paths": [trace], "block_size": 512},
            "load": {"type": "trace_timestamps", "speedup": 1.0},
        },
    }
    if disaggregated:
        engine = config["engine"]
        engine["mode"] = "disaggregated"
        engine["workers"] = {"prefill": worker(workers), "decode": worker(workers)}
        engine["kv_transfer"] = {"bytes_per_token": 262_144, "bandwidth_gb_per_second": 50.0}
    spec = prediction_to_replay_spec(CorePredictionConfig.model_validate(config))
    runner = EngineReplayRunnerFactory().create(worker_id=0)
    try:
        wanted = ReplayOutputRequirements(include_raw_report=True, capture_per_request=True)
        start = time.process_time()
        result = runner.run(spec, output_requirements=wanted)
        cpu = time.process_time() - start
    finally:
        runner.close()
    report = result.metadata["native_report"]
    if per_request is not None:
        with open(per_request, "w") as out:
            json.dump(report["per_request"], out)
    print(f"completed {report['completed_requests']}")
    print(f"aisim_cpu_s {cpu:.4f}")


if __name__ == "__main__":
    main()
