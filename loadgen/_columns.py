"""Build many frozen request values from validated columns at once (``bench/read.py``).

A column-wise reader makes an :class:`ArrivalRule`, a :class:`Dep` and an
:class:`Identity` for most rows; their generated ``__init__`` sets each field through
``object.__setattr__``, which costs more than everything else the reader does per row.
These builders fill the slots directly, as :func:`requests_from_columns` does for
requests. Every value passed must already be what the constructor would store (no
converters or validators run; none of these classes has any); a test compares each
builder with the constructor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, chain, repeat
from typing import Any, TypeVar

import attrs

from ._request import ArrivalRule, Dep, Identity, Lineage

__all__ = ("after_completion", "after_completions", "identities", "roots")

_new = object.__new__
_T = TypeVar("_T")


def _setters(cls: type, *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The slot setters of ``names``, which must be all of ``cls``'s fields."""
    if tuple(field.name for field in attrs.fields(cls)) != names:  # pragma: no cover
        raise ImportError(f"the fields of {cls.__name__} changed; update loadgen._columns")
    return tuple(cls.__dict__[name].__set__ for name in names)


_RULE = _setters(ArrivalRule, "not_before_ms", "after")
_DEP = _setters(Dep, "request_id", "on", "delay_ms")
_IDENTITY = _setters(
    Identity, "conversation_id", "turn_index", "play_id", "lane", "phase", "lineage"
)


def _instances(cls: type[_T], count: int) -> list[_T]:
    """``count`` instances of ``cls`` with no slot set yet."""
    return list(map(_new, repeat(cls, count)))


def _fill(objects: list[Any], setter: Callable[[Any, Any], None], values: Iterable[Any]) -> None:
    """Set one slot of every object, in C (``map``), with no Python loop."""
    deque(map(setter, objects, values), maxlen=0)


def after_completion(request_ids: Sequence[str], delays_ms: Sequence[float]) -> list[ArrivalRule]:
    """``ArrivalRule(not_before_ms=None, after=(Dep(rid, "completion", delay),))`` for each pair."""
    if len(request_ids) != len(delays_ms):
        raise ValueError("after_completion: columns of different lengths")
    set_rid, set_on, set_delay = _DEP
    deps = _instances(Dep, len(request_ids))
    _fill(deps, set_rid, request_ids)
    _fill(deps, set_on, repeat("completion"))
    _fill(deps, set_delay, delays_ms)
    return _rules(repeat(None), zip(deps), len(deps))


def after_completions(
    request_ids: Sequence[Sequence[str]], delays_ms: Sequence[float]
) -> list[ArrivalRule]:
    """``ArrivalRule(not_before_ms=None, after=(Dep(rid, "completion", delay), ...))`` for
    each row's request ids and delay."""
    if len(request_ids) != len(delays_ms):
        raise ValueError("after_completions: columns of different lengths")
    sizes = list(map(len, request_ids))
    flat = list(chain.from_iterable(request_ids))
    set_rid, set_on, set_delay = _DEP
    deps = _instances(Dep, len(flat))
    _fill(deps, set_rid, flat)
    _fill(deps, set_on, repeat("completion"))
    _fill(deps, set_delay, chain.from_iterable(map(repeat, delays_ms, sizes)))
    ends = list(accumulate(sizes))
    groups = [tuple(deps[end - size : end]) for end, size in zip(ends, sizes, strict=True)]
    return _rules(repeat(None), groups, len(groups))


def roots(not_before_ms: Sequence[float | None]) -> list[ArrivalRule]:
    """``ArrivalRule(not_before_ms=t, after=())`` for each ``t``."""
    return _rules(not_before_ms, repeat(()), len(not_before_ms))


def _rules(
    not_before_ms: Iterable[float | None], after: Iterable[tuple[Dep, ...]], count: int
) -> list[ArrivalRule]:
    set_nb, set_after = _RULE
    rules = _instances(ArrivalRule, count)
    _fill(rules, set_nb, not_before_ms)
    _fill(rules, set_after, after)
    return rules


def identities(
    conversation_ids: Sequence[str | None],
    turn_indices: Sequence[int | None],
    play_ids: Sequence[str | None] | None = None,
    lineages: Sequence[Lineage | None] | None = None,
) -> list[Identity]:
    """``Identity(conversation_id=c, turn_index=k, play_id=p, lineage=l)`` for each row.

    ``play_ids`` and ``lineages`` default to None for every row.
    """
    count = len(conversation_ids)
    if len(turn_indices) != count or any(
        column is not None and len(column) != count for column in (play_ids, lineages)
    ):
        raise ValueError("identities: columns of different lengths")
    set_conv, set_turn, set_play, set_lane, set_phase, set_lineage = _IDENTITY
    made = _instances(Identity, count)
    _fill(made, set_conv, conversation_ids)
    _fill(made, set_turn, turn_indices)
    _fill(made, set_play, repeat(None) if play_ids is None else play_ids)
    _fill(made, set_lane, repeat(None))
    _fill(made, set_phase, repeat("measure"))
    _fill(made, set_lineage, repeat(None) if lineages is None else lineages)
    return made
