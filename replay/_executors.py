"""Where a sweep's runs execute: the :class:`Executor` seam and its two implementations.

An executor takes a function and the items to call it on, and yields the results as they
finish, in any order; the sweep puts them back in its own order. Its runs are independent and
deterministic, so where they execute changes nothing in their files: the same run gives the
same bytes in this process, in a worker process, or on a Ray worker.

- :class:`LocalExecutor` runs them in this process (``jobs=1``) or in a pool of ``jobs``
  worker processes (:class:`concurrent.futures.ProcessPoolExecutor`).
- :class:`RayExecutor` runs each as a Ray task, on a local Ray instance or on an existing
  cluster (``address``), through the optional extra ``simclock[ray]``.

An executor of one's own (Dask, a batch queue) implements the protocol: one attribute and one
method.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import itertools
import logging
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

from ._config import ConfigError

__all__ = ("RAY_MISSING", "Executor", "LocalExecutor", "RayExecutor")

_T = TypeVar("_T")
_R = TypeVar("_R")

RAY_MISSING = "the ray executor needs Ray: pip install 'simclock[ray]'"
"""The error when Ray is asked for and cannot be imported."""


@runtime_checkable
class Executor(Protocol):
    """Runs a function on many items, wherever it likes; yields the results as they come.

    Attributes:
        shares_filesystem: whether the function runs where it sees this process's files
            (the sweep's output directory, relative paths resolved from the same working
            directory). When False, each run's files come back in its result and the sweep
            writes them.
    """

    @property
    def shares_filesystem(self) -> bool:
        """Whether the workers see this process's filesystem and working directory."""
        ...

    def map_unordered(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> Iterator[_R]:
        """Call ``fn`` on every item; yield each result as soon as it is there.

        ``fn`` is a module-level function and the items are picklable. Closing the
        iterator early (an interrupt) cancels what has not started.

        Args:
            fn: the function (:func:`replay._sweep_run.run_task` for a sweep).
            items: its arguments, one call each.

        Yields:
            The results, in the order they finish.
        """
        ...


@attrs.frozen
class LocalExecutor:
    """Runs on this machine: in this process (``jobs=1``), or in ``jobs`` worker processes.

    Attributes:
        jobs: runs at once; 1 runs them one after another in this process.
    """

    jobs: int = attrs.field(default=1)

    @jobs.validator
    def _check_jobs(self, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"jobs: must be an integer >= 1, got {value!r}")

    @property
    def shares_filesystem(self) -> bool:
        """Always True: the workers are this machine's processes."""
        return True

    def map_unordered(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> Iterator[_R]:
        """See :meth:`Executor.map_unordered`."""
        if self.jobs == 1 or len(items) <= 1:
            for item in items:
                yield fn(item)
            return
        workers = min(self.jobs, len(items))
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, initializer=_worker_signals
        )
        waiting = iter(items)
        try:
            # No more calls in flight than workers: a pool fed everything at once queues
            # calls ahead, and those would still start after an interrupt.
            running = {pool.submit(_call, fn, i) for i in itertools.islice(waiting, workers)}
            while running:
                done, running = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    yield future.result()
                    for following in itertools.islice(waiting, 1):
                        running.add(pool.submit(_call, fn, following))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _worker_signals() -> None:
    """A local worker process ignores Ctrl-C while it waits for work (it leaves when the
    pool shuts down) and ends on SIGTERM, whatever handlers the parent had."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _call(fn: Callable[[_T], _R], item: _T) -> _R:
    """``fn(item)`` in a local worker process, interrupted by Ctrl-C like the parent (the run
    cleans up after itself)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return fn(item)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@attrs.frozen
class RayExecutor:
    """Runs each item as a Ray task.

    Without an ``address`` it starts a local Ray instance (or uses the one this process
    already started); with one it connects to that cluster (``auto``, ``ray://host:10001``
    or ``host:6379``). A Ray instance it started or connected to is shut down when the
    iteration ends; one that was already initialised is left as it was.

    The workers must be able to import simclock: on a local instance they share this
    environment; on a cluster, install simclock on its nodes, or ship it with
    ``runtime_env`` (for example ``{"pip": ["simclock"]}`` or ``{"py_modules": [...]}``).
    Runs return their files to this process, so the cluster needs no shared filesystem; the
    traces they read must exist at the same path on the workers (or be bundled datasets).

    Attributes:
        address: the cluster to connect to; None for a local instance.
        runtime_env: Ray's runtime environment for the tasks (None for none).
        num_cpus: CPUs of a local instance (None: Ray's default, every core).
        init_options: further keyword arguments of ``ray.init``.

    Raises:
        ConfigError: Ray cannot be imported (:data:`RAY_MISSING`).
    """

    address: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    num_cpus: int | None = None
    init_options: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if importlib.util.find_spec("ray") is None:
            raise ConfigError(RAY_MISSING)

    @property
    def shares_filesystem(self) -> bool:
        """Always False: runs return their files (a cluster need not share a filesystem)."""
        return False

    def map_unordered(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> Iterator[_R]:
        """See :meth:`Executor.map_unordered`."""
        try:
            import ray  # the optional extra: imported only when a Ray executor runs
        except ImportError as exc:
            raise ConfigError(f"{RAY_MISSING} ({exc})") from None
        started = not ray.is_initialized()
        if started:
            # Ray's own start-up messages are not the sweep's progress.
            options: dict[str, Any] = {"logging_level": logging.ERROR}
            if self.address is None:
                options["include_dashboard"] = False  # a local instance for this sweep only
            else:
                options["address"] = self.address
            options.update(self.init_options)
            if self.num_cpus is not None:
                options["num_cpus"] = self.num_cpus
            if self.runtime_env is not None:
                options["runtime_env"] = dict(self.runtime_env)
            ray.init(**options)
        try:
            remote = ray.remote(fn)
            pending = [remote.remote(item) for item in items]
            try:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    yield ray.get(done[0])
            finally:
                for ref in pending:
                    ray.cancel(ref)
        finally:
            if started:
                ray.shutdown()
