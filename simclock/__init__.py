"""simclock: a deterministic virtual-time asyncio event loop.

The loop knows nothing about LLMs; ``engines``, ``policies``, ``loadgen`` and ``replay``
build the serving simulator on top of it.
"""

from __future__ import annotations

import importlib
import typing as _typing

from ._version import __version__ as __version__

if _typing.TYPE_CHECKING:
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

# Public names load their module on first use (PEP 562), so ``import simclock`` costs next to
# nothing: the command line can take over Ctrl-C before anything heavy (asyncio, numpy) loads,
# and a tool importing one helper does not pay for the rest.
_LAZY: dict[str, str] = {
    "Deadline": "._clock",
    "instant_end": "._clock",
    "now_ns": "._clock",
    "sleep": "._clock",
    "sleep_ns": "._clock",
    "sleep_until": "._clock",
    "sleep_until_ns": "._clock",
    "BlockingCallError": "._exceptions",
    "ClockConfigError": "._exceptions",
    "ClockRangeError": "._exceptions",
    "DeadlockError": "._exceptions",
    "InternalError": "._exceptions",
    "LivelockError": "._exceptions",
    "NonFiniteWakeupError": "._exceptions",
    "NotVirtualLoopError": "._exceptions",
    "RealIOError": "._exceptions",
    "RealThreadError": "._exceptions",
    "SimulationError": "._exceptions",
    "StaleWakeupError": "._exceptions",
    "StalledWaiterError": "._exceptions",
    "VirtualTimeLimitError": "._exceptions",
    "WakeupError": "._exceptions",
    "InstantEndWaiter": "._inspect",
    "LoopSnapshot": "._inspect",
    "LoopStats": "._inspect",
    "PendingTimer": "._inspect",
    "StepEvent": "._inspect",
    "TaskInfo": "._inspect",
    "WakeupKind": "._inspect",
    "add_virtual_time": "._logging",
    "configure_logging": "._logging",
    "get_logger": "._logging",
    "log_context": "._logging",
    "DEFAULT_LIVELOCK_BUDGET": "._loop",
    "DEFAULT_STALL_BUDGET": "._loop",
    "MAX_TIME_NS": "._loop",
    "VirtualEventLoop": "._loop",
    "new_event_loop": "._run",
    "run": "._run",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simclock' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
