"""Sequences whose items are built each time they are read, from columns held compactly."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

__all__ = ("BuiltOnRead",)

_T = TypeVar("_T")


class BuiltOnRead(Sequence[_T]):
    """A sequence whose item at a position is built by :meth:`_at` each time it is read.

    Subclasses give ``__len__`` and ``_at``; this gives indexing (negative positions and
    slices, which build a tuple), iteration, and equality with any sequence of the same items
    (a tuple, a list; not a string), with the hash of the tuple of its items.
    """

    __slots__ = ()

    #: what an item is called in the error for a position out of range
    _item_name = "item"

    @abstractmethod
    def _at(self, position: int) -> _T:
        """Build the item at ``position`` (``0 <= position < len(self)``)."""

    @overload
    def __getitem__(self, index: int) -> _T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[_T, ...]: ...

    def __getitem__(self, index: int | slice) -> _T | tuple[_T, ...]:
        n = len(self)
        if isinstance(index, slice):
            return tuple(map(self._at, range(*index.indices(n))))
        i = index.__index__()
        position = i + n if i < 0 else i
        if not 0 <= position < n:
            raise IndexError(f"{self._item_name} index out of range")
        return self._at(position)

    def __iter__(self) -> Iterator[_T]:
        return map(self._at, range(len(self)))

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))
