"""Build many frozen request values from validated columns at once (``bench/read.py``).

A column-wise reader makes an :class:`ArrivalRule`, a :class:`Dep` and an
:class:`Identity` for most rows; their generated ``__init__`` sets each field through
``object.__setattr__``, which costs more than everything else the reader does per row.
These builders make each value as a blank filled with plain stores
(:mod:`loadgen._blank`), as :func:`requests_from_columns` does for requests (root rules,
with two fields, are cheaper set through their slot descriptors in C loops). Every value
passed must already be what the constructor would store (no converters or validators run;
none of these classes has any); a test compares each builder with the constructor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import repeat
from typing import Any, TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from ._blank import blank
from ._request import _BLANK as _BLANK_REQUEST
from ._request import ArrivalRule, Dep, HashIds, Identity, Lineage, Request

__all__ = (
    "after_completions",
    "gather",
    "linked_requests",
    "placed",
    "roots",
)

_T = TypeVar("_T")

_BLANK_RULE = blank(ArrivalRule)
_BLANK_DEP = blank(Dep)
_BLANK_IDENTITY = blank(Identity)
#: The slot setters of ArrivalRule's two fields (unpacking fails at import if they change).
_SET_WHEN, _SET_AFTER = (
    ArrivalRule.__dict__[field.name].__set__ for field in attrs.fields(ArrivalRule)
)


def after_completions(
    request_ids: Sequence[Sequence[str]], delays_ms: Sequence[float]
) -> list[ArrivalRule]:
    """``ArrivalRule(not_before_ms=None, after=(Dep(rid, "completion", delay), ...))`` for
    each row's request ids and delay."""
    if len(request_ids) != len(delays_ms):
        raise ValueError("after_completions: columns of different lengths")
    if _BLANK_RULE is None or _BLANK_DEP is None:  # pragma: no cover - CPython allows them
        return [
            ArrivalRule(None, tuple(Dep(r, "completion", d) for r in rids))
            for rids, d in zip(request_ids, delays_ms, strict=True)
        ]
    made_rule, made_dep, rule_cls, dep_cls = (
        _BLANK_RULE,
        _BLANK_DEP,
        ArrivalRule,
        Dep,
    )
    out: list[ArrivalRule] = []
    append = out.append
    for rids, delay in zip(request_ids, delays_ms, strict=True):
        deps: list[Dep] = []
        for rid in rids:
            dep: Any = made_dep()
            dep.request_id = rid
            dep.on = "completion"
            dep.delay_ms = delay
            dep.__class__ = dep_cls
            deps.append(dep)
        rule: Any = made_rule()
        rule.not_before_ms = None
        rule.after = tuple(deps)
        rule.__class__ = rule_cls
        append(rule)
    return out


def roots(not_before_ms: Sequence[float | None]) -> list[ArrivalRule]:
    """``ArrivalRule(not_before_ms=t, after=())`` for each ``t``.

    With two fields, setting each through its slot descriptor in a C loop (``map``) is
    cheaper than a Python loop of blanks (28 M against 33 M instructions for 12,031 rules).
    """
    rules = list(map(object.__new__, repeat(ArrivalRule, len(not_before_ms))))
    deque(map(_SET_WHEN, rules, not_before_ms), maxlen=0)
    deque(map(_SET_AFTER, rules, repeat(())), maxlen=0)
    return rules


_NO_IDENTITY = Identity()


