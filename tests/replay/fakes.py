"""Hand-built journals for report tests: the fields of ``engines.RequestTrace``, nothing more."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loadgen import Request, Workload

MS = 1_000_000


@attrs.frozen
class FakeAdmission:
    at_ns: int
    reused_tokens: int = 0
    is_readmission: bool = False


@attrs.define
class FakeTrace:
    request_id: str
    input_length: int = 100
    output_length: int = 4
    arrival_ns: int | None = 0
    tokenize_start_ns: int | None = None
    tokenized_ns: int | None = None
    engine_arrival_ns: int | None = None
    engine: int | None = 0
    first_admit_ns: int | None = None
    admissions: list[FakeAdmission] = attrs.Factory(list)
    token_times_ns: list[int] = attrs.Factory(list)
    num_preemptions: int = 0
    reused_input_tokens: int = 0
    terminal_ns: int | None = None
    terminal_status: str | None = None
    rejection_reason: str | None = None
    failure_reason: str | None = None
    truncated: bool = False
    prefill_worker: int | None = None
    decode_worker: int | None = None
    prefill_admit_ns: int | None = None
    prefill_done_ns: int | None = None
    destination_reserved_ns: int | None = None
    transfer_done_ns: int | None = None
    decode_admit_ns: int | None = None
    transfer_tokens: int | None = None
    transfer_ms: float | None = None
    decode_reused_tokens: int | None = None


@attrs.frozen
class FakeKind:
    value: str


@attrs.frozen
class FakeEvent:
    kind: FakeKind


@attrs.define
class FakeJournal:
    traces: dict[str, FakeTrace] = attrs.Factory(dict)
    events: list[FakeEvent] = attrs.Factory(list)


def completed(
    request_id: str,
    *,
    arrival_ms: float,
    tokens_ms: Sequence[float],
    input_length: int = 100,
    engine: int = 0,
    admit_ms: float | None = None,
    reused: int = 0,
) -> FakeTrace:
    """A completed request whose tokens came at ``tokens_ms`` (ms, converted to ns exactly)."""
    arrival_ns = round(arrival_ms * MS)
    admit_ns = arrival_ns if admit_ms is None else round(admit_ms * MS)
    tokens_ns = [round(t * MS) for t in tokens_ms]
    return FakeTrace(
        request_id=request_id,
        input_length=input_length,
        output_length=len(tokens_ns),
        arrival_ns=arrival_ns,
        engine_arrival_ns=arrival_ns,
        engine=engine,
        first_admit_ns=admit_ns,
        admissions=[FakeAdmission(admit_ns, reused, False)],
        token_times_ns=tokens_ns,
        reused_input_tokens=reused,
        terminal_ns=tokens_ns[-1] if tokens_ns else admit_ns,
        terminal_status="completed",
    )


def workload_of(ids: Sequence[str], *, input_length: int = 100, output_length: int = 4) -> Workload:
    """A workload whose requests carry ``ids`` in this order."""
    requests = tuple(
        Request(
            id=i,
            input_length=input_length,
            output_length=output_length,
            block_size=64,
            hash_ids=list(range(-(-input_length // 64))),
        )
        for i in ids
    )
    return Workload(requests=requests, source="test", format="test")


def journal_of(*traces: FakeTrace, events: Sequence[str] = ()) -> FakeJournal:
    return FakeJournal(
        traces={t.request_id: t for t in traces}, events=[FakeEvent(FakeKind(k)) for k in events]
    )
