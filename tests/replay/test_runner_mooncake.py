"""End to end: every request of the real Mooncake conversation trace under round robin and
kv_aware, and kv_aware reuses more prefix tokens (the set-up is in ``mooncake_e2e``).

The other built-in policies are in ``test_runner_mooncake_others.py``: one replay per policy,
split over two files so that a two-worker test run replays them side by side.
"""

from __future__ import annotations

import pytest

from tests.replay.mooncake_e2e import check_every_request_reaches_a_terminal_state, replay


@pytest.mark.parametrize("name", ["round_robin", "kv_aware"])
def test_every_mooncake_request_reaches_a_terminal_state(name: str) -> None:
    check_every_request_reaches_a_terminal_state(name)


def test_kv_aware_reuses_more_prefix_tokens_than_round_robin() -> None:
    rr = replay("round_robin")
    kv = replay("kv_aware")
    reused_rr = sum(r.reused_input_tokens for r in rr.requests)
    reused_kv = sum(r.reused_input_tokens for r in kv.requests)
    assert reused_kv > reused_rr * 1.2
    assert kv.summary.prefix_reuse_ratio > rr.summary.prefix_reuse_ratio
