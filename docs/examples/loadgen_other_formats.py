"""CSV traces (Azure, BurstGPT, Vidur), synthetic load, and the statistics of any workload."""

from __future__ import annotations

import tempfile
from pathlib import Path

import loadgen

FILES = {
    "azure.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n",
    "burst.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "9,GPT-4,1024,0,1024,Conversation log\n"
    "12,GPT-4,180,95,275,API log\n",
    "vidur.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,2048,128\n1.25,512,64\n",
}

with tempfile.TemporaryDirectory() as folder:
    for name, text in FILES.items():
        (Path(folder) / name).write_text(text, encoding="utf-8")
    for name in FILES:
        workload = loadgen.read_trace(Path(folder) / name)
        print(workload.format_note)
        for r in workload.requests:
            print(
                f"  {r.id:9} at {r.arrival.not_before_ms:>8} ms  in {r.input_length:>5}"
                f"  out {r.output_length:>4}  ids {r.hash_ids.size}"
            )
        print("  tolerated:", workload.tolerated)
    kept = loadgen.read_burstgpt(Path(folder) / "burst.csv", failures="prefill_only")
    print("burstgpt, failures kept as prefill-only:", [r.output_length for r in kept.requests])

spec = loadgen.SyntheticSpec.from_dict(
    {
        "count": 1000,
        "arrivals": "gamma(5.53, 1.094)",
        "input": "lognormal(12035, 6909)",
        "output": "uniform(100, 600)",
        "prefix_groups": 8,
        "shared_prefix_ratio": 0.5,
    }
)
synthetic = loadgen.generate_synthetic(spec, seed=42)
stats = loadgen.workload_stats(synthetic)
print(
    f"synthetic: {stats.requests} requests over {stats.span_ms / 1000:.1f} s, "
    f"rate {stats.rate_per_s:.2f}/s, CV {stats.inter_arrival_cv:.2f}"
)
print(
    f"  input p50 {stats.input.p50:.0f}, p90 {stats.input.p90:.0f}; "
    f"prefix hit ratio {stats.prefix_hit_ratio:.2%}"
)
again = loadgen.generate_synthetic(spec, seed=42)
print("same seed, same workload:", again == synthetic)
