"""Benchmark the trace readers: CPU time per read and per content id, old against new.

Each case reads one trace with the current reader and with its reference (the
record-by-record reading kept as the oracle: ``loadgen._mooncake.read_records`` for the
Mooncake formats, ``reference_csv`` below for the CSV formats), interleaved, ``--repeat``
times, and reports the medians of :func:`time.process_time`. Both results must be the same
workload (requests, content ids, arrivals, identities); the benchmark stops if not. Every
timed read starts from the same heap: the garbage collector has just run and no earlier
result is alive (a larger heap makes the collector run less often, which flatters readers
that allocate while it is on), and the readers take turns reading first.

Every other case also reads the plain Mooncake trace in the same rounds (interleaved, not
checked against anything), so that ``x moon`` compares CPU per content id with the
Mooncake reader measured under the same load: above 1.0 is more per content id.

``--baseline DIR`` adds a third column: the ``loadgen`` package found in ``DIR`` (for
example a checkout of an earlier commit), read the same way and compared the same way.

Cases (the bundled datasets, decompressed into a temporary folder so that the plain-file
reading is timed; or the files of a ``--data`` folder laid out as ``mooncake/``,
``azure_llm_2023/`` and ``weka_cc/``):

- ``mooncake``: the Mooncake conversation trace (12,031 rows);
- ``mooncake-delta``: the same file read as ``mooncake-delta``;
- ``mooncake-sessions``: the same rows given ``session_id``s (ten turns a session), a
  generated file; ``delta-sessions``: that file read as ``mooncake-delta``;
- ``agentic``: the same rows as an agentic DAG (each turn waits for the previous one);
  with ``--widen K``, each row's prompt K times as long and each content id K ids (shown
  as ``agentic-xK``): how the agentic reading's cost per content id falls as rows grow;
- ``azure``: the Azure 2023 conversation trace (19,366 rows);
- ``burstgpt``: the Azure rows written as a BurstGPT CSV (generated);
- ``vidur``: the Azure rows written as a Vidur request trace (generated);
- ``mooncake-weka``: every 25th play of the WEKA archive (20 plays, Claude Code sessions
  with their subagents), each call a Mooncake row with its 64-token content ids (a
  generated file, read with ``block_size=64``); ``agentic-weka``: the same calls as an
  agentic DAG (each call waits for what it waits for in a replay of the archive: the call
  before it in its conversation, or the call that launched its subagent; with its delay):
  agentic rows as agentic traffic has them, about 1,900 content ids a row, with the plain
  reading of the same ids beside them; ``mooncake-weka-512``, ``agentic-weka-512``: the
  same two files with every eighth content id, as the calls would be written with the
  Mooncake formats' own 512-token blocks (about 240 ids a row), read with ``block_size=512``;
- ``weka``: the WEKA Claude Code archive (63 M content ids), no reference; its rounds
  are ``--weka-repeat`` (a read takes seconds), after the same untimed warm-up round
  (the first read of a process grows its heap, and would be charged to whichever
  reader comes first); ``--weka-repeat 0`` leaves it out (as ``--repeat 0`` does the
  others).

Usage::

    python bench/read.py [--repeat 7] [--weka-repeat 4] [--data DIR] [--baseline DIR]
                         [--only azure] [--widen 1]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gc
import hashlib
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import loadgen
from loadgen import ArrivalRule, ContentInterner, Request, Workload
from loadgen._mooncake import read_records

Reader = Callable[[Path], Any]


def fingerprint(workload: Any) -> str:
    """A digest of everything a workload holds (works across package copies)."""

    def rule(a: Any) -> Any:
        return (a.not_before_ms, tuple((d.request_id, d.on, d.delay_ms) for d in a.after))

    def ident(i: Any) -> Any:
        return (i.conversation_id, i.turn_index, i.play_id, i.lane, i.phase, repr(i.lineage))

    rows = tuple(
        (
            r.id,
            r.input_length,
            r.output_length,
            r.block_size,
            np.asarray(r.hash_ids, dtype=np.int64).tobytes(),
            rule(r.arrival),
            ident(r.identity),
            r.model,
            r.recorded_service_ms,
        )
        for r in workload.requests
    )
    tol = workload.tolerated
    whole = (workload.source, workload.format, rows, repr(tol), len(workload.plays))
    return hashlib.sha256(repr(whole).encode()).hexdigest()  # small: nothing big stays alive


# --- reference readers (the oracles) ----------------------------------------------------


def _mooncake_reference(delta: bool, block: int = 512) -> Reader:
    def read(path: Path) -> Workload:
        src = path.name.split(".", 1)[0]
        return read_records(str(path), src, block, False, ContentInterner(), delta=delta)

    return read


def _azure_ticks(text: str) -> int:
    date, clock = text.strip().split(" ")
    year, month, day = (int(x) for x in date.split("-"))
    hms, _, fraction = clock.partition(".")
    hour, minute, second = (int(x) for x in hms.split(":"))
    days = dt.date(year, month, day).toordinal() - dt.date(1970, 1, 1).toordinal()
    seconds = ((days * 24 + hour) * 60 + minute) * 60 + second
    return seconds * 10_000_000 + int(fraction[:7].ljust(7, "0"))


def reference_csv(fmt: str) -> Reader:
    """A plain ``csv.DictReader`` reading of a well-formed CSV trace (no validation)."""

    def read(path: Path) -> Workload:
        src = path.name.split(".", 1)[0]
        ids = ContentInterner()
        rows: list[tuple[int, float | int, int, int]] = []
        dropped = 0
        with open(path, newline="", encoding="utf-8") as stream:
            for line, row in enumerate(csv.DictReader(stream), start=2):
                if fmt == "azure":
                    when: float | int = _azure_ticks(row["TIMESTAMP"])
                    prompt, output = int(row["ContextTokens"]), int(row["GeneratedTokens"])
                elif fmt == "vidur":
                    when = float(row["arrived_at"])
                    prompt = int(row["num_prefill_tokens"])
                    output = int(row["num_decode_tokens"])
                else:
                    when = float(row["Timestamp"])
                    prompt, output = int(row["Request tokens"]), int(row["Response tokens"])
                    if output == 0:
                        dropped += 1
                        continue
                rows.append((line, when, prompt, output))
        scale = 10_000.0 if fmt == "azure" else 1e-3
        origin = min(r[1] for r in rows)
        requests = tuple(
            Request(
                id=f"{src}:{line}",
                input_length=prompt,
                output_length=output,
                block_size=64,
                hash_ids=ids.privates(-(-prompt // 64)),
                arrival=ArrivalRule(not_before_ms=(when - origin) / scale),
            )
            for line, when, prompt, output in rows
        )
        tolerated = loadgen.Tolerated(dropped_failures=dropped)
        return Workload(requests=requests, source=src, format=fmt, tolerated=tolerated)

    return read


# --- inputs ------------------------------------------------------------------------------


def _sessions_file(mooncake: Path, folder: Path) -> Path:
    out = folder / "sessions.jsonl"
    with open(mooncake, "rb") as src, open(out, "w") as dst:
        for index, raw in enumerate(src):
            row = json.loads(raw)
            row["session_id"] = f"s{index // 10}"
            if index % 10:
                row.pop("timestamp")
                row["delay"] = 1000
            dst.write(json.dumps(row) + "\n")
    return out


def _agentic_file(mooncake: Path, folder: Path, widen: int = 1) -> Path:
    """The Mooncake rows as an agentic DAG; with ``widen`` K, each row's prompt K times as
    long and each content id ``x`` K ids (``x * K`` to ``x * K + K - 1``), of which the
    reader keeps those the longer prompt needs."""
    out = folder / "agentic.jsonl"
    with open(mooncake, "rb") as src, open(out, "w") as dst:
        for index, raw in enumerate(src):
            row = json.loads(raw)
            if widen > 1:
                row["input_length"] *= widen
                row["hash_ids"] = [x * widen + j for x in row["hash_ids"] for j in range(widen)]
            row["request_id"] = f"r{index}"
            row["session_id"] = f"s{index // 10}"
            if index % 10:
                row["wait_for"] = [f"r{index - 1}"]
                row["delay"] = 1000
            dst.write(json.dumps(row) + "\n")
    return out


def _weka_files(weka: Path, folder: Path) -> tuple[Path, Path]:
    """Every 25th play of the WEKA archive as Mooncake rows and as agentic rows."""
    workload = loadgen.read_weka(weka)
    requests = workload.requests
    rows = [i for play in workload.plays[::25] for i in play.request_indices]
    names = {requests[i].id: f"r{n}" for n, i in enumerate(rows)}
    sessions: dict[str | None, str] = {}
    plain, agentic = folder / "weka-rows.jsonl", folder / "weka-agentic.jsonl"
    with open(plain, "w") as plain_out, open(agentic, "w") as agentic_out:
        for i in rows:
            r = requests[i]
            head = {
                "timestamp": r.arrival.not_before_ms,
                "input_length": r.input_length,
                "output_length": r.output_length,
                "hash_ids": r.hash_ids.tolist(),
            }
            plain_out.write(json.dumps(head) + "\n")
            talk = r.identity.conversation_id
            row = {**head, "request_id": names[r.id]}
            row["session_id"] = sessions.setdefault(talk, f"s{len(sessions)}")
            if r.arrival.after:
                del row["timestamp"]
                row["wait_for"] = [names[d.request_id] for d in r.arrival.after]
                row["delay"] = r.arrival.after[0].delay_ms
            agentic_out.write(json.dumps(row) + "\n")
    return plain, agentic


def _coarser(rows: Path, out: Path, step: int) -> Path:
    """``rows`` with every ``step``-th content id of each row: one id per ``step`` blocks,
    as the same prompts would be written with blocks ``step`` times as large."""
    with open(rows, "rb") as src, open(out, "w") as dst:
        for raw in src:
            row = json.loads(raw)
            row["hash_ids"] = row["hash_ids"][::step]
            dst.write(json.dumps(row) + "\n")
    return out


def _azure_requests(azure: Path) -> Iterator[tuple[float, int, int]]:
    """Each Azure row's seconds from the first row, prompt and output lengths."""
    with open(azure, newline="") as src:
        first: int | None = None
        for row in csv.DictReader(src):
            ticks = _azure_ticks(row["TIMESTAMP"])
            first = ticks if first is None else first
            seconds = (ticks - first) / 10_000_000
            yield seconds, int(row["ContextTokens"]), int(row["GeneratedTokens"])


