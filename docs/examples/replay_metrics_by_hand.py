"""finalize on a hand-recorded journal: the TPOT / ITL naming trap of REFERENCE-engine §8.

A user-supplied composition records lifecycle events into an ``engines.Journal`` and calls
``replay.finalize`` exactly as the built-in runner does.
"""

from __future__ import annotations

from engines import EventKind, Journal, LifecycleEvent
from loadgen import Request, Workload
from replay import RunMeta, finalize

MS = 1_000_000  # nanoseconds per millisecond


def record_request(journal: Journal, request_id: str, token_times_ms: list[int]) -> None:
    """One request arriving at 0 on engine 0 and producing tokens at the given times."""
    events = [
        (0, EventKind.ARRIVED, None, (("input_length", 100), ("output_length", 4))),
        (0, EventKind.QUEUED, 0, ()),
        (0, EventKind.ADMITTED, 0, (("reused_tokens", 0), ("is_readmission", False))),
    ]
    for k, t in enumerate(token_times_ms):
        events.append((t, EventKind.FIRST_TOKEN if k == 0 else EventKind.TOKEN, 0, ()))
    events.append((token_times_ms[-1], EventKind.FINISHED, 0, ()))
    for time_ms, kind, engine, detail in events:
        journal.record(LifecycleEvent(time_ms * MS, kind, request_id, engine, detail))


def main() -> None:
    journal = Journal()
    record_request(journal, "steady", [50, 60])  # one 10 ms gap
    record_request(journal, "bursty", [50, 80, 110, 140])  # three 30 ms gaps
    requests = tuple(
        Request(id=rid, input_length=100, output_length=4, block_size=64, hash_ids=[1, 2])
        for rid in ("steady", "bursty")
    )
    workload = Workload(requests=requests, source="by_hand", format="python")
    result = finalize(journal, workload=workload, meta=RunMeta(seed=0))
    s = result.summary
    print(f"per-request TPOT: {[r.tpot_ms for r in result.requests]}")
    print(f"mean TPOT {s.tpot_ms.mean} ms, mean ITL {s.itl_ms.mean} ms over {s.itl_ms.count} gaps")
    print(f"TTFT p50 {s.ttft_ms.p50} ms, E2E max {s.e2el_ms.max} ms")
    print(f"events: {dict(result.evidence.event_counts)}")
    print(f"statuses: {dict((k, v) for k, v in s.status_counts.items() if v)}")


if __name__ == "__main__":
    main()
