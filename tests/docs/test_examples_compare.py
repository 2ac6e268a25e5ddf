"""The compare-policies guide: its examples print what it shows, every command and Python line
it shows is one they run, and its figures are what those commands draw."""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
GUIDE = ROOT / "docs" / "how-to" / "compare-policies.md"
CLI_EXAMPLE = EXAMPLES / "compare_policies_cli.py"
PYTHON_EXAMPLE = EXAMPLES / "compare_policies_python.py"
# the matplotlib the committed figures were drawn with: byte for byte only with that one
DRAWN_WITH = "3.11.2"
FIGURE_TEXTS = {
    "compare-policies-ttft-cdf.svg": ("TTFT CDF", "TTFT (ms)", "kv_aware", "prefix_first"),
    "compare-policies-sweep-mean-ttft.svg": ("workload.speedup", "random", "least_loaded"),
}


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)


def _texts(svg: bytes) -> list[str]:
    root = ElementTree.fromstring(svg)
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def _run(example: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", [example.name, *argv])
        patch.chdir(ROOT)  # the sweep file names the policy file relative to the root
        runpy.run_path(str(example), run_name="__main__")
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    figures = tmp_path_factory.mktemp("figures")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", [CLI_EXAMPLE.name, str(figures)])
        capture = _Capture()
        patch.setattr(sys, "stdout", capture)
        runpy.run_path(str(CLI_EXAMPLE), run_name="__main__")
    yield capture.text, figures


class _Capture:
    """A stdout for a module-scoped fixture (capsys is function-scoped)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    @property
    def text(self) -> str:
        return "".join(self.parts)


def test_every_command_runs_and_succeeds(cli_run: tuple[str, Path]) -> None:
    out, _ = cli_run
    commands = runpy.run_path(str(CLI_EXAMPLE), run_name="compare_example")["COMMANDS"]
    statuses = re.findall(r"^\$ (simclock .*)  -> exit (\d+)$", out, re.M)
    assert statuses == [(command, "0") for command in commands]


def test_the_guide_shows_exactly_the_commands_the_example_runs(cli_run: tuple[str, Path]) -> None:
    commands = runpy.run_path(str(CLI_EXAMPLE), run_name="compare_example")["COMMANDS"]
    shown = [
        line[2:]
        for block in _blocks("console")
        for line in block.splitlines()
        if line.startswith("$ simclock")
    ]
    assert shown == list(commands)


def test_the_guide_shows_what_the_commands_print(cli_run: tuple[str, Path]) -> None:
    out, _ = cli_run
    printed = set(out.splitlines())
    shown = [
        line
        for block in _blocks("console")
        for line in block.splitlines()
        if not line.startswith("$") and line != "..."
    ]
    assert len(shown) > 50
    assert [line for line in shown if line not in printed] == []
    # the comparison table is shown whole, in the order printed
    table = out[out.index("=" * 42 + " Comparison") : out.index("=" * 96 + "\n") + 97]
    assert table in GUIDE.read_text(encoding="utf-8")
    assert "Prefix reuse (% of input tokens):                24.79         26.75" in table


def test_the_sweep_file_and_its_edit_are_the_ones_shown() -> None:
    sweep_file = (EXAMPLES / "compare_policies.toml").read_text(encoding="utf-8")
    assert sweep_file in _blocks("toml")
    example = runpy.run_path(str(CLI_EXAMPLE), run_name="compare_example")
    assert example["POLICIES"] in sweep_file
    assert example["MORE_POLICIES"] + "\n" in _blocks("toml")


def test_the_policy_shown_is_the_policy_file() -> None:
    (shown,) = [b for b in _blocks("python") if "class PrefixFirst" in b]
    assert shown in (EXAMPLES / "compare_prefix_first.py").read_text(encoding="utf-8")


def test_the_python_example_prints_what_the_guide_shows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cli_run: tuple[str, Path]
) -> None:
    out = _run(PYTHON_EXAMPLE, [str(tmp_path)], capsys)
    first, note = _blocks("text")
    assert out.startswith(first)
    assert note.strip() in out.splitlines()
    assert "note: engines_prefix_first: OUT/sweep/runs/r012-" in out
    # the Python code shown is the example's, line by line
    (shown,) = [b for b in _blocks("python") if "load_sweep" in b]
    lines = {line.strip() for line in PYTHON_EXAMPLE.read_text(encoding="utf-8").splitlines()}
    assert [line for line in shown.splitlines() if line.strip() not in lines] == []
    # from Python, the same runs draw the same TTFT CDF as the commands
    _, figures = cli_run
    python_cdf = (tmp_path / "ttft_cdf.svg").read_bytes()
    assert python_cdf == (figures / "compare-policies-ttft-cdf.svg").read_bytes()


@pytest.mark.parametrize("name", sorted(FIGURE_TEXTS))
def test_the_guide_figures_are_what_the_commands_draw(name: str, cli_run: tuple[str, Path]) -> None:
    _, figures = cli_run
    drawn = (figures / name).read_bytes()
    committed = (GUIDE.parent / name).read_bytes()
    assert f"]({name})" in GUIDE.read_text(encoding="utf-8")
    # the figure's texts (title, axis labels, ticks, legend) whatever the matplotlib
    assert _texts(drawn) == _texts(committed)
    for text in FIGURE_TEXTS[name]:
        assert text in _texts(committed)
    if matplotlib.__version__ == DRAWN_WITH:
        assert drawn == committed, f"regenerate: python {CLI_EXAMPLE.relative_to(ROOT)} docs/how-to"
    else:
        # another matplotlib lays paths out its own way; the data must still be the same
        assert len(drawn) == pytest.approx(len(committed), rel=0.2)


def test_every_compare_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("compare_*")) == [
        "compare_policies.toml",
        "compare_policies_cli.py",
        "compare_policies_python.py",
        "compare_prefix_first.py",
    ]
