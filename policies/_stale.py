"""Stale information: engine views and KV events that reach a policy late or periodically.

A :class:`Staleness` given to a :class:`policies.PolicyRuntime` changes what its policy sees,
nothing else (engines run exactly as before):

1. ``view_delay_ns = d``: every view in ``ctx.engines`` (and ``ctx.view``) reads the engine's
   load as it was at ``t - d`` (an engine that joined after ``t - d`` reads as empty).
2. ``view_period_ns = p``: views refresh on a period: they read the engine as it was at the
   last multiple of ``p`` (at or before ``t - d`` with both).
3. ``kv_event_delay_ns = k``: each KV event reaches ``on_kv_event`` ``k`` after the engine
   published it (in publication order), and ``prefix_overlap`` answers from the events
   delivered so far.

The load a stale view reads is ``waiting_count``, ``running_count``,
``outstanding_prefill_tokens``, ``outstanding_decode_tokens``, ``kv_blocks_free``,
``kv_blocks_used`` and ``pending_offers``; its identity and configuration (id, role, block
size, timing, config) are the engine's own. Its estimates (``estimate``,
``queueing_delay_ms``, ``prefill_time_ms``, ``expected_prefix_overlap``, ``pass_in_flight``)
read the engine now: they are the engine's answers to an offer, not monitoring data.

Snapshots of the load are taken only when a staleness is set: at every pass commit (engines
then step one pass at a time, which gives the same results) and after every change the
runtime makes (offer, commit, abort, crash).
"""

from __future__ import annotations

import attrs

__all__ = ("Staleness",)


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name}: must be an int >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Staleness:
    """How late a policy's information is (see the module docstring).

    Attributes:
        view_delay_ns: views show each engine as it was this long ago.
        view_period_ns: views refresh on this period (0: continuously).
        kv_event_delay_ns: KV events (and ``prefix_overlap``) lag by this much.
    """

    view_delay_ns: int = attrs.field(default=0, validator=_non_negative)
    view_period_ns: int = attrs.field(default=0, validator=_non_negative)
    kv_event_delay_ns: int = attrs.field(default=0, validator=_non_negative)

    @property
    def views_lag(self) -> bool:
        """Whether views lag (a delay or a period is set)."""
        return bool(self.view_delay_ns or self.view_period_ns)
