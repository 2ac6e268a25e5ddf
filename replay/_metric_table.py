"""The summary's metrics in tables: its figures (:data:`SCALARS`) and its distributions
(:data:`DISTRIBUTIONS`). From them the report computes the distributions
(:func:`replay._report.finalize`), ``summary.json`` names every metric (its ``metrics``
section in vLLM's flat names, its ``distributions`` section) and the console table shows them.

Adding a metric to the report is adding a row here and its field to :class:`replay.Summary`
(``tests/replay/test_metric_table.py`` checks that the two agree); a figure is computed in
:func:`replay._report._summary`, and a distribution whose sample is a per-request figure
needs its column in the records' columns (:mod:`replay._columns`).
"""

from __future__ import annotations

import attrs

__all__ = ("DISTRIBUTIONS", "SCALARS", "DistributionMetric", "ScalarMetric")


@attrs.frozen
class ScalarMetric:
    """One figure of the summary, under vLLM's flat name in ``summary.json``'s ``metrics``.

    Attributes:
        name: the key in ``metrics``; the :class:`replay.Summary` attribute, except for
            ``request_goodput`` (``Summary.goodput.request_goodput``, None without an SLO).
        label: the console table's row label, None when the table leaves it out.
    """

    name: str
    label: str | None = None


SCALARS: tuple[ScalarMetric, ...] = (
    ScalarMetric("duration_s", "Duration (s)"),
    ScalarMetric("completed"),
    ScalarMetric("total_input_tokens", "Total input tokens"),
    ScalarMetric("total_output_tokens", "Total generated tokens"),
    ScalarMetric("request_throughput", "Request throughput (req/s)"),
    ScalarMetric("request_goodput"),
    ScalarMetric("input_throughput"),
    ScalarMetric("output_throughput", "Output token throughput (tok/s)"),
    ScalarMetric("total_token_throughput", "Total token throughput (tok/s)"),
)
"""The summary's figures in the order ``summary.json``'s ``metrics`` section and the console
table list them (the console shows the goodput, with its SLO, where ``request_goodput`` is)."""


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
