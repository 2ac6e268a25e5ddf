"""replay: topologies, runs, reports and debugging.

``replay.run`` replays a workload through a topology of engines under a policy and returns a
:class:`ReplayResult` (``replay.Run`` is the same replay as an object to advance);
``replay.finalize`` turns any run's journal into one, and ``replay.write_outputs`` writes it.
``simclock replay`` is the command line over all of it; its configuration (files, flags, name
registries) is :mod:`replay.config`. ``replay.sweep`` runs a grid of such configurations
through an executor (local processes or Ray) and writes one table of their metrics.
"""

from __future__ import annotations

from ._autoscale import Autoscaler as Autoscaler
from ._autoscale import AutoscalerContext as AutoscalerContext
from ._autoscale import AutoscalerError as AutoscalerError
from ._autoscale import EngineMetrics as EngineMetrics
from ._autoscale import PoolMetrics as PoolMetrics
from ._autoscale import SLOWindow as SLOWindow
from ._autoscalers import AUTOSCALERS as AUTOSCALERS
from ._autoscalers import HPA as HPA
from ._autoscalers import HPA_METRICS as HPA_METRICS
from ._autoscalers import Recommendation as Recommendation
from ._autoscalers import SLOPlanner as SLOPlanner
from ._cluster import CLUSTER_ACTIONS as CLUSTER_ACTIONS
from ._cluster import CLUSTER_STATES as CLUSTER_STATES
from ._cluster import Cluster as Cluster
from ._cluster import ClusterAction as ClusterAction
from ._cluster import ClusterError as ClusterError
from ._cluster import ClusterEvent as ClusterEvent
from ._cluster import ClusterState as ClusterState
from ._cluster import ElasticRuntime as ElasticRuntime
from ._cluster import EngineInterval as EngineInterval
from ._cluster import EngineSpec as EngineSpec
from ._cluster import FailingRuntime as FailingRuntime
from ._compare import CompareRow as CompareRow
from ._compare import Comparison as Comparison
from ._compare import compare as compare
from ._cost import CostSummary as CostSummary
from ._cost import EngineCount as EngineCount
from ._exceptions import ReplayError as ReplayError
from ._exceptions import ReplayFailedError as ReplayFailedError
from ._exceptions import ReplayInterrupted as ReplayInterrupted
from ._exceptions import WorkloadValidationError as WorkloadValidationError
from ._executors import Executor as Executor
from ._executors import LocalExecutor as LocalExecutor
from ._executors import RayExecutor as RayExecutor
from ._explore import INVARIANTS as INVARIANTS
from ._explore import Assertion as Assertion
from ._explore import ExploreError as ExploreError
from ._explore import ExploreResult as ExploreResult
from ._explore import ExploreRun as ExploreRun
from ._explore import Violation as Violation
from ._explore import explore as explore
from ._export import EXPORT_FILES as EXPORT_FILES
from ._export import EXPORTS as EXPORTS
from ._faults import ON_CRASH as ON_CRASH
from ._faults import EngineCrash as EngineCrash
from ._faults import EngineDrain as EngineDrain
from ._faults import FaultError as FaultError
from ._faults import Faults as Faults
from ._faults import OnCrash as OnCrash
from ._faults import TransferFailure as TransferFailure
from ._inspect import format_workload_stats as format_workload_stats
from ._inspect import inspect_trace as inspect_trace
from ._inspect import workload_stats_json as workload_stats_json
from ._metrics import PERCENTILES as PERCENTILES
from ._metrics import SLO as SLO
from ._metrics import Distribution as Distribution
from ._metrics import SLOError as SLOError
from ._output import OUTPUT_FILES as OUTPUT_FILES
from ._output import OutputError as OutputError
from ._output import RequestLog as RequestLog
from ._output import config_json as config_json
from ._output import format_table as format_table
from ._output import request_json as request_json
from ._output import summary_json as summary_json
from ._output import write_outputs as write_outputs
from ._pd import TRANSFER_FAILED as TRANSFER_FAILED
from ._pd import PDRuntime as PDRuntime
from ._pd_figure import handoff_timeline_svg as handoff_timeline_svg
from ._pd_metrics import PDPhases as PDPhases
from ._pd_metrics import pd_phases as pd_phases
from ._pd_options import pd_topology_from_options as pd_topology_from_options
from ._pd_topology import PLACEMENT_ORDERS as PLACEMENT_ORDERS
from ._pd_topology import TRANSFER_MODES as TRANSFER_MODES
from ._pd_topology import Disaggregated as Disaggregated
from ._pd_topology import KVLink as KVLink
from ._pd_topology import PDConfigError as PDConfigError
from ._pd_topology import PlacementOrder as PlacementOrder
from ._pd_topology import TransferMode as TransferMode
from ._plot import PlotExtraMissing as PlotExtraMissing
from ._plot import PlotResult as PlotResult
from ._plot import plot as plot
from ._plot import plot_sweep as plot_sweep
from ._plot_data import RunDataError as RunDataError
from ._prepare import PreparedWorkload as PreparedWorkload
from ._prepare import normalize_block_ids as normalize_block_ids
from ._prepare import prepare as prepare
from ._prepare import validate_requests as validate_requests
from ._progress import Progress as Progress
from ._progress import ProgressMode as ProgressMode
from ._progress import format_virtual_time as format_virtual_time
from ._progress import make_progress as make_progress
from ._records import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._records import AdmissionRecord as AdmissionRecord
from ._records import FaultHit as FaultHit
from ._records import Handoff as Handoff
from ._records import RequestRecord as RequestRecord
from ._records import TerminalStatus as TerminalStatus
from ._report import PLAY_OUTCOMES as PLAY_OUTCOMES
from ._report import SCHEMA_VERSION as SCHEMA_VERSION
from ._report import EngineSummary as EngineSummary
from ._report import EngineUsage as EngineUsage
from ._report import EventCounter as EventCounter
from ._report import Goodput as Goodput
from ._report import LifecycleEvidence as LifecycleEvidence
from ._report import PlaySummary as PlaySummary
from ._report import ReplayResult as ReplayResult
from ._report import RunMeta as RunMeta
from ._report import ServedEngineSummary as ServedEngineSummary
from ._report import Summary as Summary
from ._report import finalize as finalize
from ._run import Run as Run
from ._run import RunOptions as RunOptions
from ._run import run as run
from ._runner import SEED_STREAMS as SEED_STREAMS
from ._runner import ClusterTask as ClusterTask
from ._runner import RunJournal as RunJournal
from ._series import SERIES_FILE as SERIES_FILE
from ._series import EngineSeries as EngineSeries
from ._series import SeriesError as SeriesError
from ._series import SeriesRecorder as SeriesRecorder
from ._series import read_series as read_series
from ._session import ReplaySession as ReplaySession
from ._session_state import Breakpoint as Breakpoint
from ._session_state import EngineState as EngineState
from ._session_state import PolicyState as PolicyState
from ._session_state import RequestState as RequestState
from ._session_state import Stop as Stop
from ._session_state import describe_event as describe_event
from ._session_state import format_ns as format_ns
from ._sweep import SweepResult as SweepResult
from ._sweep import SweepRow as SweepRow
from ._sweep import sweep as sweep
from ._sweep_spec import SweepRun as SweepRun
from ._sweep_spec import SweepSpec as SweepSpec
from ._sweep_spec import load_sweep as load_sweep
from ._timeline import EngineCounters as EngineCounters
from ._timeline import Timeline as Timeline
from ._timeline import TimelineFilter as TimelineFilter
from ._timeline import TimelineRecorder as TimelineRecorder
from ._timeline import timeline_from_events as timeline_from_events
from ._token_times_ms import TokenTimesMs as TokenTimesMs
from ._topology import Aggregated as Aggregated
from ._topology import Runtime as Runtime
from ._topology import Topology as Topology

