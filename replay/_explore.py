"""Policies checked under seeded variation: replay a workload many times, each run varied by a
seed, and check invariants and user assertions after each.

Run ``i`` of :func:`explore` uses the variation seed ``seed + i``; from it (and nothing else)
come, through ``numpy.random.SeedSequence(variation_seed)``:

1. the order of the callbacks ready at one virtual instant (the run's ``schedule_seed``:
   the clock's seeded mode, :class:`simclock.VirtualEventLoop`);
2. the instants of the declared faults, each moved by a uniform draw in
   ``[-jitter_s, jitter_s]`` (never before 0);
3. the information delays that are set (``view_delay_ms``, ``view_period_ms``,
   ``kv_event_delay_ms``), each replaced by a draw among ``delays_ms`` when given.

After each run, the invariants (:data:`INVARIANTS`) and the assertions are checked. Run
``i`` is replayed exactly by ``explore(..., variation_seed=seed + i, runs=1)``
(``simclock explore CONFIG --seed N --runs 1``).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import attrs
import numpy as np

from engines import EventKind, LifecycleEvent
from loadgen import Workload
from policies import Policy

from ._exceptions import ReplayError, ReplayFailedError
from ._faults import Faults
from ._output import summary_json
from ._records import TERMINAL_STATUSES
from ._report import ReplayResult
from ._run import Run, RunOptions

__all__ = (
    "INVARIANTS",
    "Assertion",
    "ExploreError",
    "ExploreResult",
    "ExploreRun",
    "Violation",
    "explore",
    "variation",
)

INVARIANTS: tuple[str, ...] = (
    "run_failed",
    "one_terminal_status",
    "kv_blocks_held",
    "placed_twice",
    "inactive_placement",
)
"""The invariants checked after every run, by name:

- ``run_failed``: the replay did not fail (a policy, engine or loop error);
- ``one_terminal_status``: every request of the workload has one record, in a terminal
  status (none ``unplaced`` or ``incomplete`` unless the run has a time cutoff);
- ``kv_blocks_held``: no engine holds a KV block at the end;
- ``placed_twice``: no request reached an engine again (``QUEUED``) without having left the
  previous one first (``REQUEUED``);
- ``inactive_placement``: no offer reached, and no commit landed on, a draining or removed
  engine (:meth:`replay.Cluster.inactive_placements`).
