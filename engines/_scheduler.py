"""The scheduler seam: the one place an engine's batching policy lives.

An engine's state (queues, KV cache, counters, the commit phase and the roles) is
:class:`~engines._core.EngineCore`'s; which requests a pass holds, how many tokens each
computes, which blocks they take and whom to preempt is its scheduler's. A scheduler comes in
two parts:

- a :class:`Scheduler`: a frozen description with its options, held by
  :class:`~engines.EngineConfig` (``EngineConfig(scheduler=VLLMScheduler(...))``), compared and
  echoed like any configuration value; it builds the engine's KV cache and binds itself to
  one engine;
- an :class:`EngineScheduler`: what :meth:`Scheduler.bind` returns, one per engine, holding
  whatever per-engine state the policy keeps. The engine asks it for each pass at the pass
  start (:meth:`EngineScheduler.schedule`) and, when macro-stepping, for a run of passes whose
  outcome is already determined (:meth:`EngineScheduler.plan_run`; ``None`` leaves the engine
  to per-pass steps, always correct).

Schedulers are named in :data:`SCHEDULERS` (``--scheduler NAME[:key=value,...]`` on the
command line, the ``scheduler`` key of a config file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._sglang import SGLangScheduler
from ._vllm import VLLMScheduler

if TYPE_CHECKING:
    from ._config import EngineConfig
    from ._core import EngineCore, Pass
    from ._kv import KVCache
    from ._macro import MacroRun

__all__ = ("SCHEDULERS", "EngineScheduler", "SGLangScheduler", "Scheduler", "VLLMScheduler")


@runtime_checkable
class EngineScheduler(Protocol):
    """A scheduler bound to one engine (:meth:`Scheduler.bind`)."""

    def schedule(self, now_ns: int) -> Pass | None:
        """Plan the pass starting at ``now_ns`` and apply its schedule phase.

        Every KV effect of the pass (blocks taken, prefix hits shared, blocks keyed,
        preemptions) happens here, and each entry's ``num_computed`` advances by what the
        pass computes; the pass is priced by the engine's timing model
        (:meth:`EngineCore.price <engines._core.EngineCore.price>`).

        Returns:
            The pass, or ``None`` when no token can be scheduled now.
        """
        ...

    def plan_run(
        self, now_ns: int, publish: Callable[[int], None], max_passes: int
    ) -> MacroRun | None:
        """A run of at most ``max_passes`` passes from ``now_ns`` whose outcome is already
        determined, with its first pass scheduled; ``None`` for per-pass steps.

        The run must not hold a pass whose events a journal subscriber is owed
        (``Journal.token_events_from_ns``, ``Journal.chunk_events_from_ns``): the runs of
        ``MacroRun.plan`` leave those, and the last pass before them, to per-pass steps."""
        ...


@runtime_checkable
class Scheduler(Protocol):
    """A batching policy: frozen options, a KV cache to match, a per-engine binding."""

    @property
    def name(self) -> str:
        """The scheduler's name in :data:`SCHEDULERS`."""
        ...

    def options(self) -> dict[str, Any]:
        """The options that differ from their defaults, by name (a run's configuration
        echo; empty for the defaults)."""
        ...

    def make_cache(self, config: EngineConfig) -> KVCache:
        """The KV cache of an engine configured by ``config``."""
        ...

    def bind(self, core: EngineCore) -> EngineScheduler:
        """The scheduler of the engine ``core`` (called once, when the engine is built)."""
        ...


#: Scheduler names -> their classes, built from keyword options.
SCHEDULERS: Mapping[str, Callable[..., Scheduler]] = {
    "vllm": VLLMScheduler,
    "sglang": SGLangScheduler,
}
