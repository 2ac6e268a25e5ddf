"""The bundled real traces, as the tests use them (``loadgen.DATASETS``)."""

from __future__ import annotations

import functools
from itertools import islice
from pathlib import Path

from loadgen import Workload, dataset_path, open_binary, read_weka

__all__ = ("AZURE", "MOONCAKE", "WEKA", "head_lines", "lines", "weka_workload")

MOONCAKE = dataset_path("mooncake-conversation")
"""The Mooncake conversation trace (xz-compressed JSONL, 12,031 rows)."""
AZURE = dataset_path("azure-conv-2023")
"""The Azure 2023 conversation trace (xz-compressed CSV, 19,366 data rows)."""
WEKA = dataset_path("weka-claude-code")
"""The WEKA Claude Code archive (498 conversations)."""


def lines(path: Path) -> list[str]:
    """Every line of a (compressed) text trace, decompressed, line ends kept."""
    with open_binary(path) as stream:
        return [raw.decode("utf-8") for raw in stream]


def head_lines(path: Path, count: int) -> str:
    """The first ``count`` lines of a (compressed) text trace, joined (only those are
    decompressed)."""
    with open_binary(path) as stream:
        return "".join(raw.decode("utf-8") for raw in islice(stream, count))


@functools.cache
def weka_workload() -> Workload:
    """The WEKA archive read once per process (three seconds), for the modules that read it
    whole: the workload is immutable, and one worker often runs several of them."""
    return read_weka(WEKA)