def linked_requests(
    ids: Sequence[str],
    input_lengths: Sequence[int],
    output_lengths: Sequence[int],
    block_size: int,
    hash_ids: Sequence[HashIds],
    rules: Sequence[ArrivalRule | None],
    waited: Sequence[str | None],
    delays_ms: Sequence[float],
    conversation_ids: Sequence[str | None],
    turn_indices: Sequence[int | None],
    play_ids: Sequence[str | None] | None = None,
    lineages: Sequence[Lineage | None] | None = None,
) -> tuple[Request, ...]:
    """Requests of rows that wait for one another, with their rules and identities, in
    one pass (no column of rules or identities is made in between).

    Row ``i``'s arrival is ``rules[i]``, or where that is None
    ``ArrivalRule(None, (Dep(waited[i], "completion", delays_ms[i]),))``; its identity is
    ``Identity(conversation_ids[i], turn_indices[i], play_ids[i], lineage=lineages[i])``,
    or the default ``Identity()`` (one shared value) where the conversation is None.
    ``play_ids`` and ``lineages`` default to None for every row. As for
    :func:`~loadgen._request.requests_from_columns`, every ``hash_ids`` must already be
    what :func:`~loadgen._request.as_hash_ids` returns unchanged.
    """
    count = len(ids)
    given = (input_lengths, output_lengths, hash_ids, rules, waited, delays_ms)
    if any(len(column) != count for column in (*given, conversation_ids, turn_indices)) or any(
        column is not None and len(column) != count for column in (play_ids, lineages)
    ):
        raise ValueError("linked_requests: columns of different lengths")
    columns = zip(
        ids,
        input_lengths,
        output_lengths,
        hash_ids,
        rules,
        waited,
        delays_ms,
        conversation_ids,
        turn_indices,
        repeat(None) if play_ids is None else play_ids,
        repeat(None) if lineages is None else lineages,
        strict=False,  # the lengths are checked above; the absent columns repeat
    )
    if (
        _BLANK_REQUEST is None
        or _BLANK_RULE is None
        or _BLANK_DEP is None
        or _BLANK_IDENTITY is None
    ):  # pragma: no cover - CPython allows them
        return tuple(
            Request(
                rid,
                prompt,
                output,
                block_size,
                content,
                ArrivalRule(None, (Dep(after, "completion", delay),)) if rule is None else rule,
                _NO_IDENTITY if talk is None else Identity(talk, turn, play, None, "measure", line),
            )
            for rid, prompt, output, content, rule, after, delay, talk, turn, play, line in columns
        )
    made, made_rule, made_dep, made_identity = (
        _BLANK_REQUEST,
        _BLANK_RULE,
        _BLANK_DEP,
        _BLANK_IDENTITY,
    )
    cls, rule_cls, dep_cls, identity_cls = Request, ArrivalRule, Dep, Identity
    alone = _NO_IDENTITY
    out: list[Request] = []
    append = out.append
    for rid, prompt, output, content, rule, after, delay, talk, turn, play, line in columns:
        if rule is None:
            dep: Any = made_dep()
            dep.request_id = after
            dep.on = "completion"
            dep.delay_ms = delay
            dep.__class__ = dep_cls
            rule = made_rule()
            rule.not_before_ms = None
            rule.after = (dep,)
            rule.__class__ = rule_cls
        if talk is None:
            identity: Any = alone
        else:
            identity = made_identity()
            identity.conversation_id = talk
            identity.turn_index = turn
            identity.play_id = play
            identity.lane = None
            identity.phase = "measure"
            identity.lineage = line
            identity.__class__ = identity_cls
        request: Any = made()
        request.id = rid
        request.input_length = prompt
        request.output_length = output
        request.block_size = block_size
        request.hash_ids = content
        request.arrival = rule
        request.identity = identity
        request.model = None
        request.recorded_service_ms = None
        request.slo = None
        request.__class__ = cls
        append(request)
    return tuple(out)


def gather(values: Sequence[_T], index: npt.NDArray[np.int64]) -> list[_T]:
    """``[values[i] for i in index]``, in a C loop."""
    return list(map(values.__getitem__, index.tolist()))


def placed(count: int, *parts: tuple[npt.NDArray[np.int64], Sequence[_T]]) -> list[_T]:
    """A list of ``count`` cells: each part's values at its rows, in a C loop.

    Args:
        count: the number of rows.
        parts: ``(rows, values)`` pairs of equal lengths; together they give every row
            exactly once.

    Raises:
        ValueError: the parts do not give every row exactly once.
    """
    pool: list[_T] = []
    where = np.full(count, -1, dtype=np.int64)
    for rows, values in parts:
        if len(rows) != len(values):
            raise ValueError("placed: rows and values of different lengths")
        where[rows] = np.arange(len(pool), len(pool) + len(values), dtype=np.int64)
        pool.extend(values)
    if len(pool) != count or (count and int(where.min()) < 0):
        raise ValueError("placed: the parts do not give every row exactly once")
    return gather(pool, where)
