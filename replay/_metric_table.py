"""The summary's distributions in one table: from it the report computes them
(:func:`replay._report.finalize`), ``summary.json`` names them (its ``distributions`` section,
and vLLM's ``mean_<name>_ms``-style keys of its ``metrics`` section) and the console table
shows them.

Adding a distribution to the report is adding a row here, its field to
:class:`replay.Summary` (``tests/replay/test_metric_table.py`` checks that the two agree) and,
when its sample is a per-request figure, its column to the records' columns
(:mod:`replay._columns`).
"""

from __future__ import annotations

import attrs

__all__ = ("DISTRIBUTIONS", "DistributionMetric")


@attrs.frozen
class DistributionMetric:
    """One distribution of the summary.

    Attributes:
        name: the :class:`replay.Summary` attribute and the ``distributions`` key of
            ``summary.json``.
        column: the per-request column (:meth:`replay._columns.RequestColumns.sample`) whose
            values, one per request of the metric population, make the sample; None for a
            sample the report pools itself (inter-token gaps, several per request).
        vllm: the name vLLM's serving benchmark gives it in its flat metrics
            (``mean_<vllm>_ms``, ``median_<vllm>_ms``, ...), None when vLLM reports none.
        heading: the console table's section heading, None when the table leaves it out.
        label: the console table's short name (``Mean <label> (ms)``).
    """

    name: str
    column: str | None
    vllm: str | None = None
    heading: str | None = None
    label: str | None = None


DISTRIBUTIONS: tuple[DistributionMetric, ...] = (
    DistributionMetric("ttft_ms", "ttft_ms", "ttft", "Time to First Token", "TTFT"),
    DistributionMetric("ttst_ms", "ttst_ms"),
    DistributionMetric(
        "tpot_ms", "tpot_ms", "tpot", "Time per Output Token (excl. 1st token)", "TPOT"
    ),
    DistributionMetric("itl_ms", None, "itl", "Inter-token Latency", "ITL"),
    DistributionMetric("e2el_ms", "e2e_ms", "e2el", "End-to-end Latency", "E2EL"),
    DistributionMetric("queueing_delay_ms", "queueing_ms", None, "Queueing Delay", "Queueing"),
    DistributionMetric("tokenization_ms", "tokenization_ms"),
    DistributionMetric("routing_delay_ms", "routing_ms"),
    DistributionMetric("output_tokens_per_s_per_user", None),
)
"""Every distribution of the summary, in the order ``summary.json`` and the console table
list them."""
