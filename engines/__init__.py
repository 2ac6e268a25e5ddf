"""engines: simulated inference engines — scheduler, KV cache with prefix caching, timing."""

from __future__ import annotations

from ._pass import PassShape as PassShape
from ._pass import Role as Role
from ._pass import TimingModel as TimingModel

__all__ = ("PassShape", "Role", "TimingModel")
