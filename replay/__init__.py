"""replay: topologies, the runner, the report and the command line."""

from __future__ import annotations

__all__: tuple[str, ...] = ()
