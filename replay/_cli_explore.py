"""``simclock explore CONFIG --runs K``: replay a configuration K times under seeded
variation and check invariants and assertions after each run (:func:`replay.explore`).

Exit status: 0 every run passed; 1 a run failed a check (each failure is printed with its seed
and the one-line command that replays exactly that run; with ``--output-dir`` its report and
timeline are written); 2 bad input, one line on stderr.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, cast

from policies import Policy

from ._config import load_config_file, resolve_config
from ._config_run import configured_run, read_workload
from ._explore import INVARIANTS, Assertion, ExploreRun, explore
from ._files import make_directories
from ._output import write_outputs
from ._run import Run
from ._timeline import timeline_from_events

__all__ = ("add_explore_parser", "run_explore")

_EXIT_OK = 0
_EXIT_FAILED = 1

TIMELINE_FILE = "timeline.json"
"""The timeline of a failed run, written beside its report."""

_DESCRIPTION = """\
Replay a run configuration (simclock replay --config) K times, each run varied by its seed:
the order of what happens at one virtual instant is permuted, the instants of the [faults]
table are jittered, and the information delays it sets are drawn again. After each run the
invariants are checked (every request ends in one terminal status; no KV block is held at the
end; no request is placed twice; nothing is placed on a draining or removed engine), and the
--assert floors. A failed run is printed with its seed and the command that replays it.
"""

_EPILOG = f"""\
invariants: {", ".join(INVARIANTS)}
assertions: NAME OP NUMBER, NAME an alias (slo_attainment, completed, failed, rejected), a
  dotted path of summary.json (goodput.attainment) or a metric (p99_ttft_ms); OP one of
  >= <= == != > <.

exit status: 0 every run passed; 1 a run failed a check; 2 bad input.
Guide: docs/how-to/test-a-policy-against-failures.md.
"""


def add_explore_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``explore CONFIG`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "explore",
        help="replay a configuration under seeded variation and check invariants",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", metavar="CONFIG", help="a .toml or .json run configuration")
    parser.add_argument("--runs", type=_positive_int, default=10, help="runs (default: 10)")
    parser.add_argument(
        "--seed",
        type=_non_negative_int,
        default=0,
        help="variation seed of the first run; run i uses SEED+i (default: 0)",
    )
    parser.add_argument(
        "--jitter-s",
        type=_non_negative_float,
        default=0.5,
        metavar="X",
        help="move each fault instant by up to X seconds (default: 0.5)",
    )
    parser.add_argument(
        "--delays-ms",
        type=_delays,
        default=(),
        metavar="A,B,...",
        help="draw each information delay the config sets among these (default: keep them)",
    )
    parser.add_argument(
        "--assert",
        dest="assertions",
        action="append",
        default=[],
        metavar="EXPR",
        help="a floor or ceiling checked after each run, e.g. slo_attainment>=0.9 (repeatable)",
    )
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        help="write each failed run's report and timeline into DIR/seed-N/",
    )
    parser.set_defaults(handler=run_explore, parser=parser)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _delays(text: str) -> tuple[float, ...]:
    return tuple(_non_negative_float(item) for item in text.split(",") if item.strip())


def replay_command(args: argparse.Namespace, seed: int) -> str:
    """The one-line command that replays exactly the run of variation seed ``seed``."""
    words = ["simclock", "explore", args.config, "--runs", "1", "--seed", str(seed)]
    words += ["--jitter-s", f"{args.jitter_s:g}"]
    if args.delays_ms:
        words += ["--delays-ms", ",".join(f"{d:g}" for d in args.delays_ms)]
    for assertion in args.assertions:
        words += ["--assert", assertion]
    if args.output_dir is not None:
        words += ["--output-dir", args.output_dir]
    return shlex.join(words)


def run_explore(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``simclock explore``; return the exit status."""
    out = sys.stdout if stdout is None else stdout
    assertions = [Assertion.parse(text) for text in args.assertions]
    config = resolve_config(load_config_file(args.config), source=args.config)
    workload = read_workload(config)
    options = configured_run(config, workload).run_options()
    del options["policy"]

    def policies() -> Policy:
        # a fresh policy per run (policies keep state): the run built again
        policy: Policy = configured_run(config, workload).policy
        return policy

    def report(done: ExploreRun) -> None:
        if done.ok:
            out.write(f"run {done.index} (seed {done.seed}): ok\n")
            out.flush()
            return
        out.write(f"run {done.index} (seed {done.seed}): FAILED\n")
        for violation in done.violations:
            out.write(f"  {violation}\n")
        out.write(f"  replay it: {replay_command(args, done.seed)}\n")
        if args.output_dir is not None and done.result is not None:
            where = Path(args.output_dir) / f"seed-{done.seed}"
            _write_failed(done, where, workload, options, policies)
            out.write(f"  outputs: {where}/ (summary.json, requests.jsonl, config.json, ")
            out.write(f"{TIMELINE_FILE})\n")
        out.flush()

    found = explore(
        workload,
        runs=args.runs,
        policy_factory=policies,
        variation_seed=args.seed,
        jitter_s=args.jitter_s,
        delays_ms=args.delays_ms,
        assertions=assertions,
        on_run=report,
        **cast(Any, options),
    )
    failed = len(found.failures)
    out.write(f"explore: {failed} of {len(found.runs)} runs failed\n")
    return _EXIT_FAILED if failed else _EXIT_OK


def _write_failed(
    done: ExploreRun,
    where: Path,
    workload: Any,
    options: dict[str, Any],
    policies: Callable[[], Policy],
) -> None:
    """Write a failed run's report, and its timeline (the run again, keeping its events:
    the same run, byte for byte)."""
    if done.result is None:
        return
    make_directories(where)
    write_outputs(done.result, where)
    again = dict(options)
    again.update(
        policy=policies(),
        schedule_seed=done.schedule_seed,
        faults=done.faults,
        keep_events=True,
    )
    built = Run.build(workload, **again)
    built.finish()
    timeline = timeline_from_events(built.journal.events)
    timeline.write(where / TIMELINE_FILE)
