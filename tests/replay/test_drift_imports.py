"""The library packages reach each other through public names only."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args, get_type_hints

import policies

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("simclock", "engines", "policies", "loadgen", "replay")


def _private_imports(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for module in modules:
                head, _, rest = module.partition(".")
                if head in PACKAGES and head != package and rest.startswith("_"):
                    found.append(f"{path.relative_to(ROOT).as_posix()}: {module}")
    return found


def test_no_library_package_imports_another_ones_private_modules() -> None:
    found = [f for p in ("engines", "policies", "loadgen", "replay") for f in _private_imports(p)]
    assert found == []


def test_the_runtime_status_of_a_request_is_a_public_name() -> None:
    statuses = ("held", "offered", "committed", "failed", "terminal")
    assert get_args(policies.RequestStatus) == statuses
    hints = get_type_hints(policies.PolicyRuntime.status)
    assert hints["return"] == policies.RequestStatus | None
