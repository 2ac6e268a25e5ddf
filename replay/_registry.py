"""The command line's name registries and component specs: the only place a name given on
the command line or in a config file becomes code.

:data:`POLICIES` maps policy names to factories taking keyword options, :data:`TIMINGS`
timing-model names to factories taking ``(options, gpu, model)``, :data:`SCHEDULERS` scheduler
names to their classes (the engines' own table, :data:`engines.SCHEDULERS`). A component is
named ``NAME[:key=value,...]`` on the command line or as a table in a file
(:class:`ComponentSpec`, :func:`parse_spec`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

import policies
from engines import (
    SCHEDULERS,
    FixedTiming,
    LinearTiming,
    PolynomialTiming,
    RooflineTiming,
    TableTiming,
    TimingModel,
    gpu_spec,
    model_arch,
)

from ._exceptions import ConfigError

__all__ = (
    "POLICIES",
    "SCHEDULERS",
    "TIMINGS",
    "ComponentSpec",
    "is_own_class",
    "load_class",
    "parse_spec",
    "spec_from_value",
)


def is_own_class(name: str) -> bool:
    """Whether ``name`` names a class of one's own (``module:ClassName``), not a built-in."""
    return ":" in name


def load_class(reference: str, *, where: str) -> Callable[..., Any]:
    """The class (or factory) ``reference`` names: ``path/to/file.py:ClassName`` (a file,
    relative to the working directory) or ``package.module:ClassName`` (imported as Python
    imports it, the working directory first on the path, as ``python -m`` has it).

    A file is loaded once per process, as its own module.

    Raises:
        ConfigError: the file or module cannot be loaded (one line naming the error), or has
            no such name, or the name is not callable.
    """
    source, _, attribute = reference.rpartition(":")
    if source.endswith(".py") or "/" in source or os.sep in source:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"{where}: {reference}: no such file: {source}")
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
        module_name = f"_simclock_own_{digest}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"{where}: {reference}: cannot load {source}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[module_name]
                raise ConfigError(
                    f"{where}: {reference}: loading {source} raised {type(exc).__name__}: {exc}"
                ) from None
    else:
        cwd = os.getcwd()
        if cwd not in sys.path and "" not in sys.path:
            sys.path.insert(0, cwd)
        try:
            module = importlib.import_module(source)
        except ImportError as exc:
            raise ConfigError(f"{where}: {reference}: cannot import {source}: {exc}") from None
        except Exception as exc:
            raise ConfigError(
                f"{where}: {reference}: importing {source} raised {type(exc).__name__}: {exc}"
            ) from None
    found = getattr(module, attribute, None)
    if found is None:
        raise ConfigError(f"{where}: {reference}: {source} has no {attribute!r}")
    if not callable(found):
        raise ConfigError(f"{where}: {reference}: {attribute} is not a class")
    factory: Callable[..., Any] = found
    return factory


def _session_affinity(**options: Any) -> policies.SessionAffinity:
    fallback = options.pop("fallback", None)
    if fallback is None:
        return policies.SessionAffinity(**options)
    if not isinstance(fallback, str) or fallback not in _CHOICE_FALLBACKS:
        known = ", ".join(_CHOICE_FALLBACKS)
        raise ValueError(f"fallback: unknown policy {fallback!r}; known: {known}")
    return policies.SessionAffinity(fallback=_CHOICE_FALLBACKS[fallback](), **options)


_CHOICE_FALLBACKS: Mapping[str, Callable[[], policies.ChoicePolicy]] = {
    "round_robin": policies.RoundRobin,
    "random": policies.Random,
    "least_loaded": policies.LeastLoaded,
    "kv_aware": policies.KVAware,
}

POLICIES: Mapping[str, Callable[..., policies.Policy]] = {
    "round_robin": policies.RoundRobin,
    "random": policies.Random,
    "least_loaded": policies.LeastLoaded,
    "kv_aware": policies.KVAware,
    "session_affinity": _session_affinity,
}
"""Policy name -> factory taking the policy's keyword options."""


