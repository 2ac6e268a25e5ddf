"""Estimates from an engine's current state: the pass in flight, how long a prompt takes to
prefill, when a request placed now would be admitted and produce its first token.

Everything here reads the engine and changes nothing. The estimates replay the vLLM
scheduler's token-budget rules (REFERENCE-engine §3.2) forward from the current state on a
private copy of the queues' counters, pricing every pass with the engine's own timing model,
under stated assumptions:

1. no other request arrives, none is cancelled;
2. KV blocks suffice: no admission waits for blocks and nobody is preempted;
3. a queued request's prefix hit is what the cache holds now (blocks cached later by the
   requests ahead of it are not counted); the candidate's is what the caller says;
4. on a decode-role engine the candidate's prompt KV is resident (the transfer is not
   counted) and reservations still queued are not counted.

They are exact when these hold (an engine with ample KV and no further arrivals) and wrong
by as much as they fail otherwise: under KV pressure they are optimistic, and with the SGLang
scheduler (another admission order) they are an approximation.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import attrs
import numpy as np

from ._core import DONE, Pass
from ._pass import DecodeRun, decode_run_times_ms

if TYPE_CHECKING:
    from ._core import EngineCore, Seq

__all__ = ("MAX_ESTIMATE_PASSES", "PassInFlight", "PlacementEstimate", "estimate_placement")

#: Passes an estimate replays at most (runs of identical decode passes count as one); past
#: them, it gives up (``None``).
MAX_ESTIMATE_PASSES = 20_000


@attrs.frozen
class PassInFlight:
    """The pass an engine is running now.

    Attributes:
        start_ns: when it started.
        end_ns: when it ends (its tokens are sampled then).
        request_ids: its entries' requests, in scheduling order.
        prefill_tokens: positions it computes for prefill entries (prompt chunks, recompute).
        decode_tokens: its decode entries (one position each).
    """

    start_ns: int
    end_ns: int
    request_ids: tuple[str, ...]
    prefill_tokens: int
    decode_tokens: int

    def __repr__(self) -> str:
        n = len(self.request_ids)
        return (
            f"<PassInFlight pass {_seconds(self.start_ns)} -> {_seconds(self.end_ns)}: "
            f"{n} request{'' if n == 1 else 's'}, {self.prefill_tokens} prefill + "
            f"{self.decode_tokens} decode tokens>"
        )


def _seconds(time_ns: int) -> str:
    """A virtual time as seconds with all nine decimals, e.g. ``"12.500000000 s"``."""
    seconds, rest = divmod(time_ns, 1_000_000_000)
    return f"{seconds}.{rest:09d} s"


@attrs.frozen
class PlacementEstimate:
    """What an engine expects for a request placed on it now (see :mod:`engines._estimates`
    for the assumptions).

    Attributes:
        queue_position: requests ahead of it in the waiting queue.
        admission_ns: the start of the pass that would admit it.
        first_token_ns: the end of the pass that would complete its prompt (its first
            token; on a prefill-role engine, the prompt's completion).
    """

    queue_position: int
    admission_ns: int
    first_token_ns: int


class _Entry:
    """A request's counters in the replay of an estimate."""

    __slots__ = ("computed", "left", "out", "prompt", "rem")

    def __init__(self, prompt: int, out: int, computed: int, left: int) -> None:
        self.prompt = prompt
        self.out = out
        self.computed = computed
        self.rem = prompt + out - computed  # positions to compute before the next sample
        self.left = left  # tokens still to generate


def pass_in_flight(plan: Pass, role: str) -> PassInFlight:
    """Describe the planned pass ``plan`` (entries cancelled since are left out)."""
    ids: list[str] = []
    prefill = decode = 0
    decode_role = role == "decode"
    for j, s in enumerate(plan.entries):
        if s.state == DONE and s.num_computed < 0:
            continue  # cancelled while the pass runs
        n = plan.scheduled[j]
        ids.append(s.rid)
        # the engine's own rule for a prefill chunk (what its PREFILL_CHUNK events record)
        if n > 1 or (not decode_role and plan.output_before[j] == 0):
            prefill += n
        else:
            decode += n
    return PassInFlight(plan.start_ns, plan.end_ns, tuple(ids), prefill, decode)


def _hit_positions(core: EngineCore, s: Seq) -> int:
    """Positions of ``s``'s prompt cached now (its admission lookup, read only)."""
    if not core.caching or s.num_computed:
        return 0
    e = core.block_size
    keys = s.keys
    limit = min((s.prompt + s.num_output - 1) // e, len(keys))
    return len(core.kv.lookup_prefix(keys, limit, chain=True)) * e if limit > 0 else 0


def estimate_placement(
    core: EngineCore,
    now_ns: int,
    in_flight_end_ns: int | None,
    prompt: int,
    output: int,
    cached: int,
    *,
    behind_queue: bool = True,
) -> PlacementEstimate | None:
    """Replay the engine's passes from now for a request of ``prompt`` tokens placed now.

    Args:
        core: the engine (read only), brought to the current instant by its owner.
        now_ns: the current instant.
        in_flight_end_ns: when the pass in flight ends (``None``: no pass in flight).
        prompt: the request's prompt length.
        output: its output length (after context truncation).
        cached: prompt tokens it finds cached (capped at ``prompt - 1``, whole blocks).
        behind_queue: place it behind the waiting queue (False: at its head, with nobody
            waiting ahead: the time its own prefill takes).

    Returns:
        The estimate, or ``None`` when the replay cannot place it (nothing could run, or
        more than :data:`MAX_ESTIMATE_PASSES` passes).
    """
    e = core.block_size
    role = core.role
    prefill_role = role == "prefill"
    t = now_ns if in_flight_end_ns is None else max(now_ns, in_flight_end_ns)
    running: list[_Entry] = []
    for s in core.running:
        if s.state == DONE:
            continue
        entry = _Entry(s.prompt, s.num_output, s.num_computed, s.target - s.num_output)
        if entry.rem == 0 and in_flight_end_ns is not None:
            # caught up in the pass in flight: it samples at its end
            if prefill_role:
                continue
            entry.out += 1
            entry.left -= 1
            if entry.left <= 0:
                continue
            entry.rem = 1
        running.append(entry)
    waiting: deque[_Entry] = deque()
    ahead = 0
    if behind_queue:
        for s in core.waiting:
            hit = _hit_positions(core, s)
            waiting.append(
                _Entry(s.prompt, s.num_output, s.num_computed + hit, s.target - s.num_output)
            )
        ahead = len(waiting)
    cached = max(0, min(cached, (prompt - 1) // e * e))
    if role == "decode":
        cand = _Entry(prompt, 0, prompt - 1, output)
    else:
        cand = _Entry(prompt, 0, cached, output)
    waiting.append(cand)
    budget_max = core.max_tokens
    max_seqs = core.config.max_num_seqs
    chunked = core.config.enable_chunked_prefill
    admitted: int | None = None
    passes = 0
    while passes < MAX_ESTIMATE_PASSES:
        passes += 1
        if (
            waiting
            and len(running) >= max_seqs
            and running
            and all(r.rem == 1 for r in running)
            and admitted is None
        ):
            # a full batch of decode steps: jump to the pass before the first finish
            k = min(r.left for r in running) - 1
            if k > 0:
                t += _decode_run_ns(core, running, k)
                for r in running:
                    r.computed += k
                    r.out += k
                    r.left -= k
        budget = budget_max
        entries: list[tuple[_Entry, int]] = []
        for r in running:
            if budget <= 0:
                break
            n = 1 if r.rem == 1 else min(r.rem, budget)
            entries.append((r, n))
            budget -= n
        while waiting and budget > 0 and len(running) < max_seqs:
            w = waiting[0]
            n = w.rem
            if n > budget:
                if not chunked:
                    break
                n = budget
            waiting.popleft()
            running.append(w)
            entries.append((w, n))
            budget -= n
            if w is cand:
                admitted = t
        if not entries:
            return None
        t += _price(core, t, entries, prefill_role)
        finished = False
        for r, n in entries:
            r.computed += n
            r.rem -= n
            if r.rem == 0:
                if r is cand and admitted is not None:
                    return PlacementEstimate(ahead, admitted, t)
                r.out += 1
                r.left -= 1
                if prefill_role or r.left <= 0:
                    finished = True
                    r.rem = -1
                    continue
                r.rem = 1
        if finished:
            running = [r for r in running if r.rem >= 0]
    return None


def _price(core: EngineCore, t: int, entries: list[tuple[_Entry, int]], prefill_role: bool) -> int:
    """The duration of a pass of ``entries`` from the engine's timing model, in ns."""
    plan = Pass(
        t,
        [],
        [n for _, n in entries],
        [r.computed for r, _ in entries],
        [r.out for r, _ in entries],
    )
    samples = [n == r.rem and (prefill_role or r.left > 0) for r, n in entries]
    return core.duration_ns(plan, [r.prompt for r, _ in entries], samples)


def _decode_run_ns(core: EngineCore, running: list[_Entry], k: int) -> int:
    """The total duration of ``k`` passes of decode steps of every request of ``running``."""
    run = DecodeRun(
        k,
        np.array([r.computed for r in running], dtype=np.int64),
        np.array([r.prompt for r in running], dtype=np.int64),
        np.array([r.out for r in running], dtype=np.int64),
        np.full(len(running), k, dtype=np.int64),
        core.role,
        core.kv_capacity,
    )
    ms = decode_run_times_ms(core.timing, run)
    return int(np.rint(ms * 1_000_000).astype(np.int64).sum())
