"""The workload a reader or generator produces (REFERENCE-workloads §1, §2, §7)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import attrs

from ._exceptions import WorkloadConfigError
from ._request import Request

__all__ = ("Play", "SubagentGroup", "Tolerated", "Workload", "check_source")

_SOURCE = re.compile(r"[A-Za-z0-9_.-]+")


def check_source(source: str) -> str:
    """Validate a source label (§1.3) and return it.

    Raises:
        WorkloadConfigError: the label does not match ``[A-Za-z0-9_.-]+``.
    """
    if not _SOURCE.fullmatch(source):
        raise WorkloadConfigError(f"source: {source!r} must match [A-Za-z0-9_.-]+")
    return source


@attrs.frozen
class Tolerated:
    """What a reader accepted without error but did not use, counted (§0, §7).

    Attributes:
        surplus_ids: content ids beyond ``ceil(P / T)`` that were dropped.
        private_tail_ids: private ids appended for a partial last block.
        ignored_timestamps: timestamps present but not used (dependent rows).
        dropped_failures: BurstGPT failed requests dropped.
        filtered_rows: rows left out by a reader's ``models=`` / ``log_types=`` filter.
    """

    surplus_ids: int = 0
    private_tail_ids: int = 0
    ignored_timestamps: int = 0
    dropped_failures: int = 0
    filtered_rows: int = 0


@attrs.frozen
class SubagentGroup:
    """One Weka subagent group (§2.4).

    Attributes:
        play_id: the play holding it.
        agent_id: its ``agent_id``.
        conversation_id: the conversation of its calls (``<play>/<agent_id>``).
        basis: ``"relative"`` or ``"absolute"`` clock of its inner ``t``.
        status: ``"completed"`` or ``"async_launched"``.
        parent_conversation_id: the conversation whose marker spawned it.
    """

    play_id: str
    agent_id: str
    conversation_id: str
    basis: Literal["relative", "absolute"]
    status: Literal["completed", "async_launched"]
    parent_conversation_id: str


@attrs.frozen
class Play:
    """One dependency tree of an agentic workload (§5.1).

    Attributes:
        id: the play id (``<src>:<id>``).
        request_indices: positions in :attr:`Workload.requests` of the play's requests,
            in play order (file order).
        conversations: the play's conversation ids in order of first appearance.
        content_ids: the half-open range ``(start, stop)`` of content ids the play owns;
            a play instance ``#k`` with ``k >= 1`` maps this range onto fresh ids (§5.4).
    """

    id: str
    request_indices: tuple[int, ...]
    conversations: tuple[str, ...]
    content_ids: tuple[int, int] = (0, 0)


@attrs.frozen
class Workload:
    """Requests in file (or generation) order, with where they came from.

    Attributes:
        requests: every request, in file order: a tuple, or a sequence that builds each
            request when it is read (``generate_synthetic(..., lazy=True)``).
        source: the source label ``<src>``.
        format: the reader's format name (``mooncake``, ``weka``, ``synthetic``, ...).
        format_note: how ``format="auto"`` chose the format
            (``format auto: <name> (<reason>)``), or None when the caller named it.
        tolerated: what the reader accepted but did not use.
        plays: agentic plays (agentic and weka formats), in corpus order.
        subagents: Weka subagent groups, in file order.
    """

    requests: Sequence[Request]
    source: str
    format: str
    format_note: str | None = None
    tolerated: Tolerated = Tolerated()
    plays: tuple[Play, ...] = ()
    subagents: tuple[SubagentGroup, ...] = ()

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def conversations(self) -> tuple[str, ...]:
        """Conversation ids in order of first appearance."""
        seen: dict[str, None] = {}
        for request in self.requests:
            cid = request.identity.conversation_id
            if cid is not None:
                seen.setdefault(cid, None)
        return tuple(seen)
