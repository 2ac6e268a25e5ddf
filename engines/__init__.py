"""engines: simulated inference engines — scheduler, KV cache with prefix caching, timing."""

from __future__ import annotations

from ._config import DEFAULT_CONTEXT_LENGTH as DEFAULT_CONTEXT_LENGTH
from ._config import EngineConfig as EngineConfig
from ._engine import Engine as Engine
from ._engine import EngineSnapshot as EngineSnapshot
from ._engine import EngineView as EngineView
from ._engine import KVEvent as KVEvent
from ._engine import Rejection as Rejection
from ._engine import Reservation as Reservation
from ._engine import Tentative as Tentative
from ._exceptions import EngineClosedError as EngineClosedError
from ._exceptions import EngineConfigError as EngineConfigError
from ._exceptions import EngineError as EngineError
from ._exceptions import HandshakeError as HandshakeError
from ._exceptions import InvalidRequestError as InvalidRequestError
from ._exceptions import PassTimingError as PassTimingError
from ._journal import Admission as Admission
from ._journal import EventKind as EventKind
from ._journal import Journal as Journal
from ._journal import LifecycleEvent as LifecycleEvent
from ._journal import RequestTrace as RequestTrace
from ._keys import BlockKeyer as BlockKeyer
from ._kv import KVCache as KVCache
from ._pass import PassShape as PassShape
from ._pass import Role as Role
from ._pass import TimingModel as TimingModel
from ._timing import FixedTiming as FixedTiming

__all__ = (
    "DEFAULT_CONTEXT_LENGTH",
    "Admission",
    "BlockKeyer",
    "Engine",
    "EngineClosedError",
    "EngineConfig",
    "EngineConfigError",
    "EngineError",
    "EngineSnapshot",
    "EngineView",
    "EventKind",
    "FixedTiming",
    "HandshakeError",
    "InvalidRequestError",
    "Journal",
    "KVCache",
    "KVEvent",
    "LifecycleEvent",
    "PassShape",
    "PassTimingError",
    "Rejection",
    "RequestTrace",
    "Reservation",
    "Role",
    "Tentative",
    "TimingModel",
)