"""

# statuses that say a request was lost when the run has no time cutoff
_LOST = ("unplaced", "incomplete")


class ExploreError(ReplayError, ValueError):
    """An explore option or an assertion is invalid."""


_OPS: Mapping[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_ASSERTION = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")

ALIASES: Mapping[str, str] = {
    "slo_attainment": "goodput.attainment_of_all",
    "failed": "status_counts.failed",
    "rejected": "status_counts.rejected",
    "completed": "status_counts.completed",
}
"""Short names of summary figures an assertion may use (any dotted path of
``summary.json`` works too, and a bare name of its ``metrics`` table)."""


@attrs.frozen
class Assertion:
    """A floor or ceiling on a figure of the run's summary: ``NAME OP NUMBER``.

    ``NAME`` is an alias (:data:`ALIASES`: ``slo_attainment`` is the share of all measured
    requests that completed within the SLO), a dotted path of ``summary.json``
    (``goodput.attainment``, ``status_counts.failed``) or a name of its ``metrics`` table
    (``p99_ttft_ms``); ``OP`` is one of ``>= <= == != > <``.

    Attributes:
        text: the assertion as written.
        path: the summary path it reads.
        op: the comparison.
        bound: the number compared with.
    """

    text: str
    path: str
    op: str
    bound: float

    @classmethod
    def parse(cls, text: str) -> Assertion:
        """Parse ``NAME OP NUMBER``.

        Raises:
            ExploreError: ``--assert: 'x >> 1': expected NAME OP NUMBER ...``.
        """
        match = _ASSERTION.match(text)
        if match is None:
            raise ExploreError(
                f"--assert: {text!r}: expected NAME OP NUMBER, e.g. slo_attainment>=0.9"
            )
        name, op, number = match.groups()
        try:
            bound = float(number)
        except ValueError:
            raise ExploreError(f"--assert: {text!r}: {number!r} is not a number") from None
        return cls(text.strip(), ALIASES.get(name, name), op, bound)

    def check(self, summary: Mapping[str, Any]) -> str | None:
        """None when it holds on ``summary`` (``summary.json`` as a dict); else why not."""
        value = _lookup(summary, self.path)
        if value is _MISSING:
            return f"{self.text}: the summary has no {self.path}"
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return f"{self.text}: {self.path} is {value!r}"
        if not _OPS[self.op](value, self.bound):
            return f"{self.text}: {self.path} is {value!r}"
        return None


_MISSING = object()


def _lookup(summary: Mapping[str, Any], path: str) -> object:
    node: object = summary
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            metrics = summary.get("metrics")
            if "." not in path and isinstance(metrics, Mapping) and path in metrics:
                return metrics[path]
            return _MISSING
        node = node[part]
    return node


@attrs.frozen
class Violation:
    """One invariant or assertion that did not hold.

    Attributes:
        check: the invariant's name (:data:`INVARIANTS`), ``"assert"`` or ``"predicate"``.
        message: what was seen, one line.
    """

    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


@attrs.frozen
class ExploreRun:
    """One run of an exploration.

    Attributes:
        index: its position (0-based).
        seed: its variation seed (replay it with ``variation_seed=<this>, runs=1``).
        schedule_seed: the seed of its same-instant order.
        faults: the faults it ran with (varied), or None.
        violations: what did not hold (empty: the run passed).
        result: its report (kept for failed runs only, unless asked).
    """

    index: int
    seed: int
    schedule_seed: int
    faults: Faults | None
    violations: tuple[Violation, ...]
    result: ReplayResult | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def ok(self) -> bool:
        """Whether every invariant and assertion held."""
        return not self.violations


@attrs.frozen
class ExploreResult:
    """What an exploration found.

    Attributes:
        runs: every run, in order.
    """

    runs: tuple[ExploreRun, ...]

    @property
    def failures(self) -> tuple[ExploreRun, ...]:
        """The runs with a violation."""
        return tuple(run for run in self.runs if run.violations)

    @property
    def ok(self) -> bool:
        """Whether every run passed."""
        return not self.failures


def variation(
    seed: int,
    faults: Faults | None,
    *,
    jitter_s: float,
    delays_ms: Sequence[float],
) -> tuple[int, Faults | None]:
    """The schedule seed and the varied faults of variation seed ``seed``."""
    streams = np.random.SeedSequence(seed).spawn(2)
    schedule_seed = int(streams[0].generate_state(1, dtype=np.uint32)[0])
    if faults is None:
        return schedule_seed, None
    rng = np.random.default_rng(streams[1])
    return schedule_seed, faults.varied(rng, jitter_s=jitter_s, delays_ms=delays_ms)


@attrs.define(eq=False)
class _Placements:
    """Watches QUEUED and REQUEUED events: a request queued (per role) while already on an
    engine was placed twice."""

    on: dict[tuple[str, object], int] = attrs.field(factory=dict)
    twice: list[str] = attrs.field(factory=list)

    def __call__(self, event: LifecycleEvent) -> None:
        rid = event.request_id
        if event.kind is EventKind.REQUEUED:
            for key in [k for k in self.on if k[0] == rid]:
                del self.on[key]
            return
        key = (rid, event.get("role"))
        if key in self.on:
            self.twice.append(
                f"request {rid!r} queued on engine {event.engine} at "
                f"{event.time_ns / 1e6:g} ms while on engine {self.on[key]}"
            )
        elif event.engine is not None:
            self.on[key] = event.engine


def check_run(
    run: Run,
    result: ReplayResult,
    *,
    workload: Workload,
    placements: _Placements | None = None,
    assertions: Sequence[Assertion] = (),
    predicate: Callable[[ReplayResult], bool] | None = None,
) -> tuple[Violation, ...]:
    """The invariants and assertions that do not hold for a finished run."""
    found: list[Violation] = []
    failure = run.failure
    if failure is not None:
        found.append(Violation("run_failed", f"{type(failure).__name__}: {failure}"))
    records = result.requests
    ids = [record.request_id for record in records]
    if len(set(ids)) != len(ids):
        found.append(Violation("one_terminal_status", "a request has several records"))
    cutoff = result.meta.config.get("max_virtual_time_s") is not None
    wanted = len(workload.requests)
    if records and len(records) < wanted:
        found.append(
            Violation("one_terminal_status", f"{len(records)} records for {wanted} requests")
        )
    for record in records:
        if record.status not in TERMINAL_STATUSES or (record.status in _LOST and not cutoff):
            found.append(
                Violation(
                    "one_terminal_status", f"request {record.request_id!r} ended {record.status}"
                )
            )
            break
    held = [(e.index, e.view.kv_blocks_used) for e in run.engines if e.view.kv_blocks_used]
    if held:
        engine, blocks = held[0]
        found.append(Violation("kv_blocks_held", f"engine {engine} holds {blocks} blocks"))
    if placements is not None and placements.twice:
        found.append(Violation("placed_twice", placements.twice[0]))
    inactive = run.cluster.inactive_placements()
    if inactive:
        first = inactive[0]
        found.append(
            Violation(
                "inactive_placement",
                f"{len(inactive)} placements on engines not accepting them; first: request "
                f"{first.request_id!r} {first.outcome} on engine {first.engine} "
                f"({first.state}) at {first.time_ns / 1e6:g} ms",
            )
        )
    summary = summary_json(result) if assertions else {}
    for assertion in assertions:
        problem = assertion.check(summary)
        if problem is not None:
            found.append(Violation("assert", problem))
    if predicate is not None and not predicate(result):
        name = getattr(predicate, "__name__", "predicate")
        found.append(Violation("predicate", f"{name}(result) is false"))
    return tuple(found)


def explore(
    workload: Workload,
    *,
    runs: int,
    policy_factory: Callable[[], Policy],
    variation_seed: int = 0,
    jitter_s: float = 0.0,
    delays_ms: Sequence[float] = (),
    assertions: Sequence[str | Assertion] = (),
    predicate: Callable[[ReplayResult], bool] | None = None,
    keep_results: bool = False,
    on_run: Callable[[ExploreRun], None] | None = None,
    **options: Unpack[RunOptions],
) -> ExploreResult:
    """Replay ``workload`` ``runs`` times, each varied by its seed, and check each run.

    Args:
        workload: the requests.
        runs: how many runs (>= 1).
        policy_factory: makes a fresh policy for each run (policies keep state).
        variation_seed: the variation seed of the first run; run ``i`` uses
            ``variation_seed + i`` (``seed``, the run seed, stays the same for every run).
        jitter_s: move each declared fault instant by up to this many seconds.
        delays_ms: draw each information delay that is set among these (empty: keep them).
        assertions: ``NAME OP NUMBER`` floors and ceilings on summary figures
            (:class:`Assertion`).
        predicate: ``predicate(result) -> bool``; a run where it is false fails.
        keep_results: keep every run's report (else only failed runs').
        on_run: called after each run (progress, early printing).
        **options: the run options (:class:`replay.RunOptions`) but ``policy`` and
            ``schedule_seed``; ``faults`` is varied per run.

    Returns:
        Every run, with its violations.

    Raises:
        ExploreError: a bad option or assertion.
    """
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ExploreError(f"runs: must be an int >= 1, got {runs!r}")
    first = variation_seed
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise ExploreError(f"variation_seed: must be an int >= 0, got {first!r}")
    if (
        isinstance(jitter_s, bool)
        or not isinstance(jitter_s, int | float)
        or not (math.isfinite(jitter_s) and jitter_s >= 0)
    ):
        raise ExploreError(f"jitter_s: must be a finite number >= 0, got {jitter_s!r}")
    for name in ("policy", "schedule_seed"):
        if name in options:
            raise ExploreError(f"{name}: explore sets it per run; do not give it")
    checks = [a if isinstance(a, Assertion) else Assertion.parse(a) for a in assertions]
    faults = options.pop("faults", None)
    out: list[ExploreRun] = []
    for index in range(runs):
        this_seed = first + index
        schedule_seed, varied = variation(this_seed, faults, jitter_s=jitter_s, delays_ms=delays_ms)
        run_options: dict[str, Any] = dict(options)
        run_options.update(policy=policy_factory(), schedule_seed=schedule_seed, faults=varied)
        built = Run.build(workload, **run_options)
        placements = _Placements()
        built.journal.subscribe(placements, kinds=[EventKind.QUEUED, EventKind.REQUEUED])
        try:
            result = built.result_or_raise()
        except ReplayFailedError as failed:
            result = failed.result
        violations = check_run(
            built,
            result,
            workload=workload,
            placements=placements,
            assertions=checks,
            predicate=predicate,
        )
        done = ExploreRun(
            index,
            this_seed,
            schedule_seed,
            varied,
            violations,
            result if keep_results or violations else None,
        )
        out.append(done)
        if on_run is not None:
            on_run(done)
    return ExploreResult(tuple(out))
