"""The timing examples under docs/examples run and print what the docs show."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "timing_custom_model.py": """\
decode batch   1: 4.05 ms
decode batch   5: 4.40 ms
decode batch   8: 4.40 ms
decode batch   9: 4.80 ms
decode batch 300: 19.00 ms
prompt 1000 tokens: 28.00 ms
mixed (5 decodes + prompt): 32.40 ms
prefill role, 5 decodes: 0.00 ms
fixed 50/10, mixed: 60.00 ms
rejected: prefill_token_ms must be a finite number > 0, got -1.0
""",
    "timing_roofline.py": """\
llama-3.1-8b: P_lin = 6.98e9
KV bytes/token (bf16, TP 1): 131,072
decode at context 1000: 15.1 GB -> 3.15 ms
1000-token prefill: 14.2 TFLOP -> 14.4 ms
eta_c 0.6, eta_m 0.8, T_0 1.5 ms: decode 5.44 ms
llama-3.1-70b on 4x H100: decode 13.00 ms, prefill 58.23 ms
""",
    "timing_fit_linear.py": """\
c0 = 6.051 ms
c_p = 14.988 us/token
c_d = 98.432 us/sequence
c_kv = 100.235 ns/KV position
measured    6.21 ms, fitted    6.25 ms
measured   14.05 ms, fitted   14.01 ms
measured   44.71 ms, fitted   44.71 ms
measured   36.95 ms, fitted   36.95 ms
measured  129.62 ms, fitted  129.65 ms
measured   73.10 ms, fitted   73.03 ms
measured   32.02 ms, fitted   32.05 ms
""",
    "timing_tokenizer.py": """\
(7.0,)
(7.0, 14.0)
(7.0, 14.0, 69.0)
(7.0, 7.0, 62.0)
(0.0, 2.5)
""",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]


def test_every_timing_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("timing_*.py")) == sorted(EXPECTED)