__all__ = (
    "AUTOSCALERS",
    "CLUSTER_ACTIONS",
    "CLUSTER_STATES",
    "EXPORTS",
    "EXPORT_FILES",
    "HPA",
    "HPA_METRICS",
    "INVARIANTS",
    "ON_CRASH",
    "OUTPUT_FILES",
    "PERCENTILES",
    "PLACEMENT_ORDERS",
    "PLAY_OUTCOMES",
    "SCHEMA_VERSION",
    "SEED_STREAMS",
    "SERIES_FILE",
    "SLO",
    "TERMINAL_STATUSES",
    "TRANSFER_FAILED",
    "TRANSFER_MODES",
    "AdmissionRecord",
    "Aggregated",
    "Assertion",
    "Autoscaler",
    "AutoscalerContext",
    "AutoscalerError",
    "Breakpoint",
    "Cluster",
    "ClusterAction",
    "ClusterError",
    "ClusterEvent",
    "ClusterState",
    "ClusterTask",
    "CompareRow",
    "Comparison",
    "CostSummary",
    "Disaggregated",
    "Distribution",
    "ElasticRuntime",
    "EngineCount",
    "EngineCounters",
    "EngineCrash",
    "EngineDrain",
    "EngineInterval",
    "EngineMetrics",
    "EngineSeries",
    "EngineSpec",
    "EngineState",
    "EngineSummary",
    "EngineUsage",
    "EventCounter",
    "Executor",
    "ExploreError",
    "ExploreResult",
    "ExploreRun",
    "FailingRuntime",
    "FaultError",
    "FaultHit",
    "Faults",
    "Goodput",
    "Handoff",
    "KVLink",
    "LifecycleEvidence",
    "LocalExecutor",
    "OnCrash",
    "OutputError",
    "PDConfigError",
    "PDPhases",
    "PDRuntime",
    "PlacementOrder",
    "PlaySummary",
    "PlotExtraMissing",
    "PlotResult",
    "PolicyState",
    "PoolMetrics",
    "PreparedWorkload",
    "Progress",
    "ProgressMode",
    "RayExecutor",
    "Recommendation",
    "ReplayError",
    "ReplayFailedError",
    "ReplayInterrupted",
    "ReplayResult",
    "ReplaySession",
    "RequestLog",
    "RequestRecord",
    "RequestState",
    "Run",
    "RunDataError",
    "RunJournal",
    "RunMeta",
    "RunOptions",
    "Runtime",
    "SLOError",
    "SLOPlanner",
    "SLOWindow",
    "SeriesError",
    "SeriesRecorder",
    "ServedEngineSummary",
    "Stop",
    "Summary",
    "SweepResult",
    "SweepRow",
    "SweepRun",
    "SweepSpec",
    "TerminalStatus",
    "Timeline",
    "TimelineFilter",
    "TimelineRecorder",
    "TokenTimesMs",
    "Topology",
    "TransferFailure",
    "TransferMode",
    "Violation",
    "WorkloadValidationError",
    "compare",
    "config_json",
    "describe_event",
    "explore",
    "finalize",
    "format_ns",
    "format_table",
    "format_virtual_time",
    "format_workload_stats",
    "handoff_timeline_svg",
    "inspect_trace",
    "load_sweep",
    "make_progress",
    "normalize_block_ids",
    "pd_phases",
    "pd_topology_from_options",
    "plot",
    "plot_sweep",
    "prepare",
    "read_series",
    "request_json",
    "run",
    "summary_json",
    "sweep",
    "timeline_from_events",
    "validate_requests",
    "workload_stats_json",
    "write_outputs",
)
