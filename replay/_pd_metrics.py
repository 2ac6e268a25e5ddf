"""Phase metrics of disaggregated prefill/decode runs (REFERENCE-engine §6).

Kept apart from the P/D topology so the report can import it: it needs only the records'
handoff fields and :class:`Distribution`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import attrs

from ._metrics import Distribution

__all__ = ("PDPhases", "pd_phases")


class _HandoffLike(Protocol):
    @property
    def prefill_admit_ms(self) -> float | None: ...
    @property
    def prefill_done_ms(self) -> float | None: ...
    @property
    def destination_reserved_ms(self) -> float | None: ...
    @property
    def transfer_done_ms(self) -> float | None: ...
    @property
    def decode_admit_ms(self) -> float | None: ...


class _RecordLike(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def engine_arrival_ms(self) -> float | None: ...
    @property
    def first_token_ms(self) -> float | None: ...
    @property
    def handoff(self) -> _HandoffLike | None: ...


class _ResultLike(Protocol):
    @property
    def requests(self) -> Iterable[_RecordLike]: ...


@attrs.frozen
class PDPhases:
    """Where the time to first token goes in a disaggregated run (distributions, ms).

    Population: completed requests of phase ``measure`` with a handoff and at least one
    token (primers and warm-ups are never measured). With ``routing``
    the time with the prefill side's policy, each TTFT is
    ``routing + prefill_queueing + prefill_compute + reservation_wait + transfer
    + decode_queueing + decode_first_pass``.

    Attributes:
        prefill_queueing_ms: ``prefill_admit - engine_arrival``.
        prefill_compute_ms: ``prefill_done - prefill_admit``.
        reservation_wait_ms: ``max(0, destination_reserved - prefill_done)``.
        transfer_ms: ``transfer_done - max(prefill_done, destination_reserved)``.
        decode_queueing_ms: ``decode_admit - transfer_done``.
        decode_first_pass_ms: ``first_token - decode_admit``.
    """

    prefill_queueing_ms: Distribution
    prefill_compute_ms: Distribution
    reservation_wait_ms: Distribution
    transfer_ms: Distribution
    decode_queueing_ms: Distribution
    decode_first_pass_ms: Distribution

    def as_dict(self) -> dict[str, dict[str, int | float | None]]:
        """Return every distribution as a plain dict, by metric name, in attribute order."""
        return {field.name: getattr(self, field.name).as_dict() for field in attrs.fields(PDPhases)}


def pd_phases(records: _ResultLike | Iterable[_RecordLike]) -> PDPhases:
    """Return the P/D phase metrics of a run (a ``ReplayResult``) or of its request records.

    Records without a handoff (aggregated runs) are skipped, so an aggregated run gives empty
    distributions.
    """
    items: Iterable[_RecordLike] = records.requests if hasattr(records, "requests") else records
    columns: dict[str, list[float]] = {field.name: [] for field in attrs.fields(PDPhases)}
    for record in items:
        h = record.handoff
        if (
            record.status != "completed"
            or record.phase != "measure"
            or h is None
            or record.first_token_ms is None
            or record.engine_arrival_ms is None
            or h.prefill_admit_ms is None
            or h.prefill_done_ms is None
            or h.destination_reserved_ms is None
            or h.transfer_done_ms is None
            or h.decode_admit_ms is None
        ):
            continue
        start = max(h.prefill_done_ms, h.destination_reserved_ms)
        columns["prefill_queueing_ms"].append(h.prefill_admit_ms - record.engine_arrival_ms)
        columns["prefill_compute_ms"].append(h.prefill_done_ms - h.prefill_admit_ms)
        columns["reservation_wait_ms"].append(
            max(0.0, h.destination_reserved_ms - h.prefill_done_ms)
        )
        columns["transfer_ms"].append(h.transfer_done_ms - start)
        columns["decode_queueing_ms"].append(h.decode_admit_ms - h.transfer_done_ms)
        columns["decode_first_pass_ms"].append(record.first_token_ms - h.decode_admit_ms)
    return PDPhases(**{name: Distribution.of(values) for name, values in columns.items()})
