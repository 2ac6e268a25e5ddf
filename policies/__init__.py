"""policies: placement policies as async coroutines, and the context they run in.

A policy is an object whose ``async def run(requests, ctx)`` receives released requests and
places them on engines with ``await ctx.dispatch(request, engine)`` (the two-phase handshake).
Subclass :class:`PlacePolicy` to write ``async def place(request, ctx)`` per request, subclass
:class:`ChoicePolicy` to write ``choose(request, ctx) -> int``, or adapt a plain function with
:func:`from_choice`. The built-ins are :class:`RoundRobin`, :class:`Random`,
:class:`LeastLoaded`, :class:`KVAware` and :class:`SessionAffinity`. :class:`PDPolicy` makes
the two choices of a disaggregated prefill/decode topology with one policy per pool.
"""

from __future__ import annotations

from ._base import BasePolicy as BasePolicy
from ._base import ChoiceFunction as ChoiceFunction
from ._base import ChoicePolicy as ChoicePolicy
from ._base import PlacePolicy as PlacePolicy
from ._base import from_choice as from_choice
from ._builtins import KVAware as KVAware
from ._builtins import LeastLoaded as LeastLoaded
from ._builtins import Random as Random
from ._builtins import RoundRobin as RoundRobin
from ._builtins import SessionAffinity as SessionAffinity
from ._builtins import conversation_key as conversation_key
from ._cluster import ENGINE_CRASHED as ENGINE_CRASHED
from ._cluster import ENGINE_DRAINING as ENGINE_DRAINING
from ._cluster import ENGINE_REMOVED as ENGINE_REMOVED
from ._cluster import ENGINE_STATES as ENGINE_STATES
from ._cluster import EngineFailure as EngineFailure
from ._cluster import InactivePlacement as InactivePlacement
from ._cluster import Membership as Membership
from ._cluster import MemberState as MemberState
from ._exceptions import CommitError as CommitError
from ._exceptions import InvalidWakeupError as InvalidWakeupError
from ._exceptions import PlacementError as PlacementError
from ._exceptions import PolicyError as PolicyError
from ._exceptions import PolicyHookError as PolicyHookError
from ._exceptions import RuntimePoisonedError as RuntimePoisonedError
from ._pd import PD_POLICIES as PD_POLICIES
from ._pd import PDPolicy as PDPolicy
from ._pd import PDPolicyError as PDPolicyError
from ._pd import pd_kv_aware as pd_kv_aware
from ._pd import pd_policy as pd_policy
from ._runtime import EngineHandle as EngineHandle
from ._runtime import Offer as Offer
from ._runtime import Placement as Placement
from ._runtime import Policy as Policy
from ._runtime import PolicyContext as PolicyContext
from ._runtime import PolicyRuntime as PolicyRuntime
from ._runtime import RequestStatus as RequestStatus
from ._runtime import RequestStream as RequestStream
from ._runtime import policy_name as policy_name
from ._stale import Staleness as Staleness
from ._stale import StaleView as StaleView

__all__ = (
    "ENGINE_CRASHED",
    "ENGINE_DRAINING",
    "ENGINE_REMOVED",
    "ENGINE_STATES",
    "PD_POLICIES",
    "BasePolicy",
    "ChoiceFunction",
    "ChoicePolicy",
    "CommitError",
    "EngineFailure",
    "EngineHandle",
    "InactivePlacement",
    "InvalidWakeupError",
    "KVAware",
    "LeastLoaded",
    "MemberState",
    "Membership",
    "Offer",
    "PDPolicy",
    "PDPolicyError",
    "PlacePolicy",
    "Placement",
    "PlacementError",
    "Policy",
    "PolicyContext",
    "PolicyError",
    "PolicyHookError",
    "PolicyRuntime",
    "Random",
    "RequestStatus",
    "RequestStream",
    "RoundRobin",
    "RuntimePoisonedError",
    "SessionAffinity",
    "StaleView",
    "Staleness",
    "conversation_key",
    "from_choice",
    "pd_kv_aware",
    "pd_policy",
    "policy_name",
)
