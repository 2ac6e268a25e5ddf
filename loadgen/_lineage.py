"""Conversation lineage (REFERENCE-workloads §6), derived iteratively in linear time."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._exceptions import WorkloadConfigError
from ._request import Lineage

__all__ = (
    "LineageResult",
    "derive_lineage",
    "lineage_from_json",
    "lineage_to_json",
)

_SCHEMA = "conversation-lineage"
_VERSION = 1


@attrs.frozen
class LineageResult:
    """The lineage of every conversation of a play, and the work it took.

    Attributes:
        lineages: conversation id -> its lineage, or None when it has none (an ambiguous
            parent, a cycle, or an ancestor without lineage).
        parent_link_steps: how many parent links the derivation followed (at most one
            per conversation: the derivation is linear).
    """

    lineages: Mapping[str, Lineage | None]
    parent_link_steps: int


_UNSEEN, _VISITING, _DONE = 0, 1, 2


def derive_lineage(candidates: Mapping[str, Sequence[str]]) -> LineageResult:
    """Derive lineage from each conversation's candidate parents (§6.1, §6.2, §6.4).

    No candidate makes a conversation a root; exactly one is its parent; two or more,
    itself, or a cycle leave it and every conversation below it without lineage.
    Each conversation is resolved once: parent links are walked with an explicit stack
    (no recursion) until a resolved, root or invalid conversation, and the outcome is
    assigned to the whole stack, so each link is followed at most once.

    Args:
        candidates: conversation id -> distinct candidate parents (conversation ids of
            the same play). A candidate that is not a key leaves its conversation, and
            every conversation below it, without lineage.

    Returns:
        The lineages and the number of parent links followed.
    """
    state: dict[str, int] = dict.fromkeys(candidates, _UNSEEN)
    result: dict[str, Lineage | None] = {}
    steps = 0
    for start in candidates:
        if state[start] == _DONE:
            continue
        stack: list[str] = []
        current = start
        outcome: Lineage | None
        while True:
            mark = state.get(current, _DONE)
            if mark == _DONE:
                outcome = result.get(current)
                break
            if mark == _VISITING:  # a cycle
                outcome = None
                break
            state[current] = _VISITING
            stack.append(current)
            parents = candidates[current]
            if not parents:
                outcome = Lineage(root_conversation_id=current)
                result[current] = outcome
                state[current] = _DONE
                stack.pop()
                break
            if len(parents) > 1 or parents[0] == current:
                outcome = None
                result[current] = None
                state[current] = _DONE
                stack.pop()
                break
            current = parents[0]
            steps += 1
        while stack:
            child = stack.pop()
            if outcome is None:
                result[child] = None
            else:
                parent = candidates[child][0]
                result[child] = Lineage(
                    root_conversation_id=outcome.root_conversation_id,
                    parent_conversation_id=parent,
                )
                outcome = result[child]
            state[child] = _DONE
    return LineageResult(lineages=result, parent_link_steps=steps)


def lineage_to_json(lineage: Lineage | None) -> dict[str, Any] | None:
    """Return the JSON object of a lineage (§6.5), or None when absent (omit the key).

    The parent key is omitted for roots, so records written before lineage existed
    round-trip byte for byte.
    """
    if lineage is None:
        return None
    out: dict[str, Any] = {
        "schema": lineage.schema,
        "version": lineage.version,
        "root_conversation_id": lineage.root_conversation_id,
    }
    if lineage.parent_conversation_id is not None:
        out["parent_conversation_id"] = lineage.parent_conversation_id
    return out


def lineage_from_json(value: object) -> Lineage | None:
    """Parse the ``lineage`` value of a record (None when the key was absent).

    Raises:
        WorkloadConfigError: ``lineage: unsupported schema '<s>' version <v>`` or a
            malformed object.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WorkloadConfigError(f"lineage: must be an object, got {json.dumps(value)}")
    schema, version = value.get("schema"), value.get("version")
    if schema != _SCHEMA or type(version) is not int or version != _VERSION:
        raise WorkloadConfigError(f"lineage: unsupported schema '{schema}' version {version}")
    root = value.get("root_conversation_id")
    parent = value.get("parent_conversation_id")
    if not isinstance(root, str) or not (parent is None or isinstance(parent, str)):
        raise WorkloadConfigError("lineage: conversation ids must be strings")
    return Lineage(root_conversation_id=root, parent_conversation_id=parent)


def map_lineage(lineage: Lineage | None, play_id: str, instance_id: str) -> Lineage | None:
    """Map a lineage's conversation ids into a play instance's namespace (§6.6)."""
    if lineage is None:
        return None
    return Lineage(
        root_conversation_id=rename(lineage.root_conversation_id, play_id, instance_id),
        parent_conversation_id=None
        if lineage.parent_conversation_id is None
        else rename(lineage.parent_conversation_id, play_id, instance_id),
    )


def rename(ident: str, play_id: str, instance_id: str) -> str:
    """Replace the leading play id of a play-scoped id with the instance id (§5.4)."""
    if ident == play_id or ident.startswith(play_id + "/"):
        return instance_id + ident[len(play_id) :]
    return ident
