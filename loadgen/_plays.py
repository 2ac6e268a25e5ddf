"""Agentic play instances, seeded snapshots and warm-up requests (REFERENCE-workloads §5).

These are pure functions of a play's requests; the driver calls them when a lane starts
a play. Times here are the recorded, authored milliseconds (speedup is the driver's).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from ._exceptions import WorkloadConfigError
from ._lineage import map_lineage, rename
from ._request import ArrivalRule, Dep, Request
from ._stats import nominal_release_ms
from ._workload import Play

__all__ = ("Snapshot", "instance_requests", "preparation_requests", "snapshot_cut", "snapshot_u")


def instance_requests(
    requests: Sequence[Request],
    play: Play,
    instance: int,
    lane: int,
    content_base: int | None,
) -> list[Request]:
    """Rewrite a play's requests as instance ``P#k`` (§5.4).

    Request ids, conversation ids, the play id, dependency ids and lineage get the
    instance id in place of the leading play id. With ``content_base`` set, the play's
    content-id range is moved to start there, so the instance shares no cache with any
    other instance.

    Args:
        requests: the play's requests, in play order.
        play: the play.
        instance: ``k``.
        lane: the lane that runs it.
        content_base: where the play's content ids move to, or None to keep them.
    """
    instance_id = f"{play.id}#{instance}"
    lo, hi = play.content_ids
    out: list[Request] = []
    for request in requests:
        ids = request.hash_ids
        if content_base is not None and ids.size:
            inside = (ids >= lo) & (ids < hi)
            ids = np.where(inside, ids - lo + content_base, ids)
        identity = request.identity
        out.append(
            attrs.evolve(
                request,
                id=rename(request.id, play.id, instance_id),
                hash_ids=ids,
                arrival=ArrivalRule(
                    not_before_ms=request.arrival.not_before_ms,
                    after=tuple(
                        attrs.evolve(d, request_id=rename(d.request_id, play.id, instance_id))
                        for d in request.arrival.after
                    ),
                ),
                identity=attrs.evolve(
                    identity,
                    conversation_id=None
                    if identity.conversation_id is None
                    else rename(identity.conversation_id, play.id, instance_id),
                    play_id=instance_id,
                    lane=lane,
                    lineage=map_lineage(identity.lineage, play.id, instance_id),
                ),
            )
        )
    return out


def snapshot_u(snapshot_seed: int, lane: int) -> float:
    """The uniform draw of lane ``lane``: ``default_rng(SeedSequence(seed, spawn_key=(lane,)))``."""
    rng = np.random.default_rng(np.random.SeedSequence(snapshot_seed, spawn_key=(lane,)))
    return float(rng.random())


@attrs.frozen
class Snapshot:
    """A play cut at ``t*`` (§5.5).

    Attributes:
        cut_ms: ``t*`` in the play's recorded time.
        u: the draw that placed the cut.
        live: the live requests, re-timed relative to the cut (history edges became
            floors), in play order.
        history: the history requests (never released), in play order.
    """

    cut_ms: float
    u: float
    live: tuple[Request, ...]
    history: tuple[Request, ...]


def _recorded_starts(requests: Sequence[Request]) -> list[float]:
    nominal = nominal_release_ms(requests)
    return [
        r.arrival.not_before_ms if r.arrival.not_before_ms is not None else float(nominal[i])
        for i, r in enumerate(requests)
    ]


def snapshot_cut(requests: Sequence[Request], *, snapshot_seed: int, lane: int) -> Snapshot:
    """Cut a play uniformly in the 25-75 % band of its recorded span (§5.5).

    Requests recorded to start before ``t*`` become history; a live request's edge to a
    history request becomes a floor at that request's recorded start or end plus the
    delay; every live floor is taken relative to ``t*`` (never below 0).

    Raises:
        WorkloadConfigError: a history request depends on a live one
            (``snapshot: historical request '<id>' depends on live request '<id>'``).
    """
    starts = _recorded_starts(requests)
    first, last = min(starts), max(starts)
    u = snapshot_u(snapshot_seed, lane)
    cut = first + (0.25 + 0.5 * u) * (last - first)
    start_of = {r.id: s for r, s in zip(requests, starts, strict=True)}
    end_of = {
        r.id: s + (r.recorded_service_ms or 0.0) for r, s in zip(requests, starts, strict=True)
    }
    history_ids = {r.id for r, s in zip(requests, starts, strict=True) if s < cut}
    live: list[Request] = []
    history: list[Request] = []
    for request in requests:
        if request.id in history_ids:
            for dep in request.arrival.after:
                if dep.request_id not in history_ids:
                    raise WorkloadConfigError(
                        f"snapshot: historical request '{request.id}' depends on live "
                        f"request '{dep.request_id}'"
                    )
            history.append(request)
            continue
        floors: list[float] = []
        if request.arrival.not_before_ms is not None:
            floors.append(request.arrival.not_before_ms - cut)
        kept: list[Dep] = []
        for dep in request.arrival.after:
            if dep.request_id in history_ids:
                event = start_of[dep.request_id] if dep.on == "start" else end_of[dep.request_id]
                floors.append(event + dep.delay_ms - cut)
            else:
                kept.append(dep)
        floor = max([0.0, *floors]) if floors or not kept else None
        live.append(
            attrs.evolve(
                request,
                arrival=ArrivalRule(
                    not_before_ms=None if floor is None else round(floor, 6), after=tuple(kept)
                ),
            )
        )
    return Snapshot(cut_ms=cut, u=u, live=tuple(live), history=tuple(history))


def preparation_requests(
    snapshot: Snapshot, instance_id: str, *, repeats: int
) -> tuple[list[Request], list[Request]]:
    """Primers and warm-ups of one lane (§5.6), in the order the lane runs them.

    Primers: for each live conversation with history (in order of first appearance in
    the play), its last historical request (largest recorded start, then play order), with
    one output token. Warm-ups: ``repeats`` requests cycling through the primers (or
    repeating the first live request's input when the lane has no history).

    Returns:
        ``(primers, warmups)``; ids ``<instance>/primer/<i>`` and ``<instance>/warmup/<j>``,
        no arrival rule of their own (the lane runs them back to back).
    """
    live_conversations = {r.identity.conversation_id for r in snapshot.live}
    starts = _recorded_starts(snapshot.history) if snapshot.history else []
    last: dict[str | None, tuple[float, int, Request]] = {}
    for position, (request, start) in enumerate(zip(snapshot.history, starts, strict=True)):
        key = request.identity.conversation_id
        best = last.get(key)
        if best is None or start >= best[0]:
            last[key] = (start, position, request)
    appearance = list(dict.fromkeys(r.identity.conversation_id for r in snapshot.history))
    chosen = [last[c][2] for c in appearance if c in live_conversations]
    primers = [
        _prep(source, f"{instance_id}/primer/{i}", "primer") for i, source in enumerate(chosen)
    ]
    if chosen:
        cycle = chosen
    elif snapshot.live:
        cycle = [snapshot.live[0]]
    else:
        cycle = []
    warmups = [
        _prep(cycle[j % len(cycle)], f"{instance_id}/warmup/{j}", "warmup")
        for j in range(repeats if cycle else 0)
    ]
    return primers, warmups


def _prep(source: Request, request_id: str, phase: str) -> Request:
    return attrs.evolve(
        source,
        id=request_id,
        output_length=1,
        arrival=ArrivalRule(not_before_ms=0.0),
        identity=attrs.evolve(
            source.identity,
            phase="primer" if phase == "primer" else "warmup",
            turn_index=None,
        ),
        recorded_service_ms=None,
    )
