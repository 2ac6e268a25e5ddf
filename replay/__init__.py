"""replay: topologies, the runner, the report and the command line."""

from __future__ import annotations

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
from ._report import SCHEMA_VERSION as SCHEMA_VERSION
from ._report import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._report import AdmissionRecord as AdmissionRecord
from ._report import EngineSummary as EngineSummary
from ._report import EngineUsage as EngineUsage
from ._report import EventCounter as EventCounter
from ._report import Goodput as Goodput
from ._report import Handoff as Handoff
from ._report import JournalLike as JournalLike
from ._report import LifecycleEvidence as LifecycleEvidence
from ._report import ReplayResult as ReplayResult
from ._report import RequestRecord as RequestRecord
from ._report import RunMeta as RunMeta
from ._report import Summary as Summary
from ._report import TerminalStatus as TerminalStatus
from ._report import TraceLike as TraceLike
from ._report import finalize as finalize

__all__ = (
    "OUTPUT_FILES",
    "PERCENTILES",
    "SCHEMA_VERSION",
    "SLO",
    "TERMINAL_STATUSES",
    "AdmissionRecord",
    "Distribution",
    "EngineSummary",
    "EngineUsage",
    "EventCounter",
    "Goodput",
    "Handoff",
    "JournalLike",
    "LifecycleEvidence",
    "OutputError",
    "ReplayResult",
    "RequestRecord",
    "RunMeta",
    "SLOError",
    "Summary",
    "TerminalStatus",
    "TraceLike",
    "config_json",
    "finalize",
    "format_table",
    "request_json",
    "summary_json",
    "write_outputs",
)
