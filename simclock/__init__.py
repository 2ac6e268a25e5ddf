"""simclock: a deterministic virtual-time asyncio event loop.

The loop knows nothing about LLMs; ``engines``, ``policies``, ``loadgen`` and ``replay``
build the serving simulator on top of it.
"""

from __future__ import annotations

from ._clock import Deadline as Deadline
from ._clock import instant_end as instant_end
from ._clock import now_ns as now_ns
from ._clock import sleep as sleep
from ._clock import sleep_ns as sleep_ns
from ._clock import sleep_until as sleep_until
from ._clock import sleep_until_ns as sleep_until_ns
from ._exceptions import BlockingCallError as BlockingCallError
from ._exceptions import ClockConfigError as ClockConfigError
from ._exceptions import ClockRangeError as ClockRangeError
from ._exceptions import DeadlockError as DeadlockError
from ._exceptions import InternalError as InternalError
from ._exceptions import LivelockError as LivelockError
from ._exceptions import NonFiniteWakeupError as NonFiniteWakeupError
from ._exceptions import NotVirtualLoopError as NotVirtualLoopError
from ._exceptions import RealIOError as RealIOError
from ._exceptions import RealThreadError as RealThreadError
from ._exceptions import SimulationError as SimulationError
from ._exceptions import StaleWakeupError as StaleWakeupError
from ._exceptions import StalledWaiterError as StalledWaiterError
from ._exceptions import VirtualTimeLimitError as VirtualTimeLimitError
from ._exceptions import WakeupError as WakeupError
from ._inspect import InstantEndWaiter as InstantEndWaiter
from ._inspect import LoopSnapshot as LoopSnapshot
from ._inspect import LoopStats as LoopStats
from ._inspect import PendingTimer as PendingTimer
from ._inspect import StepEvent as StepEvent
from ._inspect import TaskInfo as TaskInfo
from ._inspect import WakeupKind as WakeupKind
from ._logging import add_virtual_time as add_virtual_time
from ._logging import configure_logging as configure_logging
from ._logging import get_logger as get_logger
from ._logging import log_context as log_context
from ._loop import DEFAULT_LIVELOCK_BUDGET as DEFAULT_LIVELOCK_BUDGET
from ._loop import DEFAULT_STALL_BUDGET as DEFAULT_STALL_BUDGET
from ._loop import MAX_TIME_NS as MAX_TIME_NS
from ._loop import VirtualEventLoop as VirtualEventLoop
from ._run import new_event_loop as new_event_loop
from ._run import run as run
from ._version import __version__ as __version__

__all__ = (
    "DEFAULT_LIVELOCK_BUDGET",
    "DEFAULT_STALL_BUDGET",
    "MAX_TIME_NS",
    "BlockingCallError",
    "ClockConfigError",
    "ClockRangeError",
    "Deadline",
    "DeadlockError",
    "InstantEndWaiter",
    "InternalError",
    "LivelockError",
    "LoopSnapshot",
    "LoopStats",
    "NonFiniteWakeupError",
    "NotVirtualLoopError",
    "PendingTimer",
    "RealIOError",
    "RealThreadError",
    "SimulationError",
    "StaleWakeupError",
    "StalledWaiterError",
    "StepEvent",
    "TaskInfo",
    "VirtualEventLoop",
    "VirtualTimeLimitError",
    "WakeupError",
    "WakeupKind",
    "__version__",
    "add_virtual_time",
    "configure_logging",
    "get_logger",
    "instant_end",
    "log_context",
    "new_event_loop",
    "now_ns",
    "run",
    "sleep",
    "sleep_ns",
    "sleep_until",
    "sleep_until_ns",
)
