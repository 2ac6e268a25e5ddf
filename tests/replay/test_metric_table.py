"""The summary's metrics come from tables (``replay._metric_table``): the report computes
every distribution, ``summary.json`` and the console table name every metric from them."""

from __future__ import annotations

import typing

import attrs

from replay import Distribution, Summary, format_table, summary_json
from replay._columns import _FLOAT_COLUMNS
from replay._metric_table import DISTRIBUTIONS, SCALARS

from .mooncake_e2e import replay


def test_the_table_lists_every_distribution_of_the_summary_in_order() -> None:
    hints = typing.get_type_hints(Summary)
    fields = [f.name for f in attrs.fields(Summary) if hints[f.name] is Distribution]
    assert [m.name for m in DISTRIBUTIONS] == fields


def test_every_column_of_the_table_is_a_float_column_of_the_records() -> None:
    columns = [m.column for m in DISTRIBUTIONS if m.column is not None]
    assert set(columns) <= set(_FLOAT_COLUMNS)
    assert len(columns) == len(set(columns))


def test_the_files_and_the_table_name_every_row_as_the_table_says() -> None:
    result = replay("round_robin")
    summary = summary_json(result)
    assert list(summary["distributions"]) == [m.name for m in DISTRIBUTIONS]  # type: ignore[call-overload]
    metrics = summary["metrics"]
    assert isinstance(metrics, dict)
    for m in DISTRIBUTIONS:
        d = getattr(result.summary, m.name)
        assert summary["distributions"][m.name] == d.as_dict()  # type: ignore[index]
        if m.vllm is not None:
            assert metrics[f"mean_{m.vllm}_ms"] == d.mean
            assert metrics[f"p99_{m.vllm}_ms"] == d.p99
    vllm = [k.removeprefix("mean_").removesuffix("_ms") for k in metrics if k.startswith("mean_")]
    assert vllm == [m.vllm for m in DISTRIBUTIONS if m.vllm is not None]
    table = format_table(result)
    headings = [m.heading for m in DISTRIBUTIONS if m.heading is not None]
    assert [h for h in headings if f" {h} " in table] == headings
    positions = [table.index(f" {h} ") for h in headings]
    assert positions == sorted(positions)  # in the table's order
    for m in DISTRIBUTIONS:
        if m.label is not None:
            assert f"Mean {m.label} (ms):" in table


def test_the_figures_are_summary_attributes_and_the_files_name_them_in_order() -> None:
    names = {f.name for f in attrs.fields(Summary)}
    assert [m.name for m in SCALARS if m.name not in names] == ["request_goodput"]
    result = replay("round_robin")
    metrics = summary_json(result)["metrics"]
    assert isinstance(metrics, dict)
    assert list(metrics)[: len(SCALARS)] == [m.name for m in SCALARS]
    for m in SCALARS:
        if m.name != "request_goodput":
            assert metrics[m.name] == getattr(result.summary, m.name)
    assert metrics["request_goodput"] is None  # no SLO, no goodput
    table = format_table(result)
    labels = [m.label for m in SCALARS if m.label is not None]
    positions = [table.index(f"{label}:") for label in labels]
    assert positions == sorted(positions)
