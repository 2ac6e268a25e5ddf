"""Property tests: random mutations of a valid file, for every reader.

Whatever the mutation, a read either returns a valid, non-empty workload or raises
``TraceFormatError`` whose text is one line ``file:line: field: problem``: never another
exception. And it stays within the memory bound of docs/reference/trace-limits.md:
tracemalloc's peak is at most ``16 MiB + 256 x file bytes + 512 x content ids made``.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadgen
from loadgen import ContentInterner, TraceFormatError, Workload
from loadgen._limits import MAX_INSTANT_MS

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MIB = 1 << 20

MOONCAKE_ROWS = [
    {"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},
    {"session_id": "s", "timestamp": 10, "input_length": 512, "output_length": 3,
     "hash_ids": [1]},
    {"session_id": "s", "delay": 2.5, "input_length": 1100, "output_length": 1,
     "hash_ids": [1, 3, 4]},
]  # fmt: skip
AGENTIC_ROWS = [
    {"request_id": "A", "timestamp": 0, "input_length": 600, "output_length": 4,
     "hash_ids": [1, 2]},
    {"request_id": "B", "wait_for": ["A"], "input_length": 512, "output_length": 1,
     "hash_ids": [1], "tool_wait_ms": 5},
    {"request_id": "C", "session_id": "x", "timestamp": 3, "input_length": 10,
     "output_length": 2, "hash_ids": [9]},
]  # fmt: skip
CALL = {"t": 0, "type": "n", "model": "m", "in": 100, "out": 2, "hash_ids": [1, 2],
        "api_time": 1.5}  # fmt: skip
PLAY = {
    "id": "p",
    "block_size": 64,
    "hash_id_scope": "local",
    "models": ["m"],
    "requests": [
        CALL,
        {"t": 0.5, "type": "subagent", "agent_id": "a1", "status": "completed",
         "requests": [{**CALL, "t": 0.2, "hash_ids": [1, 5]}]},
        {**CALL, "t": 3, "in": 130, "hash_ids": [1, 2, 3]},
    ],
}  # fmt: skip

SEEDS: dict[str, tuple[str, str]] = {
    "mooncake": ("m.jsonl", "".join(json.dumps(r) + "\n" for r in MOONCAKE_ROWS)),
    "mooncake-delta": ("d.jsonl", "".join(json.dumps(r) + "\n" for r in MOONCAKE_ROWS)),
    "agentic": ("a.jsonl", "".join(json.dumps(r) + "\n" for r in AGENTIC_ROWS)),
    "weka": ("w.jsonl", json.dumps(PLAY) + "\n" + json.dumps({**PLAY, "id": "q"}) + "\n"),
    "weka-json": ("w.json", json.dumps(PLAY, indent=1)),
    "azure": (
        "az.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:16:01,5000,0\n",
    ),
    "burstgpt": (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n"
        "118.5,ChatGPT,417,11,428,Conversation log\n",
    ),
    "vidur": (
        "v.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n0.5,2048,1\n1e1,1,0\n",
    ),
}

NASTY = [
    "1e400", "-1", "1.7e15", "9" * 40, "0", "null", "true", "[]", "{}", '"x"', "NaN",
    "Infinity", "[", "]", "{", "}", ",", ":", '"', "\n", "\r", "\r\n", "\t", " ", "\x00",
    "\ufeff", "\\u0000hash_ids:0", "0001-01-01 00:00:00", "9999-12-31 23:59:59.9999999",
    '"wait_for": ["A"]', '"requests": []', '"session_id": "s"', '"hash_ids": [1, 1, 1]',
    '"delay": 1e300', '"output_length": 1000000000000000', "TIMESTAMP", "Timestamp,Timestamp",
]  # fmt: skip


BIG = [0, 1, 63, 64, 65, 511, 512, 513, 10**6, 16_777_216, 16_777_217, 2**31, 2**63,
       10**15, 1.7e15, 3.2e12, 1e300, 10**40]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    """``text`` with one to four random edits: a number changed, replace, delete, insert,
    duplicate, cut."""
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 4]))):
        size = len(text)
        at = draw(st.integers(0, size))
        kinds = ["number", "number", "number", "insert", "replace", "delete", "duplicate", "cut"]
        kind = draw(st.sampled_from(kinds))
        snippet = draw(st.one_of(st.sampled_from(NASTY), st.text(max_size=3)))
        numbers = list(re.finditer(r"[0-9]+(?:\.[0-9]+)?", text))
        if kind == "number" and numbers:
            found = numbers[draw(st.integers(0, len(numbers) - 1))]
            value = draw(st.one_of(st.integers(0, 5000), st.sampled_from(BIG)))
            text = text[: found.start()] + str(value) + text[found.end() :]
        elif kind == "insert":
            text = text[:at] + snippet + text[at:]
        elif kind == "replace":
            end = min(size, at + draw(st.integers(1, 12)))
            text = text[:at] + snippet + text[end:]
        elif kind == "delete":
            text = text[:at] + text[min(size, at + draw(st.integers(1, 40))) :]
        elif kind == "duplicate":
            end = min(size, at + draw(st.integers(1, 200)))
            text = text[:end] + text[at:end] + text[end:]
        else:
            text = text[:at]
    return text


Reader = Callable[..., Workload]
READERS: dict[str, Reader] = {
    "mooncake": loadgen.read_mooncake,
    "mooncake-delta": loadgen.read_mooncake_delta,
    "agentic": loadgen.read_agentic,
    "weka": loadgen.read_weka,
    "weka-json": loadgen.read_weka,
    "azure": loadgen.read_azure,
    "burstgpt": loadgen.read_burstgpt,
    "vidur": loadgen.read_vidur,
}


def _check(name: str, text: str, *, auto: bool) -> None:
    filename, _ = SEEDS[name]
    path = Path(tempfile.mkdtemp(prefix="mutation")) / filename
    data = text.encode("utf-8", errors="surrogatepass")
    path.write_bytes(data)
    ids = ContentInterner()
    tracemalloc.start()
    try:
        try:
            if auto:
                workload = loadgen.read_trace(path, interner=ids)
            else:
                workload = READERS[name](path, interner=ids)
        except TraceFormatError as error:
            workload = None
            message = str(error)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = 16 * MIB + 256 * len(data) + 512 * ids.next_id
    assert peak <= bound, (peak, bound)
    if workload is None:
        assert "\n" not in message and "\r" not in message
        pattern = re.escape(str(path)) + r"(?:![^:]+)?:(\d+): (\S[^:]*): (.+)"
        assert re.fullmatch(pattern, message), message
        return
    _valid(workload)


def _valid(workload: Workload) -> None:
    assert len(workload.requests) >= 1
    names = set()
    for request in workload.requests:
        assert request.id not in names
        names.add(request.id)
        assert request.input_length >= 1 and request.output_length >= 0
        assert request.hash_ids.size == math.ceil(request.input_length / request.block_size)
        nb: Any = request.arrival.not_before_ms
        assert nb is None or 0 <= nb <= MAX_INSTANT_MS
        assert all(0 <= d.delay_ms <= MAX_INSTANT_MS for d in request.arrival.after)


def _test(name: str) -> Callable[..., None]:
    @SETTINGS
    @given(mutated(SEEDS[name][1]), st.booleans())
    def test(text: str, auto: bool) -> None:
        _check(name, text, auto=auto and name not in ("mooncake-delta",))

    test.__name__ = f"test_mutated_{name.replace('-', '_')}_reads_or_fails_in_one_line"
    return test


test_mutated_mooncake = _test("mooncake")
test_mutated_mooncake_delta = _test("mooncake-delta")
test_mutated_agentic = _test("agentic")
test_mutated_weka_jsonl = _test("weka")
test_mutated_weka_json = _test("weka-json")
test_mutated_azure = _test("azure")
test_mutated_burstgpt = _test("burstgpt")
test_mutated_vidur = _test("vidur")


def test_the_seed_files_are_valid() -> None:
    for name in SEEDS:
        _check(name, SEEDS[name][1], auto=False)
