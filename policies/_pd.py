"""Placement policies for disaggregated prefill/decode (REFERENCE-engine §6).

A P/D policy makes two choices per request: a prefill engine (from the prefill pool) and a
decode engine (from the decode pool). :class:`PDPolicy` holds one ordinary policy per pool:
each side sees only its own pool, as if it were an aggregated topology (``ctx.engines`` are
the views of that pool's engines accepting placements, and a choice is an engine's stable
id, ``view.id``), so every aggregated built-in — and any user policy — can make either
choice.

When each choice is made depends on the topology's placement order. Source-first (default):
the prefill side places a request when it is released, and the decode side receives it when its
prefill completes (in ``(prefill_done, prefill worker index)`` order). Destination-first: both
engines are chosen when the request is released; the decode side's ``choose`` is then called
from inside the prefill placement, so it must be a choice policy.
"""

from __future__ import annotations

from typing import Any

import attrs

from loadgen import Request

from ._base import ChoicePolicy
from ._builtins import KVAware, LeastLoaded, Random, RoundRobin, SessionAffinity
from ._exceptions import PolicyError
from ._runtime import Policy, PolicyContext, RequestStream, policy_name

__all__ = ("PD_POLICIES", "PDPolicy", "PDPolicyError", "pd_kv_aware", "pd_policy")


class PDPolicyError(PolicyError, ValueError):
    """A P/D policy is misconfigured (unknown built-in name, a decode side without ``choose``
    in destination-first placement)."""


def _default_name(instance: PDPolicy) -> str:
    return f"pd({policy_name(instance.prefill)},{policy_name(instance.decode)})"


@attrs.define(eq=False)
class PDPolicy:
    """A P/D policy: one policy per pool.

    Each side is an ordinary policy (anything :class:`policies.Policy` accepts, e.g. a
    :class:`~policies.ChoicePolicy`) that places requests on its own pool; its hooks
    (``on_committed``, ``on_aborted``, ``on_finished``, ``on_kv_event``) concern that pool.
    Give each side its own object: policies keep state.

    Attributes:
        prefill: chooses the prefill engine (default :class:`~policies.RoundRobin`).
        decode: chooses the decode engine (default :class:`~policies.RoundRobin`).
        name: the policy's name; default ``"pd(<prefill name>,<decode name>)"``.

    Raises:
        PDPolicyError: ``prefill`` and ``decode`` are the same object.
    """

    prefill: Policy = attrs.field(factory=RoundRobin, kw_only=True)
    decode: Policy = attrs.field(factory=RoundRobin, kw_only=True)
    name: str = attrs.field(default="", kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.prefill is self.decode:
            raise PDPolicyError(
                "PDPolicy: prefill and decode must be distinct policy objects "
                "(policies keep state); build one per pool"
            )
        if not self.name:
            self.name = _default_name(self)

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        """Refuse to place requests as an aggregated policy.

        A P/D policy runs on a disaggregated topology (``replay.Disaggregated``), which runs
        each side on its own pool; this method exists so a :class:`PDPolicy` is a
        :class:`policies.Policy` wherever one is expected.

        Raises:
            PDPolicyError: always.
        """
        raise PDPolicyError(
            f"PDPolicy {self.name!r} needs a disaggregated topology (replay.Disaggregated); "
            "it cannot place requests on an aggregated one"
        )

    def choose_decode(self, request: Request, ctx: PolicyContext) -> int:
        """Destination-first: return the id of ``request``'s decode engine.

        Calls ``decode.choose(request, ctx)`` with the decode pool's context.

        Raises:
            PDPolicyError: the decode side has no ``choose`` method.
        """
        choose = getattr(self.decode, "choose", None)
        if not callable(choose):
            raise PDPolicyError(
                f"PDPolicy {self.name!r}: destination-first placement needs a decode side with "
                f"choose(request, ctx); {policy_name(self.decode)!r} has none"
            )
        position = choose(request, ctx)
        return int(position)


def pd_kv_aware(
    *, prefill_weight: float = 1.0, temperature: float = 0.0, name: str = "kv_aware"
) -> PDPolicy:
    """The P/D prefix-cache-aware policy.

    Prefill engines are scored by prefix overlap with their queued prefill work
    (:class:`~policies.KVAware`: ``prefill_weight * (outstanding_prefill + P - overlap)``;
    a prefill engine has no decode work), decode engines by load
    (:class:`~policies.LeastLoaded`: outstanding prefill + decode tokens, where a decode
    engine's prefill tokens are the prompts of the requests still waiting for their KV).

    Args:
        prefill_weight: passed to :class:`~policies.KVAware`.
        temperature: passed to :class:`~policies.KVAware`.
        name: the policy's name.
    """
    return PDPolicy(
        prefill=KVAware(prefill_weight=prefill_weight, temperature=temperature),
        decode=LeastLoaded(),
        name=name,
    )


PD_POLICIES: dict[str, str] = {
    "round_robin": "RoundRobin on each pool",
    "random": "Random on each pool",
    "least_loaded": "LeastLoaded on each pool",
    "session_affinity": "SessionAffinity on each pool",
    "kv_aware": "KVAware on the prefill pool, LeastLoaded on the decode pool",
}
"""The built-in P/D policies by name, with what each applies per pool."""

_PER_POOL: dict[str, type[ChoicePolicy]] = {
    "round_robin": RoundRobin,
    "random": Random,
    "least_loaded": LeastLoaded,
    "session_affinity": SessionAffinity,
}


def pd_policy(name: str, **options: Any) -> PDPolicy:
    """Return a fresh built-in P/D policy by name (see :data:`PD_POLICIES`).

    ``"round_robin"``, ``"random"``, ``"least_loaded"`` and ``"session_affinity"`` apply the
    aggregated built-in of that name to each pool, built with ``options`` (a
    ``session_affinity`` ``fallback`` may be given by name: ``"round_robin"``, ``"random"``,
    ``"least_loaded"`` or ``"kv_aware"``); ``"kv_aware"`` is :func:`pd_kv_aware` with
    ``options``.

    Raises:
        PDPolicyError: an unknown name or fallback name.
        TypeError: an option the policy does not take.
    """
    if name == "kv_aware":
        return pd_kv_aware(**options)
    factory = _PER_POOL.get(name)
    if factory is None:
        known = ", ".join(PD_POLICIES)
        raise PDPolicyError(f"unknown P/D policy {name!r}; known: {known}")

    def build() -> ChoicePolicy:
        kwargs = dict(options)
        fallback = kwargs.get("fallback")
        if isinstance(fallback, str):
            fallbacks: dict[str, type[ChoicePolicy]] = {
                "round_robin": RoundRobin,
                "random": Random,
                "least_loaded": LeastLoaded,
                "kv_aware": KVAware,
            }
            if fallback not in fallbacks:
                known = ", ".join(fallbacks)
                raise PDPolicyError(f"fallback: unknown policy {fallback!r}; known: {known}")
            kwargs["fallback"] = fallbacks[fallback]()
        return factory(**kwargs)

    return PDPolicy(prefill=build(), decode=build(), name=name)
