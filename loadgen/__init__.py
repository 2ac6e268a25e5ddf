"""loadgen: the workload — request records, trace readers, synthetic and agentic load."""

from __future__ import annotations

from ._exceptions import TraceFormatError as TraceFormatError
from ._exceptions import WorkloadConfigError as WorkloadConfigError
from ._exceptions import WorkloadRunError as WorkloadRunError
from ._intern import ContentInterner as ContentInterner
from ._mooncake import read_mooncake as read_mooncake
from ._mooncake import read_mooncake_delta as read_mooncake_delta
from ._read import FORMATS as FORMATS
from ._read import FormatChoice as FormatChoice
from ._read import detect_format as detect_format
from ._read import read_trace as read_trace
from ._request import ArrivalRule as ArrivalRule
from ._request import Dep as Dep
from ._request import Identity as Identity
from ._request import Lineage as Lineage
from ._request import Request as Request
from ._request import as_hash_ids as as_hash_ids
from ._workload import Play as Play
from ._workload import SubagentGroup as SubagentGroup
from ._workload import Tolerated as Tolerated
from ._workload import Workload as Workload

__all__ = (
    "FORMATS",
    "ArrivalRule",
    "ContentInterner",
    "Dep",
    "FormatChoice",
    "Identity",
    "Lineage",
    "Play",
    "Request",
    "SubagentGroup",
    "Tolerated",
    "TraceFormatError",
    "Workload",
    "WorkloadConfigError",
    "WorkloadRunError",
    "as_hash_ids",
    "detect_format",
    "read_mooncake",
    "read_mooncake_delta",
    "read_trace",
)
