"""Exports of a report in other tools' layouts: vLLM's serving-benchmark result file
(``vllm_bench.json``) and a per-request table (``requests.csv``).

Both are opt-in (``write_outputs(..., exports=("vllm", "csv"))``, ``--export vllm,csv``) and
are written with the other report files, as one set. Both are built from the per-request lines
of ``requests.jsonl`` (the records a run kept, or the file a run streamed), so they say exactly
what the report says, and, like every report file, hold nothing that depends on the wall
clock: the same run gives the same bytes.

``vllm_bench.json`` follows the result JSON that ``vllm bench serve --save-result
--save-detailed --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,75,90,95,99``
writes (``vllm/benchmarks/serve.py``): the same keys in the same order, the same units
(seconds in the per-request arrays, milliseconds in the statistics) and the same conventions
(a statistic of an empty sample is 0, ``request_goodput`` is null without an SLO). What differs,
and why, is listed in ``docs/reference/report.md`` ("Exports").
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
import numpy.typing as npt

import simclock

from ._export_facts import RunFacts, run_facts
from ._metric_table import DISTRIBUTIONS, SCALARS
from ._metrics import Distribution
from ._records import RequestRecord, request_json
from ._report import ReplayResult, Summary

__all__ = (
    "CSV_COLUMNS",
    "EXPORTS",
    "EXPORT_FILES",
    "Export",
    "export_files",
    "requests_csv",
    "scalar",
    "vllm_bench_json",
    "vllm_metrics",
)

Export = Literal["vllm", "csv"]
EXPORTS: tuple[Export, ...] = ("vllm", "csv")
"""Every export, in the order their files are written."""
EXPORT_FILES: Mapping[Export, str] = {"vllm": "vllm_bench.json", "csv": "requests.csv"}
"""The file each export writes in the output directory."""

VLLM_PERCENTILES: tuple[int, ...] = (50, 75, 90, 95, 99)
"""The percentiles ``vllm_bench.json`` gives each latency (vLLM's ``--metric-percentiles``)."""

CSV_COLUMNS: tuple[str, ...] = (
    "request_id",
    "status",
    "engine",
    "input_length",
    "output_length",
    "output_tokens",
    "reused_input_tokens",
    "num_preemptions",
    "truncated",
    "rejection_reason",
    "failure_reason",
    "arrival_ms",
    "tokenize_start_ms",
    "tokenized_ms",
    "engine_arrival_ms",
    "first_admit_ms",
    "first_token_ms",
    "last_token_ms",
    "terminal_ms",
    "ttft_ms",
    "ttst_ms",
    "tpot_ms",
    "e2e_ms",
    "queueing_delay_ms",
    "meets_slo",
    "conversation_id",
    "turn_index",
    "play_id",
    "phase",
    "prefill_worker",
    "decode_worker",
)
"""The columns of ``requests.csv``: the scalar fields of a ``requests.jsonl`` line, in its
order, then the prefill and decode engines of a prefill/decode handoff (empty without one).
Lists and objects (token times, admissions, lineage, the rest of the handoff) stay in
``requests.jsonl``."""

_MS_PER_S = 1000.0


def export_files(exports: Iterable[str]) -> tuple[str, ...]:
    """The file names ``exports`` write, in :data:`EXPORTS` order."""
    wanted = set(exports)
    return tuple(EXPORT_FILES[name] for name in EXPORTS if name in wanted)


def request_lines(
    result: ReplayResult, requests_file: Path | None
) -> Iterator[Mapping[str, object]]:
    """Every record as its ``requests.jsonl`` line (a dict): from ``result.requests`` when the
    run kept them, else read back from ``requests_file`` (the file the run streamed)."""
    if requests_file is None:
        for record in result.requests:
            yield _line_of(record)
        return
    with requests_file.open("rb") as handle:
        for raw in handle:
            line = json.loads(raw)
            if not isinstance(line, dict):  # pragma: no cover - the run wrote it
                raise simclock.InternalError(f"{requests_file}: a line is not an object")
            yield line


def _line_of(record: RequestRecord) -> Mapping[str, object]:
    return request_json(record, token_times="full")


# --------------------------------------------------------------------------------------------
# requests.csv


def requests_csv(lines: Iterable[Mapping[str, object]], handle: BinaryIO) -> None:
    """Write ``requests.csv``: a header, then one row per request line, in record order.

    Booleans are written ``true``/``false``, absent values as empty fields, numbers in
    Python's shortest round-trip form (as in the JSON files).
    """
    text = io.TextIOWrapper(handle, encoding="utf-8", newline="", write_through=True)
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for line in lines:
        handoff = line.get("handoff")
        values = dict(line)
        if isinstance(handoff, Mapping):
            values["prefill_worker"] = handoff.get("prefill_worker")
            values["decode_worker"] = handoff.get("decode_worker")
        writer.writerow([_cell(values.get(name)) for name in CSV_COLUMNS])
    text.detach()


def _cell(value: object) -> str:
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


# --------------------------------------------------------------------------------------------
# vllm_bench.json


def scalar(summary: Summary, name: str) -> object:
    """The figure ``name`` of :data:`SCALARS`."""
    if name == "request_goodput":
        return None if summary.goodput is None else summary.goodput.request_goodput
    return getattr(summary, name)


def vllm_metrics(summary: Summary) -> dict[str, object]:
    """The flat metric names of vLLM's ``benchmark_serving`` result file (``summary.json``'s
    ``metrics``; ``vllm_bench.json`` takes its statistics from here)."""
    out: dict[str, object] = {m.name: scalar(summary, m.name) for m in SCALARS}
    for metric in DISTRIBUTIONS:
        short = metric.vllm
        if short is None:
            continue
        d: Distribution = getattr(summary, metric.name)
        out[f"mean_{short}_ms"] = d.mean
        out[f"median_{short}_ms"] = d.p50
        out[f"std_{short}_ms"] = d.std
        out[f"min_{short}_ms"] = d.min
        out[f"max_{short}_ms"] = d.max
        for p in ("p50", "p75", "p90", "p95", "p99"):
            out[f"{p}_{short}_ms"] = getattr(d, p)
    return out


def vllm_bench_json(
    result: ReplayResult, lines: Iterable[Mapping[str, object]]
) -> dict[str, object]:
    """The content of ``vllm_bench.json``, keys in vLLM's order (see the module docstring).

    The per-request arrays list the measured requests (phase ``measure``) in record order,
    completed or not; ``lines`` are the records' ``requests.jsonl`` lines.

    Raises:
        ValueError: a measured, completed request's line has no token times (the run wrote
            ``requests.jsonl`` with ``token_times="none"``).
    """
    s = result.summary
    metrics = vllm_metrics(s)
    facts = run_facts(result.meta.config)
    arrays = _Arrays.of(line for line in lines if line.get("phase", "measure") == "measure")
    out: dict[str, object] = {
        # vLLM writes the wall-clock date of the run; a simulated run has none
        "date": None,
        "endpoint_type": "simclock",
        "backend": "simclock",
        "label": None,
        "model_id": facts.model_id,
        "tokenizer_id": None,
        "num_prompts": len(arrays.input_lens),
        # vLLM's --metadata KEY=VALUE pairs go here
        "simclock_version": result.meta.simclock_version,
        "seed": result.meta.seed,
        "policy": result.meta.config.get("policy"),
    }
    out |= _traffic(facts)
    out |= {
        "duration": _zero(metrics["duration_s"]),
        "completed": s.completed,
        "failed": arrays.failed,
        "total_input_tokens": s.total_input_tokens,
        "total_output_tokens": s.total_output_tokens,
        "request_throughput": _zero(metrics["request_throughput"]),
        "request_goodput": None if s.goodput is None else _zero(metrics["request_goodput"]),
        "output_throughput": _zero(metrics["output_throughput"]),
        "total_token_throughput": _zero(metrics["total_token_throughput"]),
        "input_lens": arrays.input_lens,
        "output_lens": arrays.output_lens,
        "ttfts": arrays.ttfts,
        "itls": arrays.itls,
        "latencies": arrays.latencies,
        "start_times": arrays.start_times,
        "queue_times": [0.0] * len(arrays.input_lens),
        "generated_texts": [""] * len(arrays.input_lens),
        "errors": arrays.errors,
        "max_output_tokens_per_s": arrays.max_output_tokens_per_s(),
        "max_concurrent_requests": arrays.max_concurrent_requests(),
        "rtfx": 0.0,
    }
    for short in (m.vllm for m in DISTRIBUTIONS if m.vllm is not None):
        for stat in ("mean", "median", "std", *(f"p{p}" for p in VLLM_PERCENTILES)):
            out[f"{stat}_{short}_ms"] = _zero(metrics[f"{stat}_{short}_ms"])
    return out


def _zero(value: object) -> float:
    """vLLM's value of an undefined figure: ``np.mean([] or 0)`` and friends give 0."""
    return 0.0 if value is None else float(value)  # type: ignore[arg-type]


def _traffic(facts: RunFacts) -> dict[str, object]:
    """``request_rate`` (``"inf"``: every request at once, or at the trace's own times, as
    vLLM writes it for a timed trace), ``burstiness`` (the gamma shape; 1 for Poisson,
    ``"inf"`` for constant gaps) and ``max_concurrency``."""
    rate: object = "inf" if facts.request_rate is None else facts.request_rate
    burstiness: object = facts.burstiness
    if isinstance(burstiness, float) and math.isinf(burstiness):
        burstiness = "inf"
    return {"request_rate": rate, "burstiness": burstiness, "max_concurrency": facts.concurrency}


class _Arrays:
    """The per-request arrays of ``vllm_bench.json``, in seconds as vLLM writes them."""

    def __init__(self) -> None:
        self.input_lens: list[int] = []
        self.output_lens: list[int] = []
        self.ttfts: list[float] = []
        self.itls: list[list[float]] = []
        self.latencies: list[float] = []
        self.start_times: list[float | None] = []
        self.errors: list[str] = []
        self.failed = 0
        # token instants (ms) of the completed requests, and their (start, end) in ms
        self._tokens: list[npt.NDArray[np.float64]] = []
        self._spans: list[tuple[float, float]] = []

    @classmethod
    def of(cls, lines: Iterable[Mapping[str, object]]) -> _Arrays:
        arrays = cls()
        for line in lines:
            arrays.add(line)
        return arrays

    def add(self, line: Mapping[str, object]) -> None:
        input_length = line["input_length"]
        arrival = line.get("arrival_ms")
        self.input_lens.append(input_length if isinstance(input_length, int) else 0)
        self.start_times.append(None if not isinstance(arrival, float | int) else arrival / 1000)
        ttft, e2e = line.get("ttft_ms"), line.get("e2e_ms")
        if line["status"] != "completed" or not isinstance(ttft, float | int):
            # vLLM's failed request: no tokens, zero latencies, an error text
            self.failed += 1
            self.output_lens.append(0)
            self.ttfts.append(0.0)
            self.itls.append([])
            self.latencies.append(0.0)
            reason = line.get("failure_reason") or line.get("rejection_reason")
            self.errors.append(f"{line['status']}: {reason}" if reason else str(line["status"]))
            return
        times = _token_times_ms(line)
        if not isinstance(e2e, float | int) or not isinstance(arrival, float | int):
            raise simclock.InternalError(f"request {line['request_id']!r} has no latency")
        self.output_lens.append(len(times))
        self.ttfts.append(ttft / _MS_PER_S)
        # (b - a) / 1000 for each pair of consecutive instants: the same float64 operations
        self.itls.append((np.diff(times) / _MS_PER_S).tolist())
        self.latencies.append(e2e / _MS_PER_S)
        self.errors.append("")
        self._tokens.append(times)
        self._spans.append((float(arrival), float(arrival) + e2e))

    def max_output_tokens_per_s(self) -> float:
        """vLLM's peak output rate: the most tokens of completed requests in one one-second
        bucket, buckets counted from the earliest start of a completed request."""
        if not self._spans:
            return 0.0
        start = min(s for s, _ in self._spans)
        times = np.concatenate(self._tokens)
        if not times.size:
            return 0.0
        # each instant's bucket is int((t - start) / 1000): truncated toward zero, as int() does
        buckets = ((times - start) / _MS_PER_S).astype(np.int64)
        return float(np.unique(buckets, return_counts=True)[1].max())

    def max_concurrent_requests(self) -> int:
        """vLLM's peak concurrency: the most completed requests in flight at once over
        ``[start, start + latency)`` (an end before a start at the same instant)."""
        if not self._spans:
            return 0
        starts = np.array([s for s, _ in self._spans])
        ends = np.array([e for _, e in self._spans])
        return peak_overlap(starts, ends)


def peak_overlap(starts: Sequence[float] | np.ndarray, ends: Sequence[float] | np.ndarray) -> int:
    """The most half-open intervals ``[start, end)`` that overlap at one instant."""
    times = np.concatenate([np.asarray(ends, dtype=np.float64), np.asarray(starts, np.float64)])
    deltas = np.concatenate([-np.ones(len(ends), np.int64), np.ones(len(starts), np.int64)])
    order = np.lexsort((deltas, times))  # by time, an end (-1) before a start (+1)
    if not order.size:
        return 0
    return int(max(0, np.cumsum(deltas[order]).max()))


def _token_times_ms(line: Mapping[str, object]) -> npt.NDArray[np.float64]:
    """The token instants of a ``requests.jsonl`` line, in ms, whichever way it holds them
    (a run ``[start, step, count]`` stands for ``start + step * k``, ``k < count``, in float64)."""
    full = line.get("token_times_ms")
    if isinstance(full, list):
        return np.array(full, dtype=np.float64)
    runs = line.get("token_time_runs_ms")
    if isinstance(runs, list):
        return np.concatenate(
            [
                float(start) + float(step) * np.arange(count, dtype=np.float64)
                for start, step, count in runs
            ]
            or [np.empty(0)]
        )
    raise ValueError(
        f"vllm export: request {line['request_id']!r} has no token times "
        "(requests.jsonl was written with token_times none)"
    )
