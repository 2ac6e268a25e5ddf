"""The Ray executor against a local Ray instance: the same bytes as local runs.

One Ray instance serves the module (starting one costs seconds); the workloads are tiny. Ray is
in the ``test`` extra wherever it has wheels, so this module runs in CI; it is skipped only
where Ray cannot be imported at all.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
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
def local_ray() -> Iterator[str]:
    """A local Ray instance for the module; yields its address (another process can join)."""
    context = ray.init(
        num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False
    )
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_ray_runs_write_the_same_bytes_as_local_runs(local_ray: str, tmp_path: Path) -> None:
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
    local_ray: str,
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


EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

RAY_EXAMPLE = """\
r000-policy=random-seed=0 ok median TTFT 13.0 ms
r001-policy=random-seed=1 ok median TTFT 13.3 ms
r002-policy=least_loaded-seed=0 ok median TTFT 14.0 ms
r003-policy=least_loaded-seed=1 ok median TTFT 13.0 ms
14 files, identical to the local run: True
"""


def test_the_ray_example_of_the_docs_prints_what_they_show(
    local_ray: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/examples/sweep_on_ray.py, on this module's Ray instance (one start for the module)
    runpy.run_path(str(EXAMPLES / "sweep_on_ray.py"), run_name="__main__")
    assert capsys.readouterr().out == RAY_EXAMPLE


def test_the_command_line_joins_an_existing_cluster_by_its_address(
    local_ray: str, tmp_path: Path
) -> None:
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(
        f'[base]\nworkers = 2\nworkload.synthetic = "{SYNTHETIC}"\n'
        '[grid]\npolicy = ["random", "kv_aware"]\n'
    )
    command = [sys.executable, "-m", "simclock", "sweep", str(sweep_file), "--quiet"]
    command += ["--output-dir", str(tmp_path / "joined"), "--executor", "ray"]
    command += ["--ray-address", local_ray]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    assert (done.returncode, done.stdout) == (0, "")
    spec, _ = load_sweep(sweep_file)
    sweep(spec, output_dir=tmp_path / "local")
    assert _files(tmp_path / "joined") == _files(tmp_path / "local")
    assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2  # still there
