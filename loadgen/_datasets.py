"""The public traces bundled with simclock, by name.

Three real traces ship inside the package, compressed (see ``loadgen/datasets/PROVENANCE.md``
for their sources, licences and checksums), and a sample selected from one of them that
``simclock replay`` replays when it is given no trace: a user replays one by name without
downloading anything, and the tests and docs use them the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from ._exceptions import WorkloadConfigError
from ._read import read_trace
from ._workload import Workload

__all__ = ("DATASETS", "Dataset", "dataset", "dataset_path", "read_dataset")

_DIRECTORY = Path(__file__).resolve().parent / "datasets"


@attrs.frozen
class Dataset:
    """One bundled trace.

    Attributes:
        name: the name to replay it by, e.g. ``mooncake-conversation``.
        file: the file name inside the package's ``datasets`` folder.
        format: the reader format (a name of :data:`loadgen.FORMATS`).
        licence: the upstream licence (SPDX identifier).
        summary: one line: what it is and how big.
    """

    name: str
    file: str
    format: str
    licence: str
    summary: str

    @property
    def path(self) -> Path:
        """Where the compressed file is installed."""
        return _DIRECTORY / self.file


DATASETS: tuple[Dataset, ...] = (
    Dataset(
        name="mooncake-conversation",
        file="conversation_trace.jsonl.xz",
        format="mooncake",
        licence="Apache-2.0",
        summary=(
            "Mooncake FAST'25 conversation trace (Kimi): 12,031 requests over 59 minutes, "
            "512-token prefix hashes"
        ),
    ),
    Dataset(
        name="azure-conv-2023",
        file="AzureLLMInferenceTrace_conv.csv.xz",
        format="azure",
        licence="CC-BY-4.0",
        summary=(
            "Azure LLM inference trace 2023, conversation (Splitwise): 19,366 requests over "
            "58 minutes, no prefix hashes"
        ),
    ),
    Dataset(
        name="weka-claude-code",
        file="weka_cc_traces_v8_shared.tar.xz",
        format="weka",
        licence="Apache-2.0",
        summary=(
            "WEKA kv-cache-tester Claude Code sessions (v8): 498 conversations, 34,085 model "
            "calls, 50 subagent groups, 64-token prefix hashes"
        ),
    ),
    Dataset(
        name="mooncake-sample",
        file="mooncake_sample.jsonl.xz",
        format="mooncake",
        licence="Apache-2.0",
        summary=(
            "First-run sample of mooncake-conversation: its 88 multi-turn conversations of "
            "the first five minutes, 199 requests, 43.5% reusable prefix"
        ),
    ),
)
"""Every bundled dataset, in the order ``simclock datasets`` lists them."""


def dataset(name: str) -> Dataset:
    """Return the bundled dataset called ``name``.

    Raises:
        WorkloadConfigError: no dataset has that name (the message lists the names).
    """
    for one in DATASETS:
        if one.name == name:
            return one
    known = ", ".join(d.name for d in DATASETS)
    raise WorkloadConfigError(f"dataset: no bundled dataset {name!r} (known: {known})")


def dataset_path(name: str) -> Path:
    """Return the path of the bundled dataset ``name``: a file any reader takes as it is.

    Raises:
        WorkloadConfigError: no dataset has that name.
    """
    return dataset(name).path


def read_dataset(name: str, **options: Any) -> Workload:
    """Read the bundled dataset ``name`` with its format's reader.

    Args:
        name: a name from :data:`DATASETS`.
        **options: passed to :func:`loadgen.read_trace` (``block_size``, ``interner``, ...).

    Returns:
        The workload; request ids are those of the upstream file name (for example
        ``conversation_trace:1``), as if the uncompressed file had been read.

    Raises:
        WorkloadConfigError: no dataset has that name, or an option is unknown.
    """
    chosen = dataset(name)
    return read_trace(chosen.path, format=chosen.format, **options)
