"""The P/D examples under docs/examples run and print what the docs show; the figure of the
P/D explanation is exactly what its example generates."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLES = DOCS / "examples"

EXPECTED = {
    "pd_example_d.py": """\
a: prefill done 50.0000, reserved 50.0000, 1024 tokens in 5.3687 ms, TTFT 65.3687, E2E 155.3687
b: prefill done 550.0000, reserved 550.0000, 64 tokens in 0.3355 ms, TTFT 60.3355, E2E 150.3355
transfer: mean 2.8521 ms over 2
full_prompt: 1000 tokens, TTFT 65.2429
prefill TP 2: transfer 2.68 ms
decode fixed 20: TTFT 75.37, E2E 255.37
""",
    "pd_timeline_figure.py": """\
prefill_queueing_ms: mean 20.00 max 40.00
prefill_compute_ms: mean 50.00 max 50.00
reservation_wait_ms: mean 47.02 max 103.42
transfer_ms: mean 13.42 max 18.45
decode_queueing_ms: mean 2.45 max 7.48
decode_first_pass_ms: mean 10.00 max 10.00
""",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", [name])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]


def test_the_pd_figure_is_generated_by_its_example() -> None:
    module = runpy.run_path(str(EXAMPLES / "pd_timeline_figure.py"), run_name="pd_figure")
    svg = module["figure"]()
    committed = (DOCS / "explanation" / "pd-disaggregation.svg").read_text(encoding="utf-8")
    assert svg == committed
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert svg.count("<title>KV transfer:") == 6  # one transfer per request
    assert "r1 P1 \u2192 D2" in svg
    root = ElementTree.fromstring(svg)  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


def test_the_example_writes_the_figure_to_a_given_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "figure.svg"
    monkeypatch.setattr(sys, "argv", ["pd_timeline_figure.py", str(out)])
    runpy.run_path(str(EXAMPLES / "pd_timeline_figure.py"), run_name="__main__")
    committed = (DOCS / "explanation" / "pd-disaggregation.svg").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == committed
