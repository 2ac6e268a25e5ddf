"""The ``simclock`` command line.

``simclock replay`` reads a trace (or the bundled sample), builds the aggregated topology, runs
:func:`replay.run`, prints the report table and, with ``--output-dir``, writes the report files.

Exit status: 0 success; 1 the replay ran but failed (a policy or engine step raised; the report
of the run up to the failure is still printed and written); 2 bad input (an option, a config
file, a missing file, a malformed trace), reported as one line on stderr with no file written;
70 an internal error, a bug in simclock; 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), with
one line naming the virtual time reached and no file changed.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import textwrap
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TextIO, cast

import attrs

import simclock
from engines import EngineConfig
from loadgen import (
    LoadMode,
    Workload,
)
from simclock import __version__

from ._cli_datasets import add_datasets_parser, resolve_trace
from ._cli_debug import (
    DebugOptions,
    add_debug_flags,
    add_inspect_parser,
    configure_from_args,
    debug_options_from_args,
    run_observed,
    write_timeline,
)
from ._cli_explore import add_explore_parser
from ._cli_plot import (
    add_compare_parser,
    add_plot_parser,
    add_series_flags,
    series_from_args,
    write_series_and_plots,
)
from ._cli_sweep import add_sweep_parser
from ._config import (
    POLICIES,
    READER_KEYS,
    RUN_KEYS,
    SCHEDULERS,
    TIMINGS,
    WORKLOAD_FLAGS,
    WORKLOAD_GROUPS,
    WORKLOAD_OPTIONS,
    ConfigError,
    load_config_file,
    resolve_config,
)
from ._config_run import configured_run, read_workload
from ._exceptions import ReplayFailedError, ReplayInterrupted
from ._export import Export, export_files
from ._files import check_destinations
from ._output import (
    OUTPUT_FILES,
    OutputError,
    RequestLog,
    format_table,
    write_outputs,
)
from ._plot import PlotExtraMissing
from ._report import ReplayResult
from ._run import run
from ._series import SERIES_FILE
from ._timeline import Timeline

__all__ = (
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "interrupted",
    "main",
)

EXIT_OK = 0
"""The replay ran and the report was printed (and written)."""
EXIT_FAILED = 1
"""The replay ran but a step failed; the report up to the failure was still produced."""
EXIT_USAGE = 2
"""Bad input: an option, a config file, a missing file or a malformed trace."""
EXIT_INTERNAL = 70
"""An internal error: a bug in simclock (``EX_SOFTWARE``)."""


class UsageError(Exception):
    """Bad command-line input; carries the one-line message."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


_REPLAY_DESCRIPTION = """\
Replay an LLM-serving trace through simulated inference engines under a routing policy, on a
deterministic virtual clock, and print the serving metrics (TTFT, TPOT, ITL, E2E latency,
throughput, goodput, prefix reuse, engine utilisation).

With no TRACE it replays a bundled sample (the dataset mooncake-sample): every multi-turn
conversation of the first five minutes of the Mooncake conversation trace
(github.com/kvcache-ai/Mooncake, Apache-2.0), 199 requests, on 4 engines (an H100 serving
llama-3.1-8b, roofline timing, round-robin placement).
"""

_CONFIG_FILE_TEXT = "config file (--config run.toml or run.json):\n" + textwrap.fill(
    "a table with the same keys as the options ("
    + ", ".join(k.name for k in RUN_KEYS if k.flag is not None or k.name == "trace")
    + "), plus gpu_memory_utilization and an [engine] table of engine settings ("
    + ", ".join(f.name for f in attrs.fields(EngineConfig) if f.name != "scheduler")
    + "), and a [workload] table: load-mode keys ("
    + ", ".join(f.name for f in attrs.fields(LoadMode))
    + "), reader options ("
    + ", ".join(READER_KEYS)
    + "), and synthetic (a spec string or a table, instead of a trace). Options given on "
    "the command line win. The config.json of an earlier run is a valid config file.",
    width=88,
    initial_indent="  ",
    subsequent_indent="  ",
)

