"""P/D runs that stop early (cutoff, a policy that never places) undo every handoff; the figure
and the records are the same in every process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadgen import Request
from policies import PDPolicy, PlacePolicy, PolicyContext
from replay import handoff_timeline_svg

from .pd_helpers import KeepingPD, example_d, replay, request, statuses

ROOT = Path(__file__).resolve().parents[2]


class Never(PlacePolicy):
    """Receives requests and never places them."""

    name = "never"

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        return None


def test_a_cutoff_undoes_handoffs_in_progress_without_failing_anyone() -> None:
    keeping = KeepingPD(example_d(decode_blocks=20, bandwidth_gbps=None))
    requests = [request(r, p=600, n=50, ids=[i, i + 50]) for i, r in enumerate("abc", start=20)]
    result = replay(requests, keeping, PDPolicy(), max_virtual_time_s=0.06)
    # a and b decode on the full decode engine; c waits in its reservation queue
    assert statuses(result) == dict.fromkeys("abc", "incomplete")
    for engine in keeping.engines:
        snap = engine.snapshot()
        assert (snap.held, snap.reserving, snap.reserved, snap.pending_offers) == ((), (), (), 0)
    prefill = keeping.engines[0]
    assert prefill.view.kv_blocks_used == 0  # c's held prefill blocks were released


def test_requests_the_decode_side_never_places_release_their_prefill_blocks() -> None:
    keeping = KeepingPD(example_d())
    result = replay([request("a", p=300, n=2, ids=[1])], keeping, PDPolicy(decode=Never()))
    (a,) = result.requests
    assert a.status == "incomplete"
    assert a.handoff is not None and a.handoff.prefill_done_ms == 50.0
    assert a.handoff.decode_worker is None
    assert keeping.kv_blocks_used() == [0, 0]
    assert keeping.engines[0].held() == ()


def test_the_svg_of_no_handoff_is_an_empty_valid_figure_and_text_is_escaped() -> None:
    svg = handoff_timeline_svg([], title="a <b> & c")
    assert svg.startswith("<svg ") and svg.endswith("</svg>\n")
    assert "a &lt;b&gt; &amp; c" in svg
    assert "<title>" not in svg


def test_the_pd_figure_is_byte_identical_across_hash_seeds() -> None:
    script = (
        "import runpy, sys; "
        "m = runpy.run_path('docs/examples/pd_timeline_figure.py', run_name='figure'); "
        "sys.stdout.write(m['figure']())"
    )
    outputs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0] == (ROOT / "docs" / "explanation" / "pd-disaggregation.svg").read_text(
        encoding="utf-8"
    )
