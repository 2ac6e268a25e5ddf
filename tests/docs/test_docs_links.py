"""The documentation hangs together: every relative link resolves, every page is reachable."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
README = DOCS.parent / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _links(page: Path) -> list[Path]:
    return [
        (page.parent / target).resolve()
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = [
        f"{page.relative_to(DOCS.parent)} -> {target}"
        for page in [README, *sorted(DOCS.rglob("*.md"))]
        for target in _links(page)
        if not target.exists()
    ]
    assert broken == []


def test_every_page_is_linked_from_the_index() -> None:
    linked = set(_links(DOCS / "index.md"))
    pages = {p.resolve() for p in DOCS.rglob("*.md") if p.name != "index.md"}
    assert sorted(str(p.relative_to(DOCS)) for p in pages - linked) == []


def test_readme_gives_exactly_two_commands_and_ci_runs_the_second() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    commands = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert len(commands) == 2
    assert "simclock replay" in commands[0]
    ci = (DOCS.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci
