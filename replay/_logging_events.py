"""A replay's story at debug level: one log event per lifecycle transition that matters.

With ``--log-level debug`` (or any logging set-up that enables debug for these loggers), a
run logs, at the virtual instant each happens:

- ``loadgen.release``: ``request released`` (the workload driver released a request to
  the frontend);
- ``policies.dispatch``: ``offer`` (with the engine's ``outcome``: ``tentative`` or the
  reason it refused), ``commit``, ``abort`` and ``reject`` (the handshake between the policy
  and the engines);
- ``engines.lifecycle``: ``queued``, ``admission`` (``reused_tokens``,
  ``is_readmission``), ``preemption``, ``first token``, ``finished``, ``prefill done``,
  ``reserved``, ``transfer done``, ``cancelled`` and ``failed``.

Every event carries ``request_id``, ``engine`` (when one is involved), the lifecycle event's
details, the run's bound context (``run_id``) and ``virtual_time_ns``.

The events are told by a subscriber of the run's journal, made only when one of these
loggers is enabled for debug when the run is built: with debug off nothing is subscribed, so
the engines, the policy runtime and the driver do nothing more per event. The subscriber
leaves out per-token events and prefill chunks, so engines keep macro-stepping.
"""

from __future__ import annotations

import logging
from typing import Any

from engines import EventKind, Journal, LifecycleEvent
from simclock import get_logger

__all__ = ("STORY", "subscribe_story")

_RELEASE = "loadgen.release"
_DISPATCH = "policies.dispatch"
_LIFECYCLE = "engines.lifecycle"

STORY: dict[EventKind, tuple[str, str]] = {
    EventKind.ARRIVED: (_RELEASE, "request released"),
    EventKind.OFFERED: (_DISPATCH, "offer"),
    EventKind.COMMITTED: (_DISPATCH, "commit"),
    EventKind.ABORTED: (_DISPATCH, "abort"),
    EventKind.REJECTED: (_DISPATCH, "reject"),
    EventKind.QUEUED: (_LIFECYCLE, "queued"),
    EventKind.ADMITTED: (_LIFECYCLE, "admission"),
    EventKind.PREEMPTED: (_LIFECYCLE, "preemption"),
    EventKind.FIRST_TOKEN: (_LIFECYCLE, "first token"),
    EventKind.FINISHED: (_LIFECYCLE, "finished"),
    EventKind.PREFILL_DONE: (_LIFECYCLE, "prefill done"),
    EventKind.RESERVED: (_LIFECYCLE, "reserved"),
    EventKind.TRANSFER_DONE: (_LIFECYCLE, "transfer done"),
    EventKind.CANCELLED: (_LIFECYCLE, "cancelled"),
    EventKind.FAILED: (_LIFECYCLE, "failed"),
}
"""Which logger tells which lifecycle event, and the log event's name."""


def subscribe_story(journal: Journal) -> bool:
    """Subscribe a debug-log teller to ``journal`` if a story logger is enabled for debug.

    Decided once, here: with debug off nothing is subscribed.

    Returns:
        Whether a subscriber was added.
    """
    enabled = {
        name
        for name in {name for name, _ in STORY.values()}
        if logging.getLogger(name).isEnabledFor(logging.DEBUG)
    }
    if not enabled:
        return False
    loggers = {name: get_logger(name) for name in enabled}
    told = {kind: (loggers[name], what) for kind, (name, what) in STORY.items() if name in enabled}

    def tell(event: LifecycleEvent) -> None:
        logger, what = told[event.kind]
        fields: dict[str, Any] = {"request_id": event.request_id}
        if event.engine is not None:
            fields["engine"] = event.engine
        for key, value in event.detail:
            fields.setdefault(key, value)
        logger.debug(what, **fields)

    journal.subscribe(tell, kinds=tuple(told))
    return True
