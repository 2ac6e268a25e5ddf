"""Building a component from configuration options, with errors that name the key.

:func:`call_factory` turns a component's own ``ValueError`` or ``TypeError`` into a
:class:`ConfigError` that says where the option was set and which key is wrong;
:func:`check_option_types` refuses a value of the wrong scalar type before the component sees
it (``policy: kv_aware: temperature: must be a number, got 'hot'``).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

import policies

from ._exceptions import ConfigError

__all__ = ("POLICY_OPTION_CLASSES", "call_factory", "check_option_types")

_T = TypeVar("_T")


def call_factory(where: str, factory: Callable[..., _T], *args: Any, **options: Any) -> _T:
    """Call ``factory(*args, **options)``, reporting bad input as a :class:`ConfigError`.

    The message is ``<where>: <key>: <problem>`` when the component's own message names one
    of its fields (``EngineConfig.num_blocks must be ...``, ``temperature must be ...``).
    """
    try:
        return factory(*args, **options)
    except ConfigError:
        raise
    except TypeError as exc:
        # An unknown or missing keyword: say which, without the factory's internals.
        text = str(exc)
        problem = text.split(") ", 1)[1] if ") " in text else text
        raise ConfigError(f"{where}: {_keyed(problem, options)}") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: {_keyed(str(exc), options)}") from None


_CLASS_FIELD = re.compile(r"[A-Z]\w*\.(\w+) (.+)", re.S)
_OPTION_FIRST = re.compile(r"(\w+):? (.+)", re.S)


def _keyed(problem: str, options: Mapping[str, Any]) -> str:
    """``num_blocks: must be ...`` from ``EngineConfig.num_blocks must be ...``, and
    ``temperature: must be ...`` from ``temperature must be ...`` for a given option."""
    match = _CLASS_FIELD.fullmatch(problem)
    if match is not None:
        return f"{match.group(1)}: {match.group(2)}"
    match = _OPTION_FIRST.fullmatch(problem)
    if match is not None and match.group(1) in options:
        return f"{match.group(1)}: {match.group(2)}"
    return problem


POLICY_OPTION_CLASSES: Mapping[str, type] = {
    "round_robin": policies.RoundRobin,
    "random": policies.Random,
    "least_loaded": policies.LeastLoaded,
    "kv_aware": policies.KVAware,
    "session_affinity": policies.SessionAffinity,
}
"""Policy name -> the attrs class whose field types its options must have."""

_SCALAR_KINDS: Mapping[object, tuple[str, Callable[[object], bool]]] = {
    float: ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    bool: ("true or false", lambda v: isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
}


def check_option_types(where: str, cls: type | None, options: Mapping[str, Any]) -> None:
    """Refuse an option whose value is not of its field's scalar type, naming the key.

    Only fields typed ``float``, ``int``, ``bool`` or ``str`` are checked; the component
    validates ranges itself.
    """
    if cls is None or not attrs.has(cls):
        return
    hints = typing.get_type_hints(cls)
    for key, value in options.items():
        kind = _SCALAR_KINDS.get(hints.get(key))
        if kind is not None and not kind[1](value):
            raise ConfigError(f"{where}: {key}: must be {kind[0]}, got {value!r}")
