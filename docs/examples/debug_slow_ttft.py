"""Why did one request have a slow TTFT? Find it, step to it, look at the queues, see it preempted.

The workload is the first 100 requests of the Mooncake conversation trace (bundled as the
dataset ``mooncake-conversation``), replayed on two small aggregated engines.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

import replay
from engines import EngineConfig, FixedTiming
from loadgen import dataset_path, open_binary, read_trace
from policies import KVAware
from replay import ReplaySession, TimelineFilter

TOPOLOGY = replay.Aggregated(
    workers=2,
    engine=EngineConfig(num_blocks=1024),  # 65,536 KV token slots per engine
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "mooncake.jsonl"
        with open_binary(dataset_path("mooncake-conversation")) as rows:
            trace.write_bytes(b"".join(itertools.islice(rows, 100)))
        workload = read_trace(trace, source="mooncake")

        # 1. Replay once; pick the slow first token that was preempted the most.
        result = replay.run(workload, topology=TOPOLOGY, policy=KVAware(), seed=0)
        ttft = result.summary.ttft_ms
        print(f"TTFT p50 {ttft.p50:.0f} ms, p90 {ttft.p90:.0f} ms, max {ttft.max:.0f} ms")
        done = [r for r in result.requests if r.status == "completed"]
        worst = max(done, key=lambda r: (r.num_preemptions, r.ttft_ms or 0.0))
        print(
            f"{worst.request_id}: TTFT {worst.ttft_ms:.0f} ms, queued "
            f"{worst.queueing_delay_ms:.0f} ms, {worst.num_preemptions} preemptions, "
            f"prompt {worst.input_length} tokens"
        )
        rid = worst.request_id

        # 2. Build the same replay without running it (recording its timeline as it goes);
        #    step to the request's engine arrival.
        with ReplaySession.build(
            workload, topology=TOPOLOGY, policy=KVAware(), seed=0, timeline=True
        ) as s:
            print(s.run_until_request(rid, "queued"))
            print(s.engine(0).describe())

            # 3. Break on its preemptions and look at the engine the first time.
            s.break_on_request(rid, "preempted")
            print(s.resume())
            print(s.engine(0).describe())

            # 4. Run on to its first token, through the other preemptions.
            while (stop := s.run_until_request(rid, "first_token")).reason == "breakpoint":
                print(f"preempted again at {stop.now_ns / 1e9:.2f} s")
            print(stop)
            print(s.request(rid).describe())

            # 5. A timeline of that request only, from its arrival to its first token: the
            #    passes that ran it and those that ran on its engine while it waited.
            window = TimelineFilter(
                start_ns=3_000_000_000, end_ns=11_540_000_000, request_ids=[rid]
            )
            path = Path(tmp) / "timeline.json"
            s.write_timeline(path, window)
            events = json.loads(path.read_bytes())["traceEvents"]
            spans = [e for e in events if e["ph"] == "b"]
            passes = [e for e in events if e.get("name") == "pass"]
            waited = [e for e in passes if rid not in e["args"]["request_ids"]]
            print(
                f"{len(events)} trace events, {len(passes)} passes ({len(waited)} while it waited)"
            )
            print(f"phases of {rid}:")
            for e in spans:
                print(f"  {e['ts'] / 1e6:7.3f} s  {e['name']}")

            # 6. Go back: to the stop before the first token, then to an instant.
            print(repr(s.back(1)))
            print(repr(s.goto(time_s=8.74)))
            print(repr(s.engine(0)))
            print(repr(s.step(engine=0)))  # the pass ending at 8.74 s commits
            print(repr(s.step(engine=0)))  # the next one starts
            print(s.engine(0).current_pass)
            s.run()  # to the end: the same report as replay.run gave


if __name__ == "__main__":
    main()
