"""replay: topologies, the runner, the report and the command line."""

from __future__ import annotations

from ._metrics import PERCENTILES as PERCENTILES
from ._metrics import SLO as SLO
from ._metrics import Distribution as Distribution
from ._metrics import SLOError as SLOError
from ._report import SCHEMA_VERSION as SCHEMA_VERSION
from ._report import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._report import AdmissionRecord as AdmissionRecord
from ._report import EngineSummary as EngineSummary
from ._report import EngineUsage as EngineUsage
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
    "PERCENTILES",
    "SCHEMA_VERSION",
    "SLO",
    "TERMINAL_STATUSES",
    "AdmissionRecord",
    "Distribution",
    "EngineSummary",
    "EngineUsage",
    "Goodput",
    "Handoff",
    "JournalLike",
    "LifecycleEvidence",
    "ReplayResult",
    "RequestRecord",
    "RunMeta",
    "SLOError",
    "Summary",
    "TerminalStatus",
    "TraceLike",
    "finalize",
)
