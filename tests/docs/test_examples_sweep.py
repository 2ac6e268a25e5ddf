"""The sweep examples under docs/examples run and print what the docs show (the Ray one,
``sweep_on_ray.py``, runs in tests/replay/test_sweep_ray.py, on that module's Ray instance)."""

from __future__ import annotations

import runpy
import tomllib
from pathlib import Path

import pytest

from replay import load_sweep

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

EXPECTED = {
    "sweep_cli.py": """\
exit status 0
files: ['runs', 'sweep.csv', 'sweep.json'] 8
progress lines: 9
swept: ['policy', 'workload.speedup', 'seed']
  random x1 seed 0: median TTFT   665.2 ms, goodput 0.49 req/s
  random x1 seed 1: median TTFT   727.7 ms, goodput 0.51 req/s
  random x4 seed 0: median TTFT   702.0 ms, goodput 0.71 req/s
  random x4 seed 1: median TTFT  1202.4 ms, goodput 0.57 req/s
kv_aware x1 seed 0: median TTFT   461.6 ms, goodput 0.54 req/s
kv_aware x1 seed 1: median TTFT   461.6 ms, goodput 0.54 req/s
kv_aware x4 seed 0: median TTFT  1179.8 ms, goodput 0.85 req/s
kv_aware x4 seed 1: median TTFT  1179.8 ms, goodput 0.85 req/s
run 1/8  r000-policy=random-workload.speedup=1-seed=0  done before  median TTFT 665.17 ms
simclock sweep: 8 runs (0 run now), 0 failed: out/sweep.json, out/sweep.csv
""",
    "sweep_python_api.py": """\
r000-policy=round_robin-engine.enable_prefix_caching=true-seed=7
r001-policy=round_robin-engine.enable_prefix_caching=false-seed=7
swept: ('policy', 'engine.enable_prefix_caching', 'seed') | ran: 4 | failed: 0
round_robin, caching True : mean TTFT   17.8 ms, prefix reuse 68%
round_robin, caching False: mean TTFT   49.9 ms, prefix reuse 0%
   kv_aware, caching True : mean TTFT   10.6 ms, prefix reuse 84%
   kv_aware, caching False: mean TTFT   49.9 ms, prefix reuse 0%
""",
}
CHECKED_ELSEWHERE = ("sweep_on_ray.py",)


def test_every_sweep_example_is_checked() -> None:
    checked = [*EXPECTED, *CHECKED_ELSEWHERE]
    assert sorted(p.name for p in EXAMPLES.glob("sweep_*.py")) == sorted(checked)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_the_docs_show(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out == EXPECTED[name]


def test_the_example_sweep_file_is_the_one_the_reference_shows() -> None:
    path = EXAMPLES / "sweep_policies.toml"
    spec, output_dir = load_sweep(path)
    assert output_dir == "sweep-out"
    assert spec.swept == ("policy", "workload.speedup", "seed")
    assert len(spec.runs()) == 8
    page = (EXAMPLES.parent / "reference" / "sweep.md").read_text(encoding="utf-8")
    assert "```toml\n" + path.read_text(encoding="utf-8") + "```" in page
    assert tomllib.loads(path.read_text(encoding="utf-8"))["base"]["workers"] == 2
