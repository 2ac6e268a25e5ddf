"""loadgen: the workload — request records, trace readers, synthetic and agentic load."""

from __future__ import annotations

from ._request import ArrivalRule as ArrivalRule
from ._request import Dep as Dep
from ._request import Identity as Identity
from ._request import Lineage as Lineage
from ._request import Request as Request
from ._request import as_hash_ids as as_hash_ids

__all__ = ("ArrivalRule", "Dep", "Identity", "Lineage", "Request", "as_hash_ids")
