"""replay: topologies, the runner, the report and the command line.

``replay.run`` replays a workload through a topology of engines under a policy and returns a
:class:`ReplayResult`; ``replay.finalize`` turns any run's journal into one, and
``replay.write_outputs`` writes it. ``simclock replay`` is the command line over all of it.
"""

from __future__ import annotations

from ._config import POLICIES as POLICIES
from ._config import TIMINGS as TIMINGS
from ._config import ComponentSpec as ComponentSpec
from ._config import ConfigError as ConfigError
from ._config import ReplayConfig as ReplayConfig
from ._config import kv_blocks_for as kv_blocks_for
from ._config import load_config_file as load_config_file
from ._config import parse_spec as parse_spec
from ._config import resolve_config as resolve_config
from ._exceptions import ReplayError as ReplayError
from ._exceptions import ReplayFailedError as ReplayFailedError
from ._exceptions import WorkloadValidationError as WorkloadValidationError
from ._metrics import PERCENTILES as PERCENTILES
from ._metrics import SLO as SLO
from ._metrics import Distribution as Distribution
from ._metrics import SLOError as SLOError
from ._output import OUTPUT_FILES as OUTPUT_FILES
from ._output import OutputError as OutputError
from ._output import config_json as config_json
from ._output import format_table as format_table
from ._output import request_json as request_json
from ._output import summary_json as summary_json
from ._output import write_outputs as write_outputs
from ._prepare import PreparedWorkload as PreparedWorkload
from ._prepare import normalize_block_ids as normalize_block_ids
from ._prepare import prepare as prepare
from ._prepare import validate_requests as validate_requests
from ._progress import Progress as Progress
from ._progress import ProgressMode as ProgressMode
from ._progress import format_virtual_time as format_virtual_time
from ._progress import make_progress as make_progress
from ._report import SCHEMA_VERSION as SCHEMA_VERSION
from ._report import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._report import AdmissionRecord as AdmissionRecord
from ._report import EngineSummary as EngineSummary
from ._report import EngineUsage as EngineUsage
from ._report import EventCounter as EventCounter
from ._report import Goodput as Goodput
from ._report import Handoff as Handoff
from ._report import LifecycleEvidence as LifecycleEvidence
from ._report import ReplayResult as ReplayResult
from ._report import RequestRecord as RequestRecord
from ._report import RunMeta as RunMeta
from ._report import Summary as Summary
from ._report import TerminalStatus as TerminalStatus
from ._report import finalize as finalize
from ._runner import SEED_STREAMS as SEED_STREAMS
from ._runner import RunJournal as RunJournal
from ._runner import run as run
from ._timeline import EngineCounters as EngineCounters
from ._timeline import Timeline as Timeline
from ._timeline import TimelineFilter as TimelineFilter
from ._timeline import TimelineRecorder as TimelineRecorder
from ._timeline import timeline_from_events as timeline_from_events
from ._topology import Aggregated as Aggregated
from ._topology import Topology as Topology

__all__ = (
    "OUTPUT_FILES",
    "PERCENTILES",
    "POLICIES",
    "SCHEMA_VERSION",
    "SEED_STREAMS",
    "SLO",
    "TERMINAL_STATUSES",
    "TIMINGS",
    "AdmissionRecord",
    "Aggregated",
    "ComponentSpec",
    "ConfigError",
    "Distribution",
    "EngineCounters",
    "EngineSummary",
    "EngineUsage",
    "EventCounter",
    "Goodput",
    "Handoff",
    "LifecycleEvidence",
    "OutputError",
    "PreparedWorkload",
    "Progress",
    "ProgressMode",
    "ReplayConfig",
    "ReplayError",
    "ReplayFailedError",
    "ReplayResult",
    "RequestRecord",
    "RunJournal",
    "RunMeta",
    "SLOError",
    "Summary",
    "TerminalStatus",
    "Timeline",
    "TimelineFilter",
    "TimelineRecorder",
    "Topology",
    "WorkloadValidationError",
    "config_json",
    "finalize",
    "format_table",
    "format_virtual_time",
    "kv_blocks_for",
    "load_config_file",
    "make_progress",
    "normalize_block_ids",
    "parse_spec",
    "prepare",
    "request_json",
    "resolve_config",
    "run",
    "summary_json",
    "timeline_from_events",
    "validate_requests",
    "write_outputs",
)
