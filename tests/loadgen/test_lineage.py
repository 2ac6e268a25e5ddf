"""Conversation lineage (REFERENCE-workloads §6): rules, linear derivation, JSON."""

from __future__ import annotations

import json

import pytest

import loadgen
from loadgen import Lineage


def test_roots_parents_and_roots_of_roots() -> None:
    result = loadgen.derive_lineage({"m": [], "a": ["m"], "b": ["a"]})
    assert result.lineages == {
        "m": Lineage("m"),
        "a": Lineage("m", "m"),
        "b": Lineage("m", "a"),
    }


def test_ambiguous_parent_gives_no_lineage_to_it_and_below() -> None:
    result = loadgen.derive_lineage({"m": [], "n": [], "a": ["m", "n"], "b": ["a"], "c": ["m"]})
    assert result.lineages["a"] is None
    assert result.lineages["b"] is None
    assert result.lineages["c"] == Lineage("m", "m")


def test_self_parent_and_cycles_give_no_lineage() -> None:
    result = loadgen.derive_lineage({"s": ["s"], "x": ["y"], "y": ["x"], "z": ["x"]})
    assert result.lineages == {"s": None, "x": None, "y": None, "z": None}


def test_a_50000_deep_chain_takes_50000_parent_steps() -> None:
    n = 50_000
    candidates = {"c0": [], **{f"c{i}": [f"c{i - 1}"] for i in range(1, n)}}
    # Resolve from the deepest end first: the walk goes down once, then unwinds.
    deepest_first = dict(reversed(list(candidates.items())))
    result = loadgen.derive_lineage(deepest_first)
    assert result.parent_link_steps == n - 1
    assert result.lineages[f"c{n - 1}"] == Lineage("c0", f"c{n - 2}")


def test_a_50000_wide_fan_out_takes_50000_parent_steps() -> None:
    n = 50_000
    candidates = {"root": [], **{f"k{i}": ["root"] for i in range(n)}}
    result = loadgen.derive_lineage(candidates)
    assert result.parent_link_steps == n
    assert result.lineages["k7"] == Lineage("root", "root")


@pytest.mark.parametrize("n", [1_000, 10_000, 50_000])
def test_steps_grow_linearly_with_chain_length(n: int) -> None:
    candidates = {f"c{i}": ([f"c{i - 1}"] if i else []) for i in range(n)}
    steps = loadgen.derive_lineage(dict(reversed(list(candidates.items())))).parent_link_steps
    assert steps == n - 1


def test_json_omits_absent_lineage_and_the_parent_of_roots() -> None:
    assert loadgen.lineage_to_json(None) is None
    root = loadgen.lineage_to_json(Lineage("m"))
    assert root == {"schema": "conversation-lineage", "version": 1, "root_conversation_id": "m"}
    child = Lineage("m", "a")
    text = json.dumps(loadgen.lineage_to_json(child))
    assert loadgen.lineage_from_json(json.loads(text)) == child
    assert loadgen.lineage_from_json(root) == Lineage("m")


def test_json_round_trips_a_record_without_lineage_byte_for_byte() -> None:
    record = {"id": "r", "ttft_ms": 1.5}
    lineage = loadgen.lineage_from_json(record.get("lineage"))
    out = dict(record)
    encoded = loadgen.lineage_to_json(lineage)
    if encoded is not None:
        out["lineage"] = encoded
    assert json.dumps(out) == json.dumps(record)


def test_other_schema_or_version_is_rejected() -> None:
    with pytest.raises(loadgen.WorkloadConfigError) as info:
        loadgen.lineage_from_json({"schema": "x", "version": 2, "root_conversation_id": "m"})
    assert str(info.value) == "lineage: unsupported schema 'x' version 2"
