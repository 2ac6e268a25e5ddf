"""``simclock datasets`` and how a TRACE argument names a bundled dataset.

A TRACE argument (of ``replay``, ``inspect``, or ``trace`` in a config file) is a path; when no
file or directory exists at that path and the text is the name of a bundled dataset
(:data:`loadgen.DATASETS`), it is that dataset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from loadgen import DATASETS

__all__ = ("add_datasets_parser", "resolve_trace", "run_datasets")


def resolve_trace(trace: str) -> Path:
    """Return the file a TRACE argument names: the path itself, or a bundled dataset's file.

    An existing path always wins, so a local file is never shadowed by a dataset name.
    """
    path = Path(trace)
    if not path.exists():
        for one in DATASETS:
            if one.name == trace:
                return one.path
    return path


def add_datasets_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``datasets`` (list the bundled traces) to ``subparsers``."""
    parser = subparsers.add_parser(
        "datasets",
        help="list the bundled real traces that replay and inspect take by name",
        description=(
            "List the public traces bundled with simclock. Give a NAME wherever a trace "
            "file goes: simclock replay NAME, simclock inspect NAME, trace = NAME in a "
            "config file. Sources and licences: loadgen/datasets/PROVENANCE.md."
        ),
    )
    parser.set_defaults(handler=run_datasets, parser=parser)
    return parser


def run_datasets(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Print one line per bundled dataset: name, format, licence, summary; return 0."""
    out = sys.stdout if stdout is None else stdout
    width = max(len(d.name) for d in DATASETS)
    for one in DATASETS:
        out.write(f"{one.name:<{width}}  {one.format:<8}  {one.licence:<10}  {one.summary}\n")
    return 0
