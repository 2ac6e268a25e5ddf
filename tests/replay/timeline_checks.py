"""Structural checks of a Chrome trace-event timeline (shared by the timeline tests)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any


def _within_slice(slices: list[tuple[float, float]], ts: float) -> bool:
    return any(start <= ts <= start + dur for start, dur in slices)


def check_timeline(data: bytes) -> dict[str, Any]:
    """Validate ``data`` as a well-formed timeline and return the parsed document.

    Checks: JSON object form; metadata first; non-decreasing timestamps after it; slices
    (``X``) nest properly on each thread; async spans (``b``/``e``) match by name and nest on
    each (process, id) track; counters' timestamps strictly increase per (process, name);
    each flow has one start and one end, each bound inside a slice of its thread.
    """
    doc = json.loads(data)
    events: list[dict[str, Any]] = doc["traceEvents"]
    seen_data = False
    last_ts = -1.0
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    stacks: dict[tuple[int, str, str], list[tuple[str, float]]] = defaultdict(list)
    counters: dict[tuple[int, str], float] = {}
    flows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        ph = event["ph"]
        if ph == "M":
            assert not seen_data, "metadata after data events"
            continue
        seen_data = True
        ts = float(event["ts"])
        assert ts >= last_ts, f"timestamps go back at {event}"
        last_ts = ts
        if ph == "X":
            assert event["dur"] >= 0
            slices[(event["pid"], event["tid"])].append((ts, float(event["dur"])))
        elif ph in ("b", "e"):
            key = (event["pid"], event["cat"], event["id2"]["local"])
            if ph == "b":
                stacks[key].append((event["name"], ts))
            else:
                assert stacks[key], f"end without begin: {event}"
                name, start = stacks[key].pop()
                assert name == event["name"], f"{name} closed by {event['name']}"
                assert start <= ts
        elif ph == "C":
            key2 = (event["pid"], event["name"])
            assert counters.get(key2, -1.0) < ts, f"counter not increasing: {event}"
            counters[key2] = ts
        elif ph in ("s", "f"):
            flows[event["id"]].append(event)
        else:
            assert ph == "i", f"unexpected phase {ph}"
    assert all(not stack for stack in stacks.values()), "unclosed async spans"
    for track in slices.values():
        ends: list[float] = []
        for start, dur in sorted(track, key=lambda s: (s[0], -s[1])):
            while ends and ends[-1] <= start and not (ends[-1] == start and dur == 0):
                ends.pop()
            if ends:
                assert start + dur <= ends[-1], "slices overlap without nesting"
            ends.append(start + dur)
    for pair in flows.values():
        assert [e["ph"] for e in pair] == ["s", "f"]
        source, target = pair
        assert source["ts"] <= target["ts"]
        assert _within_slice(slices[(source["pid"], source["tid"])], source["ts"])
        assert _within_slice(slices[(target["pid"], target["tid"])], target["ts"])
    return doc
