"""loadgen: the workload — request records, trace readers, synthetic and agentic load."""

from __future__ import annotations

from ._agentic import read_agentic as read_agentic
from ._csvformats import read_azure as read_azure
from ._csvformats import read_burstgpt as read_burstgpt
from ._csvformats import read_vidur as read_vidur
from ._exceptions import TraceFormatError as TraceFormatError
from ._exceptions import WorkloadConfigError as WorkloadConfigError
from ._exceptions import WorkloadRunError as WorkloadRunError
from ._intern import ContentInterner as ContentInterner
from ._lineage import LineageResult as LineageResult
from ._lineage import derive_lineage as derive_lineage
from ._lineage import lineage_from_json as lineage_from_json
from ._lineage import lineage_to_json as lineage_to_json
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
from ._stats import LengthStats as LengthStats
from ._stats import WorkloadStats as WorkloadStats
from ._stats import nominal_release_ms as nominal_release_ms
from ._stats import workload_stats as workload_stats
from ._weka import read_weka as read_weka
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
    "LengthStats",
    "Lineage",
    "LineageResult",
    "Play",
    "Request",
    "SubagentGroup",
    "Tolerated",
    "TraceFormatError",
    "Workload",
    "WorkloadConfigError",
    "WorkloadRunError",
    "WorkloadStats",
    "as_hash_ids",
    "derive_lineage",
    "detect_format",
    "lineage_from_json",
    "lineage_to_json",
    "nominal_release_ms",
    "read_agentic",
    "read_azure",
    "read_burstgpt",
    "read_mooncake",
    "read_mooncake_delta",
    "read_trace",
    "read_vidur",
    "read_weka",
    "workload_stats",
)
