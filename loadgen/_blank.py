"""Frozen values built at the cost of plain attribute stores (``bench/read.py`` measures it).

A frozen attrs class refuses attribute stores, so a reader that builds thousands of its
instances field by field goes through the slot descriptors: on CPython 3.11 about 530
instructions a field (a call through the descriptor's ``__set__``), against about 30 for a
store the interpreter specialises. A *blank* of a frozen slotted class is a subclass that
adds no slot and stores attributes plainly. An instance is made by calling the blank (no
field set), filled with plain stores (``value.id = ...``, written out so that the
interpreter specialises them) and then given the frozen class (``value.__class__ = cls``),
which CPython allows because the blank's layout is its class's. The result is an instance
of the frozen class itself, equal to what the constructor makes from the same values:
nothing of the blank is left on it.

Builders use this only where every value is what the constructor would store (no converter
or validator would change or refuse it); their tests compare them with the constructor.
:func:`blank` returns None on an interpreter that refuses the class assignment, and the
builders then call the constructor.
"""

from __future__ import annotations

from typing import Any

__all__ = ("blank",)


def blank(cls: type) -> type | None:
    """A subclass of the frozen slotted class ``cls`` that stores attributes plainly and
    whose instances can be given ``cls`` as their class; None where the interpreter refuses.

    Args:
        cls: a slotted class whose ``__setattr__`` and ``__delattr__`` refuse (attrs frozen).
    """
    namespace = {
        "__slots__": (),
        # Both: with only one overridden, the type's shared setattr slot stays generic-Python.
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
        # Calling the blank makes an empty instance: cheaper than object.__new__(blank),
        # which copies its arguments into a second tuple.
        "__init__": object.__init__,
        "__module__": __name__,
        "__doc__": f"A {cls.__name__} being built (see loadgen._blank).",
    }
    sub = type(f"Blank{cls.__name__}", (cls,), namespace)
    probe: Any = sub()
    try:
        probe.__class__ = cls
    except TypeError:  # pragma: no cover - CPython allows it
        return None
    return sub
