"""A P/D replay can be stepped and inspected like an aggregated one."""

from __future__ import annotations

from loadgen import Workload
from policies import PDPolicy
from replay import ReplaySession

from .pd_helpers import example_d, request

MS = 1_000_000


def test_a_pd_session_stops_mid_prefill_describes_both_pools_and_resumes_to_65_3687() -> None:
    workload = Workload(requests=(request("a"), request("b", at_ms=5)), source="t", format="t")
    session = ReplaySession.build(workload, topology=example_d(), policy=PDPolicy())
    session.run_until(30 * MS)
    text = session.describe()
    assert "engine 0 (prefill)" in text and "engine 1 (decode)" in text
    assert "policy 'pd(round_robin,round_robin)'" in text
    assert session.prefix_hits("b") == (0, 0)  # a's blocks are not published before its pass ends
    session.resume()
    a, b = session.result.requests
    assert a.ttft_ms == 65.368709
    assert b.status == "completed"
