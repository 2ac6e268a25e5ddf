"""policies: placement policies as async coroutines, and the context they run in."""

from __future__ import annotations

__all__: tuple[str, ...] = ()
