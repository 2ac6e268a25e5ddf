"""What a replay session shows of the run it stands in: engines, requests, the policy.

Each method reads the live run at the session's stop and returns a value of
:mod:`replay._session_state` (:meth:`~replay.ReplaySession.engine`,
:meth:`~replay.ReplaySession.request`, :meth:`~replay.ReplaySession.policy`, ...).
"""

from __future__ import annotations

import simclock
from engines import Engine, Journal, RequestTrace

from ._session_core import SessionCore
from ._session_state import (
    STATE_OF,
    TERMINAL,
    EngineState,
    PolicyState,
    RequestState,
    format_ns,
)

__all__ = ("SessionSnapshots",)


class SessionSnapshots(SessionCore):
    """The inspection methods of :class:`replay.ReplaySession`."""

    __slots__ = ()

    @property
    def journal(self) -> Journal:
        """The run's live journal (subscribe a :class:`replay.TimelineRecorder` here)."""
        return self._run.journal

    @property
    def engines(self) -> tuple[Engine, ...]:
        """The live engines (read their ``view``; do not call their handshake methods)."""
        return self._run.engines

    def engine(self, index: int) -> EngineState:
        """Return engine ``index`` as it is now.

        Raises:
            IndexError: no such engine.
        """
        if not 0 <= index < len(self._run.engines):
            raise IndexError(f"no engine {index}; the topology has {len(self._run.engines)}")
        engine = self._run.engines[index]
        snap = engine.snapshot()
        view = engine.view
        return EngineState(
            index=index,
            role=engine.role,
            waiting=snap.waiting,
            running=snap.running,
            in_pass=snap.in_pass,
            pass_end_ns=engine.pass_end_ns,
            kv_blocks_used=view.kv_blocks_used,
            kv_blocks_free=view.kv_blocks_free,
            kv_blocks_total=view.kv_blocks_total,
            cached_blocks=sum(1 for key in snap.block_keys if key != 0),
            held=snap.held,
            reserving=snap.reserving,
            passes=engine.passes,
            prefill_outstanding=snap.prefill_outstanding,
            decode_outstanding=snap.decode_outstanding,
            current_pass=engine.view.pass_in_flight,
        )

    def _trace(self, request_id: str) -> RequestTrace | None:
        journal = self._run.journal
        journal.sync()
        return journal.traces.get(request_id)

    def request(self, request_id: str) -> RequestState:
        """Return request ``request_id`` as it is now.

        ``request_id`` names a request of the workload or, with lanes, a request of a play
        instance started so far (``P#k/...``, a warm-up request).

        Raises:
            ValueError: the request is not in the run.
        """
        self._run_request(request_id)
        self._need_history("request states")
        last = self._last_kind.get(request_id)
        state = "pending" if last is None else STATE_OF[last[0]]
        history = tuple(self._history.get(request_id, ()))
        engine = next((e.engine for e in reversed(history) if e.engine is not None), None)
        return RequestState(request_id, state, engine, history, self._trace(request_id))

    def in_flight(self) -> tuple[RequestState, ...]:
        """Every released request that has not ended, in release order."""
        self._need_history("request states")
        return tuple(
            self.request(rid) for rid, (kind, _) in self._last_kind.items() if kind not in TERMINAL
        )

    def prefix_hits(self, request_id: str) -> tuple[int, ...]:
        """Prompt tokens of ``request_id`` each engine holds cached now, by engine index.

        Raises:
            ValueError: the request is not in the run.
        """
        request = self._run_request(request_id)
        context = self._run.runtime.context
        return tuple(context.prefix_overlap_tokens(request, e.index) for e in self._run.engines)

    def policy(self) -> PolicyState:
        """Return the policy's pending work and next wakeup as they are now."""
        runtime = self._run.runtime
        wakeups = [
            t.when_ns
            for t in self._run.loop.snapshot().pending_timers
            if t.kind is simclock.WakeupKind.POLICY_WAKEUP and t.when_ns is not None
        ]
        return PolicyState(
            name=runtime.name,
            held=tuple(runtime.held_request_ids()),
            queued=len(runtime.stream),
            unsettled=runtime.unsettled,
            next_wakeup_ns=min(wakeups) if wakeups else None,
        )

    def describe(self) -> str:
        """Return the whole state as text: time, engines, policy, requests in flight."""
        flying = self.in_flight() if self._history_on else ()
        lines = [f"virtual time {format_ns(self.now_ns)}"]
        lines.extend(self.engine(e.index).describe() for e in self._run.engines)
        lines.append(self.policy().describe())
        by_state: dict[str, int] = {}
        for r in flying:
            by_state[r.state] = by_state.get(r.state, 0) + 1
        counts = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items())) or "none"
        if self._history_on:
            lines.append(f"in flight: {len(flying)} ({counts})")
        return "\n".join(lines)
