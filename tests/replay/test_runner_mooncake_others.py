"""End to end: every request of the real Mooncake conversation trace under random,
least_loaded and session_affinity (the set-up is in ``mooncake_e2e``)."""

from __future__ import annotations

import pytest

from tests.replay.mooncake_e2e import check_every_request_reaches_a_terminal_state


@pytest.mark.parametrize("name", ["random", "least_loaded", "session_affinity"])
def test_every_mooncake_request_reaches_a_terminal_state(name: str) -> None:
    check_every_request_reaches_a_terminal_state(name)
