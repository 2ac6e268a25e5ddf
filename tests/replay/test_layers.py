"""``replay`` is built in layers, and imports go one way: down.

From the bottom: shared helpers; results and reports (records, metrics, columns, the report,
the output files, timelines and figures); composition (topologies, runtimes, the runner);
debugging (the session, progress, inspection); the command line (flags, config files, name
registries). A module may import its own layer and the layers below, never one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import replay

LAYERS: dict[str, tuple[str, ...]] = {
    "shared": ("_exceptions", "_files", "_limits", "_token_times_ms"),
    "results": (
        "_metrics",
        "_metric_table",
        "_pd_metrics",
        "_records",
        "_columns",
        "_stream",
        "_report",
        "_export_facts",
        "_export",
        "_output",
        "_timeline",
        "_pd_figure",
        "_series",
        "_plot_data",
        "_cost",
        "_compare",
        "_html_report",
        "_plot",
    ),
    "composition": (
        "_cluster",
        "_autoscale",
        "_autoscalers",
        "_faults",
        "_topology",
        "_prepare",
        "_watch",
        "_runner",
        "_pd_topology",
        "_pd",
        "_logging_events",
        "_run",
        "_explore",
    ),
    "debugging": (
        "_session_state",
        "_session_trail",
        "_session_core",
        "_session_snapshots",
        "_session_stepping",
        "_session_rewind",
        "_session_breakpoints",
        "_session",
        "_progress",
        "_inspect",
    ),
    "command line": (
        "_flags",
        "_factories",
        "_registry",
        "_run_keys",
        "_config",
        "_pd_options",
        "_cli_datasets",
        "_config_run",
        "_cli_debug",
        "_cli_plot",
        "_sweep_spec",
        "_sweep_run",
        "_executors",
        "_sweep",
        "_cli_sweep",
        "_cli_explore",
        "_cli",
        "config",
    ),
}
PACKAGE = Path(replay.__file__).parent


def _rank() -> dict[str, int]:
    return {module: i for i, modules in enumerate(LAYERS.values()) for module in modules}


def _imports(path: Path) -> set[str]:
    """The ``replay`` modules ``path`` imports (relative or absolute)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module)
            elif node.level == 0 and node.module and node.module.startswith("replay."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("replay."))
    return found


def test_every_module_has_a_layer() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert modules == set(_rank())


def test_imports_go_down_the_layers() -> None:
    rank = _rank()
    names = list(LAYERS)
    upward = [
        f"{module} ({names[rank[module]]}) imports {dep} ({names[rank[dep]]})"
        for module in sorted(rank)
        for dep in sorted(_imports(PACKAGE / f"{module}.py"))
        if rank[dep] > rank[module]
    ]
    assert upward == []


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "_records.py"
    module.write_text("from ._config import ReplayConfig\nimport replay._cli\n")
    assert _imports(module) == {"_config", "_cli"}


PACKAGES = ("simclock", "loadgen", "engines", "policies", "replay")


def _packages_imported(path: Path) -> set[str]:
    """The packages of :data:`PACKAGES` that ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found & set(PACKAGES)


def test_each_package_imports_only_the_packages_below_it() -> None:
    root = PACKAGE.parent
    upward = [
        f"{package}/{path.name} imports {other}"
        for i, package in enumerate(PACKAGES)
        for path in sorted((root / package).glob("*.py"))
        for other in sorted(_packages_imported(path))
        if PACKAGES.index(other) > i
    ]
    assert upward == []
