"""Reader for Weka / AgentX / kv-cache-tester traces: one JSON object per play (§2.4)."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import attrs
import numpy as np
import numpy.typing as npt

from ._exceptions import TraceFormatError, WorkloadConfigError
from ._fields import (
    Located,
    check_id_list,
    decode_json,
    fit_ids,
    fmt_number,
    render,
    source_label,
)
from ._intern import ContentInterner, LocalScope
from ._limits import MAX_INSTANT_MS, MAX_MEMBER_BYTES, instant_problem
from ._lineage import derive_lineage
from ._request import ArrivalRule, Dep, Identity, Request
from ._weka_scan import PLACEHOLDER, ScannedIds, scan_hash_ids
from ._workload import Play, SubagentGroup, Tolerated, Workload, check_source

__all__ = ("read_weka",)

NestedBasis = Literal["auto", "relative", "absolute"]
SubagentJoin = Literal["none", "recorded"]
Pacing = Literal["recorded", "dependencies"]

_EPSILON_MS = 1000.0
_BASIS_TOLERANCE_S = 1e-6
_CALL_TYPES = ("n", "s")

Ids = npt.NDArray[np.int64]


def _ms(seconds: float) -> float:
    # Trace times are decimal seconds; rounding to the nanosecond removes float noise
    # such as 134.227 * 1000 = 134227.00000000001.
    return round(seconds * 1000.0, 6)


@attrs.define(eq=False)
class _Call:
    """A model call while its play is read."""

    request_id: str
    conversation: str
    turn: int
    start_ms: float
    end_ms: float
    input_length: int
    output_length: int
    ids: Ids
    model: str
    service_ms: float | None
    after: list[Dep]
    where: str = ""  # the JSON path of its ``t``, for errors


@attrs.define(eq=False)
class _Join:
    """A pending ``subagent_join="recorded"`` edge: the first later parent call at or after
    ``threshold_ms`` also waits for ``last``."""

    threshold_ms: float
    last: _Call


@attrs.define(eq=False)
class _PlayReader:
    """Validates one play object and turns it into calls (the §2.4 rules)."""

    loc: Located
    play_id: str
    block: int
    scope: LocalScope
    scanned: ScannedIds | None
    nested_basis: NestedBasis
    subagent_join: SubagentJoin
    calls: list[_Call] = attrs.field(factory=list)
    groups: list[SubagentGroup] = attrs.field(factory=list)
    agent_paths: dict[str, str] = attrs.field(factory=dict)
    candidates: dict[str, list[str]] = attrs.field(factory=dict)
    turns: dict[str, int] = attrs.field(factory=dict)
    tails: int = 0
    surplus: int = 0

    def conversation(
        self,
        entries_loc: Located,
        key: str,
        name: str,
        models: list[str],
        marker_ms: float | None,
        basis: Literal["relative", "absolute"] | None,
        spawner: _Call | None,
    ) -> None:
        """Read the entries of one conversation (main, or a subagent group)."""
        entries = entries_loc.obj.get(key)
        if not isinstance(entries, list):
            raise entries_loc.error(key, f"must be a list, got {render(entries)}")
        conversation = f"{self.play_id}/{name}"
        self.candidates.setdefault(conversation, [])
        if spawner is not None:
            self.candidates[conversation].append(spawner.conversation)
        prefix = f"{entries_loc.path}{key}"
        previous: _Call | None = None
        previous_t: float | None = None
        joins: list[_Join] = []
        for index, entry in enumerate(entries):
            loc = Located(self.loc.file, self.loc.line, entry, f"{prefix}[{index}].")
            kind = loc.string("type")
            if kind in _CALL_TYPES:
                t = loc.number("t")
                if previous_t is not None and t < previous_t:
                    raise loc.error(
                        "t",
                        f"{fmt_number(t)} is earlier than the previous call's "
                        f"{fmt_number(previous_t)} in conversation {conversation!r}",
                    )
                previous_t = t
                start = self._start(loc, t, marker_ms, basis)
                call = self._call(loc, conversation, models, start)
                pred = previous if previous is not None else spawner
                if pred is not None:
                    call.after.append(_edge(call.start_ms, pred))
                for join in [j for j in joins if call.start_ms >= j.threshold_ms]:
                    call.after.append(
                        Dep(join.last.request_id, "completion", _gap(call.start_ms, join.last))
                    )
                    joins.remove(join)
                self.calls.append(call)
                previous = call
            elif kind == "subagent":
                pending = self._marker(loc, conversation, models, marker_ms, basis, previous)
                if pending is not None:
                    joins.append(pending)
            else:
                raise loc.error("type", f"unknown entry type {kind!r}")

    def _start(
        self,
        loc: Located,
        t: float,
        marker_ms: float | None,
        basis: Literal["relative", "absolute"] | None,
    ) -> float:
        if marker_ms is None or basis == "absolute":
            return _ms(t)
        return round(marker_ms + _ms(t), 6)

    def _call(self, loc: Located, conversation: str, models: list[str], start: float) -> _Call:
        model = loc.required_string("model")
        if models and model not in models:
            raise loc.error("model", f"{model!r} is not in the play's models")
        prompt = loc.integer("in", minimum=1)
        output = loc.integer("out", minimum=0)
        kept, extra, tail = fit_ids(self._ids(loc), prompt, self.block, loc)
        self.surplus += extra
        if tail:
            kept = np.concatenate((kept, np.array([self.scope.private()], dtype=np.int64)))
            self.tails += 1
        api = loc.optional_number("api_time")
        if api is not None and _ms(api) > MAX_INSTANT_MS:
            raise loc.error("api_time", instant_problem(_ms(api)))
        for key in ("think_time", "ttft"):
            loc.optional_number(key)
        end = round(start + _ms(api), 6) if api is not None else start
        turn = self.turns.get(conversation, 0)
        self.turns[conversation] = turn + 1
        return _Call(
            request_id=f"{conversation}/{turn}",
            conversation=conversation,
            turn=turn,
            start_ms=start,
            end_ms=end,
            input_length=prompt,
            output_length=output,
            ids=kept,
            model=model,
            service_ms=_ms(api) if api is not None else None,
            after=[],
            where=f"{loc.path}t",
        )

    def _ids(self, loc: Located) -> Ids:
        """The call's interned ids, all of them (the length rule applies next)."""
        value = loc.obj.get("hash_ids")
        if self.scanned is not None and isinstance(value, str) and value.startswith(PLACEHOLDER):
            return self.scanned.ids[int(value[len(PLACEHOLDER) :])]
        if value is None:
            raise loc.error("hash_ids", "required")
        raw = check_id_list(value, None, lambda p, i: loc.error(_item("hash_ids", i), p))
        return self.scope.intern_ints(raw)

    def _marker(
        self,
        loc: Located,
        parent_conversation: str,
        models: list[str],
        parent_marker_ms: float | None,
        parent_basis: Literal["relative", "absolute"] | None,
        spawner: _Call | None,
    ) -> _Join | None:
        t = loc.number("t")
        agent_id = loc.required_string("agent_id")
        if "#" in agent_id or "/" in agent_id:
            raise loc.error("agent_id", f"must not contain '#' or '/', got {render(agent_id)}")
        if agent_id == "main":
            raise loc.error("agent_id", "'main' names the main conversation")
        earlier = self.agent_paths.get(agent_id)
        if earlier is not None:
            raise loc.error("agent_id", f"duplicate of {earlier} ({agent_id!r})")
        self.agent_paths[agent_id] = loc.path[:-1]
        status = loc.string("status")
        if status not in ("completed", "async_launched"):
            raise loc.error(
                "status", f"must be 'completed' or 'async_launched', got {render(status)}"
            )
        duration = loc.obj.get("duration_ms")
        duration_ms = None if duration is None else float(loc.integer("duration_ms", minimum=0))
        group_models = _models(loc, inherited=models)
        if "requests" not in loc.obj:
            raise loc.error("requests", "required")
        if spawner is None:
            raise loc.error("", "subagent marker precedes every call of its parent conversation")
        marker_ms = self._start(loc, t, parent_marker_ms, parent_basis)
        basis = self._basis(loc, marker_ms)
        conversation = f"{self.play_id}/{agent_id}"
        self.groups.append(
            SubagentGroup(
                play_id=self.play_id,
                agent_id=agent_id,
                conversation_id=conversation,
                basis=basis,
                status="completed" if status == "completed" else "async_launched",
                parent_conversation_id=parent_conversation,
            )
        )
        first = len(self.calls)
        self.conversation(loc, "requests", agent_id, group_models, marker_ms, basis, spawner)
        own = [c for c in self.calls[first:] if c.conversation == conversation]
        if self.subagent_join != "recorded" or status != "completed" or not own:
            return None
        last = own[-1]
        threshold = marker_ms + duration_ms if duration_ms is not None else last.end_ms
        return _Join(threshold_ms=round(threshold, 6), last=last)

    def _basis(self, loc: Located, marker_ms: float) -> Literal["relative", "absolute"]:
        entries = loc.obj.get("requests")
        if not isinstance(entries, list):
            raise loc.error("requests", f"must be a list, got {render(entries)}")
        early: int | None = None
        early_t = 0.0
        for index, entry in enumerate(entries):
            t = entry.get("t") if isinstance(entry, dict) else None
            if (
                isinstance(t, (int, float))
                and not isinstance(t, bool)
                and _ms(t) < marker_ms - _BASIS_TOLERANCE_S * 1000
            ):
                early, early_t = index, float(t)
                break
        if self.nested_basis == "relative":
            return "relative"
        if self.nested_basis == "absolute":
            if early is not None:
                raise loc.error(
                    f"requests[{early}].t",
                    f"{fmt_number(early_t)} is before its subagent marker at "
                    f"{fmt_number(marker_ms / 1000)}; nested_basis='absolute' cannot hold",
                )
            return "absolute"
        return "relative" if early is not None else "absolute"


