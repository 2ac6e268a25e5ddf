"""``--policy path/to/file.py:ClassName[:k=v,...]`` and ``--policy package.module:ClassName``:
a policy class of one's own wherever a built-in policy goes (the flag, config files, P/D)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from replay._cli import EXIT_OK, EXIT_USAGE, main

FAST = ["--timing", "fixed", "--quiet", "--max-requests", "30"]

POLICY_FILE = '''
import attrs

from policies import RoundRobin


@attrs.define
class EveryOther(RoundRobin):
    """Round robin that skips ``skip`` engines after each placement."""

    skip: int = 0

    def choose(self, request, ctx):
        index = super().choose(request, ctx)
        for _ in range(self.skip):
            super().choose(request, ctx)
        return index


class NotAPolicy:
    pass


BROKEN = 1
'''


def _replay(out: Path, *args: str) -> tuple[dict[str, object], bytes]:
    assert main(["replay", *args, *FAST, "--output-dir", str(out)]) == EXIT_OK
    config = json.loads((out / "config.json").read_text())
    return config, (out / "requests.jsonl").read_bytes()


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "own_policies.py"
    path.write_text(POLICY_FILE)
    return path


def test_a_class_from_a_file_places_as_the_built_in_it_extends(
    tmp_path: Path, policy_file: Path
) -> None:
    _, built_in = _replay(tmp_path / "rr", "--policy", "round_robin")
    config, own = _replay(tmp_path / "own", "--policy", f"{policy_file}:EveryOther")
    assert own == built_in  # skip=0: the same placements
    assert config["config"]["policy"] == {"name": f"{policy_file}:EveryOther"}  # type: ignore[index]
    # its options, as a built-in's
    config, skipping = _replay(
        tmp_path / "skip", "--workers", "3", "--policy", f"{policy_file}:EveryOther:skip=1"
    )
    _, plain = _replay(tmp_path / "plain", "--workers", "3", "--policy", "round_robin")
    assert skipping != plain
    assert config["config"]["policy"] == {  # type: ignore[index]
        "name": f"{policy_file}:EveryOther",
        "skip": 1,
    }
    # a run's config.json replays the same run
    _, again = _replay(tmp_path / "again", "--config", str(tmp_path / "skip" / "config.json"))
    assert again == skipping


def test_a_class_from_a_module_on_the_working_directory(
    tmp_path: Path, policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "own_policies", raising=False)
    _, built_in = _replay(tmp_path / "rr", "--policy", "round_robin")
    _, own = _replay(tmp_path / "own", "--policy", "own_policies:EveryOther")
    assert own == built_in
    (tmp_path / "run.toml").write_text('[policy]\nname = "own_policies:EveryOther"\nskip = 0\n')
    _, from_file = _replay(tmp_path / "file", "--config", "run.toml")
    assert from_file == built_in


def test_the_pd_pools_each_take_a_fresh_object_of_the_class(
    tmp_path: Path, policy_file: Path
) -> None:
    pd = ["--topology", "pd", "--prefill-workers", "2", "--decode-workers", "2"]
    _, built_in = _replay(tmp_path / "rr", *pd, "--policy", "round_robin")
    _, own = _replay(tmp_path / "own", *pd, "--policy", f"{policy_file}:EveryOther")
    assert own == built_in


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "{dir}/missing.py:EveryOther",
            "{dir}/missing.py:EveryOther: no such file: {dir}/missing.py",
        ),
        (
            "{file}:Nothing",
            "{file}:Nothing: {file} has no 'Nothing'",
        ),
        ("{file}:BROKEN", "{file}:BROKEN: BROKEN is not a class"),
        ("{file}:NotAPolicy", "{file}:NotAPolicy: not a policy: NotAPolicy has no run coroutine"),
        (
            "{file}:EveryOther:skip=x",
            "{file}:EveryOther: skip: must be an integer, got 'x'",
        ),
        (
            "no_such_module_here:Policy",
            "no_such_module_here:Policy: cannot import no_such_module_here: No module named "
            "'no_such_module_here'",
        ),
    ],
)
def test_a_bad_class_is_one_line_and_exit_status_2(
    spec: str,
    message: str,
    tmp_path: Path,
    policy_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    values = {"dir": str(tmp_path), "file": str(policy_file)}
    out = tmp_path / "out"
    argv = ["replay", "--policy", spec.format(**values), *FAST, "--output-dir", str(out)]
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"simclock replay: error: --policy: {message.format(**values)}\n"
    assert not out.exists()


def test_a_file_that_raises_on_loading_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('no network here')\n")
    assert main(["replay", "--policy", f"{bad}:P", *FAST]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        f"simclock replay: error: --policy: {bad}:P: loading {bad} raised RuntimeError: "
        "no network here\n"
    )


@pytest.mark.parametrize(
    ("text", "name", "options"),
    [
        ("own.py:P2C:sample_ms=50,d=2", "own.py:P2C", {"sample_ms": 50, "d": 2}),
        ("dir/own.py:P2C", "dir/own.py:P2C", {}),
        ("pkg.routing:p2c", "pkg.routing:p2c", {}),
        ("own_policies:P2C:d=3", "own_policies:P2C", {"d": 3}),
        ("kv_aware:temperature=0.5", "kv_aware", {"temperature": 0.5}),
    ],
)
def test_a_spec_names_a_class_of_ones_own_or_a_built_in(
    text: str, name: str, options: dict[str, object]
) -> None:
    from replay.config import ComponentSpec, parse_spec

    assert parse_spec(text, what="--policy") == ComponentSpec(name, options)