def _fixed(options: Mapping[str, Any], gpu: str, model: str) -> TimingModel:
    return FixedTiming(**{"prefill_ms": 50.0, "decode_ms": 10.0, **options})


def _polynomial(options: Mapping[str, Any], gpu: str, model: str) -> TimingModel:
    return PolynomialTiming(**options)


def _linear(options: Mapping[str, Any], gpu: str, model: str) -> TimingModel:
    return LinearTiming(**options)


def _roofline(options: Mapping[str, Any], gpu: str, model: str) -> TimingModel:
    return RooflineTiming(gpu=gpu_spec(gpu), model=model_arch(model), **options)


def _table(options: Mapping[str, Any], gpu: str, model: str) -> TimingModel:
    options = dict(options)
    file = options.pop("file", None)
    if file is not None:
        if options:
            raise ConfigError("timing: table: give either file= or the table's fields, not both")
        data = _read_json_table(Path(str(file)))
        return TableTiming(**data)
    return TableTiming(**options)


TIMINGS: Mapping[str, Callable[[Mapping[str, Any], str, str], TimingModel]] = {
    "fixed": _fixed,
    "polynomial": _polynomial,
    "linear": _linear,
    "roofline": _roofline,
    "table": _table,
}
"""Timing name -> factory ``(options, gpu, model) -> TimingModel``."""


def _read_json_table(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: -: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: -: a timing table must be a JSON object")
    return data


# --------------------------------------------------------------------------------------------
# Specs: "name:key=value,key=value" on the command line, a table in a file.


@attrs.frozen
class ComponentSpec:
    """A named component with keyword options, e.g. ``kv_aware:temperature=0.5``.

    Attributes:
        name: the component name (a key of :data:`POLICIES` or :data:`TIMINGS`).
        options: keyword options for its factory, in the order given.
    """

    name: str
    options: Mapping[str, Any] = attrs.field(factory=dict)

    def as_json(self) -> dict[str, Any]:
        """``{"name": ..., **options}`` (the form a config file accepts back)."""
        return {"name": self.name, **self.options}


def _scalar(text: str) -> Any:
    """A command-line option value: bool, int, float, else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text.strip()


def parse_spec(text: str, *, what: str) -> ComponentSpec:
    """Parse ``NAME[:key=value,...]`` into a :class:`ComponentSpec`.

    ``NAME`` is a built-in name or a class of one's own, ``path/to/file.py:ClassName`` or
    ``package.module:ClassName`` (:func:`load_class`): the segment after the first ``:`` is
    the class name when it is an identifier and the name before it is a path or a dotted
    module name, or the segment is capitalised (``module:ClassName``).

    Raises:
        ConfigError: an empty name, an option that is not ``key=value``, a repeated key.
    """
    name, _, rest = text.partition(":")
    head, sep, tail = rest.partition(":")
    cls = head.strip()
    path_like = any(c in name for c in "./") or name.strip().endswith(".py")
    if cls.isidentifier() and (path_like or cls[0].isupper()):  # NAME:ClassName[:k=v,...]
        name = f"{name.strip()}:{cls}"
        rest = tail
    name = name.strip()
    if not name:
        raise ConfigError(f"{what}: empty name in {text!r}")
    options: dict[str, Any] = {}
    for raw in rest.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{what}: {item!r} is not key=value")
        if key in options:
            raise ConfigError(f"{what}: option {key!r} is given twice")
        options[key] = _scalar(value)
    return ComponentSpec(name, options)


def spec_from_value(value: object, *, where: str, name_key: str) -> ComponentSpec:
    if isinstance(value, str):
        return parse_spec(value, what=where)
    if isinstance(value, Mapping):
        options = dict(value)
        name = options.pop(name_key, None)
        if name is None and name_key == "type":
            name = options.pop("name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: the table needs a {name_key!r} string")
        return ComponentSpec(name, options)
    raise ConfigError(f"{where}: must be a string or a table, got {value!r}")