def _item(key: str, index: int | None) -> str:
    return key if index is None else f"{key}[{index}]"


def _gap(start_ms: float, pred: _Call) -> float:
    return max(0.0, round(start_ms - pred.end_ms, 6))


def _edge(start_ms: float, pred: _Call) -> Dep:
    """The sequence / spawn rule: after completion unless it overlaps by more than ε."""
    if start_ms >= pred.end_ms - _EPSILON_MS:
        return Dep(pred.request_id, "completion", _gap(start_ms, pred))
    return Dep(pred.request_id, "start", max(0.0, round(start_ms - pred.start_ms, 6)))


def _models(loc: Located, *, inherited: list[str]) -> list[str]:
    value = loc.obj.get("models")
    if value is None:
        return inherited
    if not isinstance(value, list) or not all(isinstance(m, str) and m for m in value):
        raise loc.error("models", f"must be a list of model names, got {render(value)}")
    return list(value) if value else inherited


def _documents(path: Path, file: str) -> Iterator[tuple[str, int, bytes]]:
    """Yield ``(file label, first line, bytes)`` of each play object, in corpus order."""
    if path.is_dir():
        found = sorted(
            (p for p in path.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl")),
            key=lambda p: p.relative_to(path).as_posix(),
        )
        for one in found:
            if one.suffix == ".jsonl":
                yield from _lines(one, str(one))
            else:
                _check_size(str(one), one.stat().st_size)
                yield from _split(str(one), one.suffix, one.read_bytes())
        return
    name = path.name.lower()
    if name.endswith(".json"):
        _check_size(file, path.stat().st_size)
        yield from _split(file, ".json", path.read_bytes())
        return
    if name.endswith(".jsonl"):
        yield from _lines(path, file)
        return
    try:
        archive = tarfile.open(path, "r:*")  # noqa: SIM115 - closed by the with below
    except (tarfile.TarError, OSError) as exc:
        raise TraceFormatError(file, 1, "-", f"not a readable tar archive ({exc})") from None
    with archive:
        try:
            for member in archive:
                suffix = Path(member.name).suffix
                if not member.isfile() or suffix not in (".json", ".jsonl"):
                    continue
                _check_size(f"{file}!{member.name}", member.size)
                content = archive.extractfile(member)
                if content is None:  # pragma: no cover - regular files always have data
                    continue
                yield from _split(f"{file}!{member.name}", suffix, content.read())
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise TraceFormatError(file, 1, "-", f"broken tar archive ({exc})") from None


def _check_size(label: str, size: int) -> None:
    if size > MAX_MEMBER_BYTES:
        problem = f"{size} bytes; a play file may hold at most {MAX_MEMBER_BYTES} (64 MiB)"
        raise TraceFormatError(label, 1, "-", problem)


def _lines(path: Path, file: str) -> Iterator[tuple[str, int, bytes]]:
    """The non-blank lines of a JSONL file, each read in bounded memory."""
    with open(path, "rb") as stream:
        number = 0
        while True:
            raw = stream.readline(MAX_MEMBER_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_MEMBER_BYTES:
                problem = f"a line longer than {MAX_MEMBER_BYTES} bytes (64 MiB)"
                raise TraceFormatError(file, number, "-", problem)
            data = raw[3:] if number == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
            if data.strip():
                yield file, number, data


def _split(label: str, suffix: str, data: bytes) -> Iterator[tuple[str, int, bytes]]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if suffix == ".json":
        body = data.lstrip()
        if not body:
            raise TraceFormatError(label, 1, "-", "empty file; expected a JSON object")
        yield label, data[: len(data) - len(body)].count(b"\n") + 1, data
        return
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if raw.strip():
            yield label, number, raw


def read_weka(
    path: str | Path,
    *,
    source: str | None = None,
    nested_basis: NestedBasis = "auto",
    subagent_join: SubagentJoin = "none",
    pacing: Pacing = "recorded",
    interner: ContentInterner | None = None,
) -> Workload:
    """Read Weka (AgentX / kv-cache-tester) plays: one JSON object per conversation file.

    Accepts a ``.json`` file (one object), a ``.jsonl`` file (one per line), a directory
    (``*.json`` / ``*.jsonl`` by relative path, recursively) or a ``.tar[.gz|.xz]``
    archive, read member by member in archive order. Each object is a play: its main
    conversation and its subagent groups (nested markers allowed), with their own
    content scope. Edges follow §2.4: each call waits for the previous call of its
    conversation (completion plus the recorded gap, or its start when they overlap by
    more than 1 s); a subagent's first call waits for its spawning call.

    Args:
        path: the file, directory or archive.
        source: the source label (default: the name up to its first dot).
        nested_basis: the clock of subagent calls' ``t``: ``"auto"`` decides per group
            (relative if a call is earlier than its marker), or force one.
        subagent_join: ``"none"`` (parents never wait for subagents) or ``"recorded"``
            (the first parent call after the recorded end also waits for the group).
        pacing: ``"recorded"`` (every call keeps its recorded start as a floor) or
            ``"dependencies"`` (only calls without dependencies do).
        interner: the run's content interner.

    Returns:
        The workload in file order, with one :class:`Play` per object and the subagent
        groups.

    Raises:
        TraceFormatError: a record breaks the format.
        WorkloadConfigError: a bad option.
    """
    if nested_basis not in ("auto", "relative", "absolute"):
        raise WorkloadConfigError(
            f"nested_basis: must be 'auto', 'relative' or 'absolute', got {nested_basis!r}"
        )
    if subagent_join not in ("none", "recorded"):
        raise WorkloadConfigError(
            f"subagent_join: must be 'none' or 'recorded', got {subagent_join!r}"
        )
    if pacing not in ("recorded", "dependencies"):
        raise WorkloadConfigError(f"pacing: must be 'recorded' or 'dependencies', got {pacing!r}")
    p = Path(path)
    src = check_source(source if source is not None else source_label(p))
    ids = interner if interner is not None else ContentInterner()
    requests: list[Request] = []
    plays: list[Play] = []
    groups: list[SubagentGroup] = []
    seen_ids: dict[str, str] = {}
    corpus_block: int | None = None
    surplus = tails = 0
    for label, line, data in _documents(p, str(path)):
        start_id = ids.next_id
        scope = ids.local_scope()
        scanned = scan_hash_ids(data, ids, scope)
        value: object = None
        if scanned is not None:
            try:
                value = decode_json(scanned[0], label, line)
            except TraceFormatError:
                ids.next_id = start_id
                scope = ids.local_scope()
                scanned = None
        if scanned is None:
            scope = ids.local_scope()
            value = decode_json(data, label, line)
        loc = Located(label, line, value)
        play_name = loc.required_string("id")
        if "#" in play_name or "/" in play_name:
            raise loc.error("id", f"must not contain '#' or '/', got {render(play_name)}")
        if play_name in seen_ids:
            raise loc.error("id", f"duplicate of the play in {seen_ids[play_name]} ({play_name!r})")
        seen_ids[play_name] = f"{label}:{line}"
        block = loc.integer("block_size", minimum=1)
        if corpus_block is None:
            corpus_block = block
        elif block != corpus_block:
            raise loc.error("block_size", f"{block} differs from the corpus's {corpus_block}")
        scope_name = loc.obj.get("hash_id_scope")
        if scope_name != "local":
            raise loc.error("hash_id_scope", f'must be "local", got {render(scope_name)}')
        models = _models(loc, inherited=[])
        play_id = f"{src}:{play_name}"
        reader = _PlayReader(
            loc=loc,
            play_id=play_id,
            block=block,
            scope=scope,
            scanned=scanned[1] if scanned is not None else None,
            nested_basis=nested_basis,
            subagent_join=subagent_join,
        )
        reader.conversation(loc, "requests", "main", models, None, None, None)
        surplus += reader.surplus
        tails += reader.tails
        lineage = derive_lineage(reader.candidates).lineages
        first_ms = min((c.start_ms for c in reader.calls), default=0.0)
        for call in reader.calls:
            if call.start_ms - first_ms > MAX_INSTANT_MS:
                what = " after the play's first call"
                raise loc.error(call.where, instant_problem(call.start_ms - first_ms, what))
        base = len(requests)
        for call in reader.calls:
            floor = round(call.start_ms - first_ms, 6)
            requests.append(
                Request(
                    id=call.request_id,
                    input_length=call.input_length,
                    output_length=call.output_length,
                    block_size=block,
                    hash_ids=call.ids,
                    arrival=ArrivalRule(
                        not_before_ms=floor if pacing == "recorded" or not call.after else None,
                        after=tuple(call.after),
                    ),
                    identity=Identity(
                        conversation_id=call.conversation,
                        turn_index=call.turn,
                        play_id=play_id,
                        lineage=lineage[call.conversation],
                    ),
                    model=call.model,
                    recorded_service_ms=call.service_ms,
                )
            )
        plays.append(
            Play(
                id=play_id,
                request_indices=tuple(range(base, len(requests))),
                conversations=tuple(reader.candidates),
                content_ids=(start_id, ids.next_id),
            )
        )
        groups.extend(reader.groups)
    if not requests:
        problem = (
            f"no requests (found {len(plays)} plays and no calls)"
            if plays
            else "no requests (no .json or .jsonl play found)"
        )
        raise TraceFormatError(str(path), 1, "-", problem)
    return Workload(
        requests=tuple(requests),
        source=src,
        format="weka",
        tolerated=Tolerated(surplus_ids=surplus, private_tail_ids=tails),
        plays=tuple(plays),
        subagents=tuple(groups),
    )
