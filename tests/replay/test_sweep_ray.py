"""The Ray executor against a local Ray instance: the same bytes as local runs.

One Ray instance serves the module (starting one costs seconds); the workloads are tiny. Ray is
in the ``test`` extra wherever it has wheels, so this module runs in CI; it is skipped only
where Ray cannot be imported at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from replay import LocalExecutor, RayExecutor, SweepSpec, load_sweep, sweep
from replay._cli import EXIT_FAILED, main

ray = pytest.importorskip("ray")

SYNTHETIC = (
    "count=20 arrivals=poisson(40) input=300 output=6 prefix_groups=2 shared_prefix_ratio=0.5"
)

SPEC = SweepSpec(
    base={"workers": 2, "timing": "fixed", "workload": {"synthetic": SYNTHETIC}},
    grid={"policy": ["round_robin", "kv_aware"], "workload.speedup": [1, 4]},
    seeds=[0, 1],
)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_ray_runs_write_the_same_bytes_as_local_runs(local_ray: None, tmp_path: Path) -> None:
    on_ray = sweep(SPEC, output_dir=tmp_path / "ray", executor=RayExecutor())
    assert on_ray.ran == 8 and on_ray.failed == ()
    assert ray.is_initialized()  # an instance it did not start is left running
    sweep(SPEC, output_dir=tmp_path / "local", executor=LocalExecutor())
    files = _files(tmp_path / "ray")
    assert len(files) == 2 + 8 * 3
    assert files == _files(tmp_path / "local")
    again = sweep(SPEC, output_dir=tmp_path / "ray", executor=RayExecutor())
    assert again.ran == 0 and _files(tmp_path / "ray") == files


FAILING_POLICY = """
from policies import RoundRobin


class Failing(RoundRobin):
    def choose(self, request, ctx):
        raise RuntimeError("no engine for you")
"""


def test_the_command_line_on_ray_marks_a_failed_run_and_keeps_its_report(
    local_ray: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    # Ray's workers resolve relative paths from the directory Ray was started in: the
    # module's instance was started elsewhere, so the policy file is named in full.
    policy = tmp_path / "failing.py"
    policy.write_text(FAILING_POLICY)
    Path("s.toml").write_text(
        f'output_dir = "out"\n[base]\ntiming = "fixed"\nworkload.synthetic = "{SYNTHETIC}"\n'
        f'[grid]\npolicy = ["round_robin", "{policy}:Failing"]\n'
    )
    assert main(["sweep", "s.toml", "--executor", "ray"]) == EXIT_FAILED
    lines = sorted(capsys.readouterr().err.splitlines()[:2], key=lambda line: line[9:])
    assert "  r000-policy=round_robin  ok  median TTFT " in lines[0]
    failing_id = load_sweep("s.toml")[0].runs()[1].run_id
    assert failing_id.endswith("..iling.py_Failing")  # a long value keeps its two ends
    assert f"/2  {failing_id}  failed: " in lines[1]
    assert lines[1].endswith("no engine for you")
    (run_dir,) = (tmp_path / "out" / "runs").glob("r001-*")
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.json",
        "requests.jsonl",
        "summary.json",
    ]
