"""loadgen: the workload — request records, trace readers, synthetic and agentic load."""

from __future__ import annotations

from ._agentic import read_agentic as read_agentic
from ._compressed import open_binary as open_binary
from ._csvformats import read_azure as read_azure
from ._csvformats import read_burstgpt as read_burstgpt
from ._csvformats import read_vidur as read_vidur
from ._datasets import DATASETS as DATASETS
from ._datasets import Dataset as Dataset
from ._datasets import dataset as dataset
from ._datasets import dataset_path as dataset_path
from ._datasets import read_dataset as read_dataset
from ._distributions import ArrivalProcess as ArrivalProcess
from ._distributions import Constant as Constant
from ._distributions import Exponential as Exponential
from ._distributions import Fixed as Fixed
from ._distributions import Gamma as Gamma
from ._distributions import LengthDistribution as LengthDistribution
from ._distributions import Lognormal as Lognormal
from ._distributions import Poisson as Poisson
from ._distributions import Uniform as Uniform
from ._distributions import parse_arrivals as parse_arrivals
from ._distributions import parse_distribution as parse_distribution
from ._driver import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._driver import Driver as Driver
from ._driver import DriverReport as DriverReport
from ._driver import IdleShift as IdleShift
from ._driver import PlayOutcome as PlayOutcome
from ._driver import RequestOutcome as RequestOutcome
from ._exceptions import SLOError as SLOError
from ._exceptions import TraceFormatError as TraceFormatError
from ._exceptions import WorkloadConfigError as WorkloadConfigError
from ._exceptions import WorkloadRunError as WorkloadRunError
from ._intern import ContentInterner as ContentInterner
from ._lineage import LineageResult as LineageResult
from ._lineage import derive_lineage as derive_lineage
from ._lineage import lineage_from_json as lineage_from_json
from ._lineage import lineage_to_json as lineage_to_json
from ._modes import LoadMode as LoadMode
from ._modes import Profile as Profile
from ._mooncake import read_mooncake as read_mooncake
from ._mooncake import read_mooncake_delta as read_mooncake_delta
from ._outcomes import Outcomes as Outcomes
from ._outcomes import TerminalStatus as TerminalStatus
from ._plays import Snapshot as Snapshot
from ._plays import instance_requests as instance_requests
from ._plays import preparation_requests as preparation_requests
from ._plays import snapshot_cut as snapshot_cut
from ._plays import snapshot_u as snapshot_u
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
from ._slo import SLO as SLO
from ._stats import LengthStats as LengthStats
from ._stats import WorkloadStats as WorkloadStats
from ._stats import nominal_release_ms as nominal_release_ms
from ._stats import workload_stats as workload_stats
from ._synthetic import EmpiricalLengths as EmpiricalLengths
from ._synthetic import SyntheticSpec as SyntheticSpec
from ._synthetic import generate_synthetic as generate_synthetic
from ._synthetic import parse_synthetic as parse_synthetic
from ._synthetic_table import SyntheticRequests as SyntheticRequests
from ._weka import read_weka as read_weka
from ._workload import Play as Play
from ._workload import SubagentGroup as SubagentGroup
from ._workload import Tolerated as Tolerated
from ._workload import Workload as Workload

__all__ = (
    "DATASETS",
    "FORMATS",
    "SLO",
    "TERMINAL_STATUSES",
    "ArrivalProcess",
    "ArrivalRule",
    "Constant",
    "ContentInterner",
    "Dataset",
    "Dep",
    "Driver",
    "DriverReport",
    "EmpiricalLengths",
    "Exponential",
    "Fixed",
    "FormatChoice",
    "Gamma",
    "Identity",
    "IdleShift",
    "LengthDistribution",
    "LengthStats",
    "Lineage",
    "LineageResult",
    "LoadMode",
    "Lognormal",
    "Outcomes",
    "Play",
    "PlayOutcome",
    "Poisson",
    "Profile",
    "Request",
    "RequestOutcome",
    "SLOError",
    "Snapshot",
    "SubagentGroup",
    "SyntheticRequests",
    "SyntheticSpec",
    "TerminalStatus",
    "Tolerated",
    "TraceFormatError",
    "Uniform",
    "Workload",
    "WorkloadConfigError",
    "WorkloadRunError",
    "WorkloadStats",
    "as_hash_ids",
    "dataset",
    "dataset_path",
    "derive_lineage",
    "detect_format",
    "generate_synthetic",
    "instance_requests",
    "lineage_from_json",
    "lineage_to_json",
    "nominal_release_ms",
    "open_binary",
    "parse_arrivals",
    "parse_distribution",
    "parse_synthetic",
    "preparation_requests",
    "read_agentic",
    "read_azure",
    "read_burstgpt",
    "read_dataset",
    "read_mooncake",
    "read_mooncake_delta",
    "read_trace",
    "read_vidur",
    "read_weka",
    "snapshot_cut",
    "snapshot_u",
    "workload_stats",
)
