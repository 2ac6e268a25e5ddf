"""One run of a sweep: a configuration table in, a run directory out.

:func:`run_task` is what an executor calls, in this process, a worker process or a Ray worker.
It does what ``simclock replay --config FILE --output-dir DIR --quiet`` does with the same
configuration: resolve it (:func:`replay.config.resolve_config`), read or generate the
workload, build the topology and the policy, replay, and write ``summary.json``,
``requests.jsonl`` and ``config.json`` as a set. The same configuration gives the same bytes
either way; a test compares them.

A task sent to a machine that does not share the sweep's filesystem carries no output
directory: the run is written to a temporary directory there and its files come back in the
outcome, for the sweep to write (:attr:`RunOutcome.files`).
"""

from __future__ import annotations

import tempfile
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

import attrs

import simclock

from ._config import ConfigError, ReplayConfig, resolve_config
from ._config_run import configured_run, read_workload
from ._exceptions import ReplayFailedError
from ._export import EXPORT_FILES, Export
from ._output import OUTPUT_FILES, RequestLog, write_outputs
from ._run import run

__all__ = (
    "RunOutcome",
    "RunStatus",
    "RunTask",
    "replay_config",
    "run_task",
)

RunStatus = Literal["ok", "failed"]
"""How a run ended: ``ok`` (its report was written), or ``failed``."""


@attrs.frozen(kw_only=True)
class RunTask:
    """One run to execute: what an executor sends to a worker (small and picklable).

    Attributes:
        run_id: the run's id in the sweep.
        config: the run's configuration table, as a ``simclock replay --config`` file holds
            it (JSON-compatible values), its seed included.
        source: the sweep file (or ``sweep``), named in error messages.
        output_dir: the run's directory; None to write the run to a temporary directory
            and return its files in :attr:`RunOutcome.files`.
    """

    run_id: str
    config: Mapping[str, Any]
    source: str = "sweep"
    output_dir: str | None = None


@attrs.frozen(kw_only=True)
class RunOutcome:
    """What came of a :class:`RunTask`.

    Attributes:
        run_id: the task's run id.
        status: ``ok``, or ``failed`` (the replay failed, or its input could not be used).
        error: the failure in one line, None when ``ok``.
        reported: whether the run's report (``summary.json`` and the rest) was written: a
            replay that failed still writes the report of the run up to the failure.
        files: the report files (name -> bytes) of a task without an output directory.
    """

    run_id: str
    status: RunStatus
    error: str | None = None
    reported: bool = False
    files: Mapping[str, bytes] = attrs.field(factory=dict)


def run_task(task: RunTask) -> RunOutcome:
    """Execute one run; return its outcome (a failed run is an outcome, not an exception).

    Args:
        task: the run.

    Returns:
        ``ok`` with the report written (or returned); ``failed`` with the one-line error
        (the report of a replay that failed is written too).

    Raises:
        KeyboardInterrupt: the run was interrupted; nothing of it was written.
    """
    if task.output_dir is not None:
        return _run_into(task, Path(task.output_dir))
    with tempfile.TemporaryDirectory(prefix="simclock-run-") as tmp:
        directory = Path(tmp) / "run"
        outcome = _run_into(task, directory)
        names = (*OUTPUT_FILES, *EXPORT_FILES.values())
        files = {
            name: (directory / name).read_bytes()
            for name in names
            if outcome.reported and (directory / name).is_file()
        }
    return attrs.evolve(outcome, files=files)


def _run_into(task: RunTask, directory: Path) -> RunOutcome:
    try:
        config = resolve_config(task.config, {"output_dir": str(directory)}, source=task.source)
        failure = replay_config(config)
    except (ConfigError, ValueError, OSError, simclock.SimulationError) as exc:
        return RunOutcome(run_id=task.run_id, status="failed", error=_one_line(exc))
    except Exception as exc:
        # A bug: keep the traceback's last line in the table, and go on with the others.
        last = traceback.format_exception_only(exc)[-1].strip()
        return RunOutcome(run_id=task.run_id, status="failed", error=f"internal error: {last}")
    if failure is not None:
        return RunOutcome(run_id=task.run_id, status="failed", error=failure, reported=True)
    return RunOutcome(run_id=task.run_id, status="ok", reported=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def replay_config(config: ReplayConfig) -> str | None:
    """Replay a resolved configuration and write its report into ``config.output_dir``.

    Args:
        config: the configuration; its ``output_dir`` must be set.

    Returns:
        None when the replay ran to its end; the failure in one line when a step failed
        (the report up to the failure is written all the same).

    Raises:
        ConfigError: bad input found while reading the workload or building the topology.
        OutputError: the report cannot be written.
    """
    if config.output_dir is None:
        raise ValueError("replay_config: the configuration has no output_dir")
    workload = read_workload(config)
    configured = configured_run(config, workload)
    failure: str | None = None
    with RequestLog.open(config.output_dir, token_times=config.token_times) as log:
        try:
            result = run(workload, **configured.run_options(), request_log=log)
        except ReplayFailedError as exc:
            result = exc.result
            failure = _one_line(exc)
        write_outputs(
            result,
            config.output_dir,
            token_times=config.token_times,
            request_log=log,
            exports=cast("tuple[Export, ...]", config.export),
        )
    return failure