def _burstgpt_file(azure: Path, folder: Path) -> Path:
    out = folder / "burstgpt.csv"
    with open(out, "w", newline="") as dst:
        writer = csv.writer(dst)
        writer.writerow(
            ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
        )
        for seconds, prompt, output in _azure_requests(azure):
            writer.writerow(
                [seconds, "ChatGPT", prompt, output, prompt + output, "Conversation log"]
            )
    return out


def _vidur_file(azure: Path, folder: Path) -> Path:
    out = folder / "vidur.csv"
    with open(out, "w", newline="") as dst:
        writer = csv.writer(dst)
        writer.writerow(["arrived_at", "num_prefill_tokens", "num_decode_tokens"])
        writer.writerows(_azure_requests(azure))
    return out


def _baseline(folder: Path | None) -> ModuleType | None:
    if folder is None:
        return None
    spec = importlib.util.spec_from_file_location(
        "loadgen_baseline", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline: no package in {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["loadgen_baseline"] = module
    spec.loader.exec_module(module)
    return module


# --- measuring ---------------------------------------------------------------------------


def _cpu(read: Reader, path: Path) -> tuple[float, Any]:
    gc.collect()  # every read starts from a settled heap, whatever ran before it
    start = time.process_time()
    result = read(path)
    return time.process_time() - start, result


def _plain(compressed: Path, folder: Path) -> Path:
    """Decompress a bundled ``.xz`` dataset into ``folder``; return the plain file."""
    out = folder / compressed.name.removesuffix(".xz")
    with loadgen.open_binary(compressed) as stream:
        out.write_bytes(stream.read())
    return out


def _rounds(text: str) -> int:
    """A number of timed rounds: 0 leaves the cases it counts for out."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _widen(text: str) -> int:
    """How many times wider the ``agentic`` case's rows are (1: the Mooncake rows)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=_rounds, default=7)
    parser.add_argument("--weka-repeat", type=_rounds, default=4)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--only", action="append", default=None)
    parser.add_argument("--widen", type=_widen, default=1)
    args = parser.parse_args(argv)
    base = _baseline(args.baseline)
    with tempfile.TemporaryDirectory(prefix="bench-read") as scratch:
        return _run(args, base, Path(scratch))


def _run(args: argparse.Namespace, base: ModuleType | None, folder: Path) -> int:
    if args.data is None:
        mooncake = _plain(loadgen.dataset_path("mooncake-conversation"), folder)
        azure = _plain(loadgen.dataset_path("azure-conv-2023"), folder)
        weka = loadgen.dataset_path("weka-claude-code")
    else:
        mooncake = args.data / "mooncake" / "conversation_trace.jsonl"
        azure = args.data / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
        weka = args.data / "weka_cc" / "weka_cc_traces_v8_shared.tar.xz"
    wanted = {
        "mooncake-sessions",
        "delta-sessions",
        "agentic",
        "burstgpt",
        "vidur",
        "mooncake-weka",
        "agentic-weka",
        "mooncake-weka-512",
        "agentic-weka-512",
    }
    if args.only:
        wanted &= set(args.only)

    def generated(names: set[str], make: Callable[[], Path]) -> Path:
        """A generated input, written only when a case that reads it is run."""
        return make() if names & wanted else folder / "unused"

    sessions = generated(
        {"mooncake-sessions", "delta-sessions"}, lambda: _sessions_file(mooncake, folder)
    )
    weka_cases = {"mooncake-weka", "agentic-weka", "mooncake-weka-512", "agentic-weka-512"}
    weka_rows, weka_agentic = (
        _weka_files(weka, folder) if weka_cases & wanted else (folder / "unused", folder / "unused")
    )
    weka_rows_512 = generated(
        {"mooncake-weka-512"}, lambda: _coarser(weka_rows, folder / "weka-rows-512.jsonl", 8)
    )
    weka_agentic_512 = generated(
        {"agentic-weka-512"},
        lambda: _coarser(weka_agentic, folder / "weka-agentic-512.jsonl", 8),
    )

    def block_64(read: Reader) -> Reader:
        """``read`` with 64-token content ids (the WEKA archive's)."""
        return lambda path: read(path, block_size=64)  # type: ignore[call-arg]

    cases: list[tuple[str, Path, Reader, Reader | None, Reader | None]] = [
        (
            "mooncake",
            mooncake,
            loadgen.read_mooncake,
            _mooncake_reference(False),
            base.read_mooncake if base else None,
        ),
        (
            "mooncake-delta",
            mooncake,
            loadgen.read_mooncake_delta,
            _mooncake_reference(True),
            base.read_mooncake_delta if base else None,
        ),
        (
            "mooncake-sessions",
            sessions,
            loadgen.read_mooncake,
            _mooncake_reference(False),
            base.read_mooncake if base else None,
        ),
        (
            "delta-sessions",
            sessions,
            loadgen.read_mooncake_delta,
            _mooncake_reference(True),
            base.read_mooncake_delta if base else None,
        ),
        (
            "agentic",
            generated({"agentic"}, lambda: _agentic_file(mooncake, folder, args.widen)),
            loadgen.read_agentic,
            None,
            base.read_agentic if base else None,
        ),
        (
            "mooncake-weka",
            weka_rows,
            block_64(loadgen.read_mooncake),
            _mooncake_reference(False, 64),
            block_64(base.read_mooncake) if base else None,
        ),
        (
            "agentic-weka",
            weka_agentic,
            block_64(loadgen.read_agentic),
            None,
            block_64(base.read_agentic) if base else None,
        ),
        (
            "mooncake-weka-512",
            weka_rows_512,
            loadgen.read_mooncake,
            _mooncake_reference(False),
            base.read_mooncake if base else None,
        ),
        (
            "agentic-weka-512",
            weka_agentic_512,
            loadgen.read_agentic,
            None,
            base.read_agentic if base else None,
        ),
        (
            "azure",
            azure,
            loadgen.read_azure,
            reference_csv("azure"),
            base.read_azure if base else None,
        ),
        (
            "burstgpt",
            generated({"burstgpt"}, lambda: _burstgpt_file(azure, folder)),
            loadgen.read_burstgpt,
            reference_csv("burstgpt"),
            base.read_burstgpt if base else None,
        ),
        (
            "vidur",
            generated({"vidur"}, lambda: _vidur_file(azure, folder)),
            loadgen.read_vidur,
            reference_csv("vidur"),
            base.read_vidur if base else None,
        ),
        ("weka", weka, loadgen.read_weka, None, base.read_weka if base else None),
    ]
    header = (
        f"{'case':<18} {'rows':>7} {'ids':>10} {'new s':>8} {'ref s':>8} {'x ref':>6}"
        f" {'base s':>8} {'x base':>7} {'ns/id':>7} {'x moon':>7}"
    )
    print(header)
    print("-" * len(header))
    for name, path, new, ref, old in cases:
        if args.only and name not in args.only:
            continue
        repeat = args.weka_repeat if name == "weka" else args.repeat
        if repeat == 0:  # no timed round: the case is left out (not even warmed up)
            continue
        moon = None if name in ("mooncake", "weka") else loadgen.read_mooncake
        readers = {"new": new, "ref": ref, "base": old, "moon": moon}
        times: dict[str, list[float]] = {k: [] for k, r in readers.items() if r is not None}
        prints: dict[str, Any] = {}
        counts = (0, 0)  # rows and content ids of the new reading
        moon_ids = 0
        for round_ in range(repeat + 1):
            # Interleaved, the order reversed every other round: a read can leave the heap
            # larger or smaller for the next one (WEKA reads allocate gigabytes).
            order = list(readers.items())
            for key, read in order[:: -1 if round_ % 2 else 1]:
                if read is None:
                    continue
                seconds, result = _cpu(read, mooncake if key == "moon" else path)
                if round_:  # the first round warms up, untimed
                    times[key].append(seconds)
                if key == "moon":
                    moon_ids = sum(int(r.hash_ids.size) for r in result.requests)
                elif key not in prints:
                    prints[key] = fingerprint(result)
                if key == "new":
                    requests = result.requests
                    counts = (len(requests), sum(int(r.hash_ids.size) for r in requests))
                    del requests
                del result  # no reading's result stays alive while another is timed
        for key, value in prints.items():
            if value != prints["new"]:
                raise SystemExit(f"{name}: the {key} reading differs from the new one")
        rows, ids = counts
        med = {k: statistics.median(v) for k, v in times.items()}

        def cell(key: str, med: dict[str, float] = med) -> str:
            return f"{med[key]:8.3f}" if key in med else f"{'-':>8}"

        def ratio(key: str, med: dict[str, float] = med) -> str:
            return f"{med[key] / med['new']:6.1f}" if key in med else f"{'-':>6}"

        per_id = med["new"] / max(ids, 1)
        versus = f"{per_id / (med['moon'] / moon_ids):7.2f}" if "moon" in med else f"{'-':>7}"
        label = f"{name}-x{args.widen}" if name == "agentic" and args.widen > 1 else name
        print(
            f"{label:<18} {rows:>7} {ids:>10} {cell('new')} {cell('ref')}"
            f" {ratio('ref')} {cell('base')} {ratio('base'):>7}"
            f" {per_id * 1e9:7.0f} {versus}"
        )
    print(
        f"(CPU seconds, medians of {args.repeat} interleaved runs after one warm-up round;"
        f" weka {args.weka_repeat})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
