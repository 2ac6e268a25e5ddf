"""simclock: a deterministic virtual-time asyncio event loop.

The loop knows nothing about LLMs; ``engines``, ``policies``, ``loadgen`` and ``replay``
build the serving simulator on top of it.
"""

from __future__ import annotations

from ._exceptions import InternalError as InternalError
from ._exceptions import SimulationError as SimulationError
from ._version import __version__ as __version__

__all__ = ("InternalError", "SimulationError", "__version__")