_REPLAY_EPILOG = f"""\
specs:
  --policy, --timing and --scheduler take NAME[:key=value,...], e.g.
  kv_aware:temperature=0.5 or fixed:prefill_ms=50,decode_ms=10; values are numbers,
  true/false, or text.
  policies: {", ".join(POLICIES)}
  timing models: {", ".join(TIMINGS)}
    fixed       prefill_ms (default 50), decode_ms (default 10)
    polynomial  prefill_a2, prefill_a1, prefill_a0, decode_b2, decode_b1, decode_b0,
                decode_floor_ms (Dynamo mocker defaults)
    linear      c0, c_p, c_d, c_kv (required), c_pp
    roofline    uses --gpu and --model; tensor_parallel, compute_efficiency,
                memory_efficiency, overhead_ms, weight_bytes, kv_bytes
    table       file=TABLE.json with prefill_tokens, prefill_ms, decode_batch,
                decode_context, decode_ms
  schedulers: {", ".join(SCHEDULERS)}
    vllm        vLLM v1's rules; admit_whole_prompt, evict_empty_first (false by
                default: true follows AISimulate's replay)
    sglang      SGLang's rules; page_size (1; sets the block size), schedule_policy
                (fcfs or lpm), chunked_prefill_size, max_prefill_tokens,
                enable_mixed_chunk, init_new_token_ratio, min_new_token_ratio_factor,
                new_token_ratio_decay_steps, schedule_conservativeness,
                clip_max_new_tokens, retract_decode_steps (docs: sglang-scheduler)

{_CONFIG_FILE_TEXT}

synthetic workloads (--synthetic SPEC): key=value pairs separated by spaces, e.g.
  "count=1000 arrivals=poisson(5) input=lognormal(12035,6909) output=300";
  keys: count and arrivals (poisson(rate), gamma(rate,cv), constant(rate)) are required;
  input, output (fixed(v), uniform(lo,hi), lognormal(mean,median), or a number), lengths
  (a trace to resample), input_min, input_max, output_min, output_max, block_size,
  prefix_groups, shared_prefix_ratio, turns, new_input, think_ms. Drawn from the run seed.

outputs (--output-dir DIR): summary.json, requests.jsonl, config.json, written as a set
  (a failure leaves the previous run's files as they were); the same inputs and seed give
  byte-identical files.

exit status: 0 ok; 1 the replay failed (report still produced); 2 bad input; 70 internal
  error; 130 interrupted (Ctrl-C); 143 terminated (SIGTERM). Limits: docs/reference/errors.md.
"""


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level argument parser with every subcommand registered."""
    parser = _Parser(
        prog="simclock",
        description=(
            "Replay LLM-serving workloads through simulated inference engines and async "
            "routing policies on a deterministic virtual clock."
        ),
    )
    parser.add_argument("--version", action="version", version=f"simclock {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    replay = commands.add_parser(
        "replay",
        help="replay a trace (default: a bundled Mooncake sample) and print the metrics",
        description=_REPLAY_DESCRIPTION,
        epilog=_REPLAY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument(
        "trace",
        nargs="?",
        metavar="TRACE",
        help=(
            "the trace file, or the name of a bundled dataset (simclock datasets); default: "
            "the bundled Mooncake sample"
        ),
    )
    replay.add_argument(
        "--config",
        metavar="FILE",
        help="a .toml or .json configuration file; options given here override it",
    )
    # every key of a run's configuration that has a flag, declared once (replay._config)
    for key in RUN_KEYS:
        if key.flag is not None:
            replay.add_argument(key.flag_name, **key.flag)
    replay.add_argument("--quiet", action="store_true", help="do not print the report table")
    _add_workload_flags(replay)
    add_debug_flags(replay)
    add_series_flags(replay)
    replay.set_defaults(handler=_replay, parser=replay)
    inspect = add_inspect_parser(
        cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands)
    )
    inspect.set_defaults(parser=inspect)
    add_datasets_parser(cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands))
    add_plot_parser(cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands))
    add_compare_parser(cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands))
    add_sweep_parser(cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands))
    add_explore_parser(cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands))
    return parser


def _add_workload_flags(replay: argparse.ArgumentParser) -> None:
    """The workload flags: a synthetic workload, the load mode, the reader's options
    (declared once, in :data:`replay._config.WORKLOAD_OPTIONS`)."""
    groups = {
        name: replay.add_argument_group(title, description)
        for name, (title, description) in WORKLOAD_GROUPS.items()
    }
    for option in WORKLOAD_OPTIONS:
        groups[option.group].add_argument(option.flag, dest=option.key, **option.options)


_read_workload = read_workload
"""The workload a configuration names (a module attribute, so tests can replace it)."""


def _trace_after_slo(args: argparse.Namespace) -> None:
    """``--slo`` takes several items (vLLM's ``ttft:500 tpot:50``), so a TRACE given right
    after it lands among them: the last item, when it is no ``key=ms`` or ``key:ms`` and
    names a file or a bundled dataset, is the TRACE."""
    items = args.slo
    if args.trace is None and items is not None and len(items) > 1:
        last = items[-1]
        if "=" not in last and ":" not in last and resolve_trace(last).exists():
            args.trace = items.pop()


def _replay(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    _trace_after_slo(args)
    configure_from_args(args)
    options = debug_options_from_args(args, parser=args.parser)
    file_values = None
    source = "config"
    if args.config is not None:
        file_values = load_config_file(args.config)
        source = args.config
        # The config.json of an earlier run keeps the command line's settings under "config".
        nested = file_values.get("config")
        if "schema_version" in file_values and isinstance(nested, dict):
            file_values = nested
    overrides: dict[str, Any] = {
        key.name: getattr(args, key.name) for key in RUN_KEYS if key.flag is not None
    }
    overrides["trace"] = args.trace
    overrides["workload"] = {key: getattr(args, key) for key in WORKLOAD_FLAGS}
    config = resolve_config(file_values, overrides, source=source)
    try:
        series = series_from_args(args, output_dir=config.output_dir)
    except PlotExtraMissing as exc:
        raise UsageError(f"simclock replay: error: {exc}") from None
    # Before anything is read or run: an unusable output location must not cost a run.
    if config.export and config.output_dir is None:
        raise ConfigError(f"{config.origin('export')}: needs --output-dir (or output_dir)")
    if "vllm" in config.export and config.token_times == "none":
        raise ConfigError(
            f"{config.origin('export')}: vllm needs token times (--token-times full or runs)"
        )
    check_destinations(
        output_dir=config.output_dir,
        output_files=(
            *OUTPUT_FILES,
            *export_files(config.export),
            *(() if series is None else (SERIES_FILE,)),
        ),
        timeline=options.timeline_path,
    )
    workload = _read_workload(config)
    configured = configured_run(config, workload)
    # With an output directory, records stream to requests.jsonl (a temporary file until the
    # report is written) as requests settle, and none is kept; a run that ends without a
    # report (bad input, an interrupt) leaves nothing behind.
    log = (
        None
        if config.output_dir is None
        else RequestLog.open(config.output_dir, token_times=config.token_times)
    )
    extra: dict[str, Any] = {} if series is None else {"series": series}
    with log if log is not None else contextlib.nullcontext():
        status = EXIT_OK
        failure: str | None = None
        timelines: list[Timeline] = []
        try:
            result = _execute(
                workload,
                options,
                timelines.append,
                **configured.run_options(),
                request_log=log,
                **extra,
            )
        except ReplayFailedError as exc:
            result = exc.result
            status = EXIT_FAILED
            failure = str(exc)
        # The table first, then the report files as a set, then the timeline: whatever fails
        # to be written, what came before it is kept (and the error names the path).
        try:
            if not args.quiet:
                out.write(format_table(result))
                out.flush()
            if failure is not None:
                print(f"simclock replay: {failure}", file=sys.stderr)
            if config.output_dir is not None:
                write_outputs(
                    result,
                    config.output_dir,
                    token_times=config.token_times,
                    request_log=log,
                    exports=cast("tuple[Export, ...]", config.export),
                )
            if timelines and options.timeline_path is not None:
                write_timeline(timelines[0], options.timeline_path)
            if series is not None and config.output_dir is not None:
                write_series_and_plots(
                    series,
                    config.output_dir,
                    end_ns=round(result.meta.virtual_duration_ms * 1_000_000),
                    plots=args.plots,
                )
        except KeyboardInterrupt:
            # The run was over: name the virtual time it reached.
            raise ReplayInterrupted(round(result.meta.virtual_duration_ms * 1_000_000)) from None
    return status


def _execute(
    workload: Workload,
    options: DebugOptions,
    timeline_sink: Callable[[Timeline], None],
    **run_options: Any,
) -> ReplayResult:
    """Replay with :func:`replay.run`, or with the timeline/progress the flags ask for."""
    if options.timeline_path is None and options.progress == "none":
        return run(workload, **run_options)
    return run_observed(workload, options=options, timeline_sink=timeline_sink, **run_options)


EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C (SIGINT): 128 + 2."""
EXIT_TERMINATED = 143
"""Terminated by SIGTERM: 128 + 15."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[list[int]]:
    """While inside, SIGTERM raises ``KeyboardInterrupt`` like Ctrl-C does, so a terminated
    run unwinds the same way (tasks cancelled, files rolled back); yields the signals seen."""
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield received  # signal handlers belong to the main thread
        return
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted(exc: KeyboardInterrupt, *, terminated: bool) -> int:
    """Print the one line of an interrupted command; return 130, or 143 for SIGTERM."""
    if isinstance(exc, ReplayInterrupted):
        where = f" at virtual time {exc.virtual_time_ns / 1e9:.3f} s"
    else:
        where = " before the replay started"
    what = "terminated" if terminated else "interrupted"
    print(f"simclock: {what}{where}", file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    with _terminate_as_interrupt() as received:
        try:
            return _main(argv)
        except KeyboardInterrupt as exc:
            return interrupted(exc, terminated=bool(received))


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            # Report unknown arguments against the subcommand they were given to.
            getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")
        if args.command is None:
            parser.print_help(sys.stdout)
            return EXIT_OK
        status: int = args.handler(args)
        return status
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except simclock.InternalError as exc:
        print(
            f"simclock: internal error: {exc} -- this is a bug in simclock; please report it",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    except (ValueError, OSError) as exc:
        # Bad input: every such error of simclock's packages is a SimulationError leaf that
        # also derives from ValueError; OutputError covers an unwritable output directory.
        if isinstance(exc, simclock.SimulationError | OutputError):
            print(f"simclock replay: error: {_one_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
        return _internal(exc)
    except simclock.SimulationError as exc:
        print(f"simclock replay: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        return _internal(exc)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n"))


def _internal(exc: BaseException) -> int:
    traceback.print_exception(exc, file=sys.stderr)
    print(
        f"simclock: internal error: {type(exc).__name__}: {_one_line(exc)} -- "
        "this is a bug in simclock; please report it",
        file=sys.stderr,
    )
    return EXIT_INTERNAL
