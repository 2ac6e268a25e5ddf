"""Every public package declares a tuple ``__all__`` that matches what it defines."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = ("simclock", "engines", "policies", "loadgen", "replay")


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_a_tuple_of_defined_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert isinstance(exported, tuple)
    assert len(set(exported)) == len(exported)
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == []


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    undocumented = [
        n
        for n in module.__all__
        if not n.startswith("__")
        and (inspect.isclass(getattr(module, n)) or inspect.isfunction(getattr(module, n)))
        and not (getattr(module, n).__doc__ or "").strip()
    ]
    assert undocumented == []


@pytest.mark.parametrize("name", PACKAGES)
def test_public_names_not_in_all_are_private_or_modules(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and type(v).__name__ != "module" and n != "annotations"
    }
    assert public <= set(module.__all__)
