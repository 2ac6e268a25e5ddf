"""The weka reader (REFERENCE-workloads §2.4) and worked example §8 (c)."""

from __future__ import annotations

import copy
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

import loadgen
from loadgen import Dep, Lineage, TraceFormatError

from .conftest import WEKA


def _call(t: float, api: float | None = 1.0, *, size: int = 128, **extra: Any) -> dict[str, Any]:
    call: dict[str, Any] = {
        "t": t,
        "type": "n",
        "model": "m",
        "in": size,
        "out": 10,
        "hash_ids": list(range(1, size // 64 + 1)),
    }
    if api is not None:
        call["api_time"] = api
    call.update(extra)
    return call


def _marker(t: float, agent: str, calls: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    marker: dict[str, Any] = {
        "t": t,
        "type": "subagent",
        "agent_id": agent,
        "status": "completed",
        "requests": calls,
    }
    marker.update(extra)
    return marker


def _play(requests: list[dict[str, Any]], play_id: str = "p1") -> dict[str, Any]:
    return {
        "id": play_id,
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": requests,
    }


EXAMPLE_C = _play(
    [
        _call(0, 2),
        _marker(5, "agent_001", [_call(0, 1), _call(2, 1)], duration_ms=4000),
        _call(8, 1),
        _call(12, 1),
    ]
)


def _write(tmp_path: Path, play: dict[str, Any], name: str = "ex.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(play, indent=1), encoding="utf-8")
    return path


def _by_id(workload: loadgen.Workload) -> dict[str, loadgen.Request]:
    return {r.id: r for r in workload.requests}


def test_worked_example_c_edges_and_floors(tmp_path: Path) -> None:
    workload = loadgen.read_weka(_write(tmp_path, EXAMPLE_C))
    r = _by_id(workload)
    assert list(r) == [
        "ex:p1/main/0",
        "ex:p1/agent_001/0",
        "ex:p1/agent_001/1",
        "ex:p1/main/1",
        "ex:p1/main/2",
    ]
    assert r["ex:p1/main/0"].arrival.after == ()
    assert r["ex:p1/main/1"].arrival.after == (Dep("ex:p1/main/0", "completion", 6000.0),)
    assert r["ex:p1/main/2"].arrival.after == (Dep("ex:p1/main/1", "completion", 3000.0),)
    assert r["ex:p1/agent_001/0"].arrival.after == (Dep("ex:p1/main/0", "completion", 3000.0),)
    assert r["ex:p1/agent_001/1"].arrival.after == (Dep("ex:p1/agent_001/0", "completion", 1000.0),)
    floors = [r[i].arrival.not_before_ms for i in r]
    assert floors == [0.0, 5000.0, 7000.0, 8000.0, 12000.0]
    assert workload.subagents[0].basis == "relative"
    assert r["ex:p1/main/0"].recorded_service_ms == 2000.0
    assert r["ex:p1/main/0"].model == "m"


def test_worked_example_c_lineage_and_identity(tmp_path: Path) -> None:
    r = _by_id(loadgen.read_weka(_write(tmp_path, EXAMPLE_C)))
    sub = r["ex:p1/agent_001/1"].identity
    assert sub.conversation_id == "ex:p1/agent_001"
    assert sub.turn_index == 1
    assert sub.play_id == "ex:p1"
    assert sub.lineage == Lineage("ex:p1/main", "ex:p1/main")
    assert r["ex:p1/main/2"].identity.lineage == Lineage("ex:p1/main")


def test_recorded_join_adds_the_group_end_to_the_first_parent_call_after_it(
    tmp_path: Path,
) -> None:
    workload = loadgen.read_weka(_write(tmp_path, EXAMPLE_C), subagent_join="recorded")
    r = _by_id(workload)
    # Marker at 5 s + 4000 ms = 9000 ms: main/1 (8 s) is too early, main/2 (12 s) joins.
    assert r["ex:p1/main/1"].arrival.after == (Dep("ex:p1/main/0", "completion", 6000.0),)
    assert r["ex:p1/main/2"].arrival.after == (
        Dep("ex:p1/main/1", "completion", 3000.0),
        Dep("ex:p1/agent_001/1", "completion", 4000.0),
    )


def test_dependency_pacing_keeps_floors_only_on_roots(tmp_path: Path) -> None:
    workload = loadgen.read_weka(_write(tmp_path, EXAMPLE_C), pacing="dependencies")
    floors = [r.arrival.not_before_ms for r in workload.requests]
    assert floors == [0.0, None, None, None, None]


def test_an_overlap_beyond_one_second_becomes_a_start_edge(tmp_path: Path) -> None:
    play = _play([_call(0, 5), _call(2, 1), _call(5.5, None), _call(5.6, 1)])
    r = loadgen.read_weka(_write(tmp_path, play)).requests
    assert r[1].arrival.after == (Dep("ex:p1/main/0", "start", 2000.0),)
    # 5.5 s against an end of 3 s: completion + 2500 ms.
    assert r[2].arrival.after == (Dep("ex:p1/main/1", "completion", 2500.0),)
    # No api_time: the end is the start; 0.1 s later is a completion edge.
    assert r[3].arrival.after == (Dep("ex:p1/main/2", "completion", 100.0),)


def test_a_gap_within_epsilon_of_the_end_is_a_completion_edge_with_zero_delay(
    tmp_path: Path,
) -> None:
    play = _play([_call(0, 3), _call(2.5, 1)])
    r = loadgen.read_weka(_write(tmp_path, play)).requests
    assert r[1].arrival.after == (Dep("ex:p1/main/0", "completion", 0.0),)


def test_absolute_group_clock_is_detected(tmp_path: Path) -> None:
    play = _play([_call(0, 1), _marker(5, "a", [_call(6, 1), _call(9, 1)]), _call(20, 1)])
    workload = loadgen.read_weka(_write(tmp_path, play))
    assert workload.subagents[0].basis == "absolute"
    floors = [r.arrival.not_before_ms for r in workload.requests]
    assert floors == [0.0, 6000.0, 9000.0, 20000.0]


def test_forcing_absolute_on_a_relative_group_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, EXAMPLE_C)
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_weka(path, nested_basis="absolute")
    assert str(info.value) == (
        f"{path}:1: requests[1].requests[0].t: 0 is before its subagent marker at 5; "
        "nested_basis='absolute' cannot hold"
    )


def test_nested_markers_are_timed_like_calls_of_their_group(tmp_path: Path) -> None:
    inner = _marker(3, "b", [_call(0, 1), _call(1, 1)])
    play = _play([_call(0, 1), _marker(10, "a", [_call(0, 1), inner, _call(6, 1)])])
    workload = loadgen.read_weka(_write(tmp_path, play))
    r = _by_id(workload)
    # a is relative at 10 s; b's marker is 10 + 3 = 13 s and b is relative to it.
    assert r["ex:p1/b/0"].arrival.not_before_ms == 13000.0
    assert r["ex:p1/b/1"].arrival.not_before_ms == 14000.0
    assert r["ex:p1/b/0"].arrival.after == (Dep("ex:p1/a/0", "completion", 2000.0),)
    assert r["ex:p1/b/0"].identity.lineage == Lineage("ex:p1/main", "ex:p1/a")
    assert [(g.agent_id, g.parent_conversation_id) for g in workload.subagents] == [
        ("a", "ex:p1/main"),
        ("b", "ex:p1/a"),
    ]


def test_subagents_share_the_play_scope_and_plays_do_not_share(tmp_path: Path) -> None:
    first = _play([_call(0, 1), _marker(2, "a", [_call(0, 1)])], "p1")
    second = _play([_call(0, 1)], "p2")
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n", encoding="utf-8")
    workload = loadgen.read_weka(path)
    ids = [r.hash_ids.tolist() for r in workload.requests]
    # 128 tokens, ids [1, 2] in each: equal inside play p1, fresh in p2.
    assert ids == [[0, 1], [0, 1], [2, 3]]
    assert [p.content_ids for p in workload.plays] == [(0, 2), (2, 4)]


def test_full_blocks_only_lists_get_a_private_tail(tmp_path: Path) -> None:
    call = _call(0, 1, size=130)
    call["hash_ids"] = [1, 2]
    workload = loadgen.read_weka(_write(tmp_path, _play([call, copy.deepcopy(call)])))
    assert [r.hash_ids.tolist() for r in workload.requests] == [[0, 1, 2], [0, 1, 3]]
    assert workload.tolerated.private_tail_ids == 2


def test_directory_tar_jsonl_and_json_inputs_agree(tmp_path: Path) -> None:
    plays = [_play([_call(0, 1), _call(3, 1)], f"p{i}") for i in range(3)]
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    for i, play in enumerate(plays):
        where = folder / "sub" if i == 1 else folder
        (where / f"t{i}.json").write_text(json.dumps(play), encoding="utf-8")
    archive = tmp_path / "corpus.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        for i, play in enumerate(plays):
            data = json.dumps(play).encode()
            info = tarfile.TarInfo(f"corpus/t{i}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    lines = tmp_path / "corpus.jsonl"
    lines.write_text("".join(json.dumps(p) + "\n" for p in plays), encoding="utf-8")

    def shape(w: loadgen.Workload) -> list[tuple[str, list[int]]]:
        return [(r.id, r.hash_ids.tolist()) for r in w.requests]

    from_dir = loadgen.read_weka(folder)
    # By relative path: "sub/t1.json" sorts before "t0.json".
    assert [p.id for p in from_dir.plays] == ["corpus:p1", "corpus:p0", "corpus:p2"]
    assert shape(loadgen.read_weka(archive)) == shape(loadgen.read_weka(lines))
    assert [p.id for p in loadgen.read_weka(archive).plays] == [
        "corpus:p0",
        "corpus:p1",
        "corpus:p2",
    ]


def test_errors_in_a_tar_member_name_archive_and_member(tmp_path: Path) -> None:
    archive = tmp_path / "c.tar"
    bad = _play([_call(0, 1)])
    bad["requests"][0]["in"] = 0
    with tarfile.open(archive, "w") as tar:
        data = json.dumps(bad).encode()
        info = tarfile.TarInfo("x/t.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(TraceFormatError) as info_:
        loadgen.read_weka(archive)
    assert (
        str(info_.value) == f"{archive}!x/t.json:1: requests[0].in: must be an integer >= 1, got 0"
    )


def _error(tmp_path: Path, play: dict[str, Any], **options: Any) -> str:
    path = _write(tmp_path, play, "e.json")
    path.write_text(json.dumps(play), encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_weka(path, **options)
    return str(info.value).removeprefix(f"{path}:")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda p: p["requests"].append({"t": 1, "type": "x"}),
            "1: requests[1].type: unknown entry type 'x'",
        ),
        (
            lambda p: p.update(hash_id_scope="global"),
            '1: hash_id_scope: must be "local", got "global"',
        ),
        (lambda p: p.update(id="a/b"), "1: id: must not contain '#' or '/', got \"a/b\""),
        (lambda p: p.update(id="a#1"), "1: id: must not contain '#' or '/', got \"a#1\""),
        (
            lambda p: p["requests"][0].update(model="other"),
            "1: requests[0].model: 'other' is not in the play's models",
        ),
        (
            lambda p: p["requests"].insert(0, _marker(0, "a", [])),
            "1: requests[0]: subagent marker precedes every call of its parent conversation",
        ),
        (
            lambda p: p["requests"].append(_call(-1)),
            "1: requests[1].t: must be a number >= 0, got -1",
        ),
        (
            lambda p: p["requests"].append(_call(0.5)),
            "1: requests[1].t: 0.5 is earlier than the previous call's 1 "
            "in conversation 'e:p1/main'",
        ),
        (
            lambda p: p["requests"].append(_marker(2, "a", [], status="done")),
            "1: requests[1].status: must be 'completed' or 'async_launched', got \"done\"",
        ),
        (
            lambda p: p["requests"].extend([_marker(2, "a", []), _marker(3, "a", [])]),
            "1: requests[2].agent_id: duplicate of requests[1] ('a')",
        ),
        (
            lambda p: p["requests"][0].update(hash_ids=[1, 2.0]),
            "1: requests[0].hash_ids[1]: must be an integer, got 2.0",
        ),
        (
            lambda p: p["requests"][0].update(hash_ids=[]),
            "1: requests[0].hash_ids: 0 ids cover at most 0 tokens at block_size 64; "
            "input_length 128 needs at least 2",
        ),
    ],
)
def test_bad_plays_raise_file_line_field_problem(tmp_path: Path, edit: Any, message: str) -> None:
    play = _play([_call(1, 1)])
    edit(play)
    assert _error(tmp_path, play) == message


def test_play_ids_are_unique_in_the_corpus_and_block_size_is_one(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    a = _play([_call(0)], "p")
    b = _play([_call(0)], "q")
    b["block_size"] = 32
    path.write_text(json.dumps(a) + "\n" + json.dumps(a) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_weka(path)
    assert str(info.value) == f"{path}:2: id: duplicate of the play in {path}:1 ('p')"
    path.write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        loadgen.read_weka(path)
    assert str(info.value) == f"{path}:2: block_size: 32 differs from the corpus's 64"


def test_the_plain_path_and_the_byte_scanner_agree(tmp_path: Path) -> None:
    calls = [_call(float(i), 1, size=64 * (i + 2)) for i in range(6)]
    calls[3]["hash_ids"] = [1, 2, 7, 8, 9]  # a diverging list
    fast = _play(calls)
    slow = copy.deepcopy(fast)
    slow["requests"].append(_marker(9, "a", [_call(0, 1, hash_ids=[-5, 1])]))
    fast["requests"].append(_marker(9, "a", [_call(0, 1, hash_ids=[99, 1])]))
    a = loadgen.read_weka(_write(tmp_path, fast, "a.json")).requests
    b = loadgen.read_weka(_write(tmp_path, slow, "b.json")).requests
    assert [r.hash_ids.tolist() for r in a] == [r.hash_ids.tolist() for r in b]


def test_shared_weka_counts(weka_workload: loadgen.Workload) -> None:
    w = weka_workload
    assert len(w.requests) == 34085
    assert len(w.plays) == 498
    subagent = sum(1 for r in w.requests if r.id.split("/")[1] != "main")
    assert (len(w.requests) - subagent, subagent) == (33564, 521)
    assert len({g.play_id for g in w.subagents}) == 12
    assert sum(1 for g in w.subagents if g.status == "async_launched") == 4
    sizes = sorted(len(p.request_indices) for p in w.plays)
    assert (sizes[len(sizes) // 2 - 1] + sizes[len(sizes) // 2]) / 2 == 44
    assert sizes[-1] == 561
    spawns = [
        r.arrival.after[0].on for r in w.requests if r.identity.turn_index == 0 and r.arrival.after
    ]
    assert spawns == ["completion"] * 50


def test_trace_0003_subagent_runs_on_its_marker_clock(weka_workload: loadgen.Workload) -> None:
    r = {
        x.id: x
        for x in weka_workload.requests
        if x.identity.play_id == f"{WEKA.name.split('.')[0]}:trace_0003"
    }
    play = f"{WEKA.name.split('.')[0]}:trace_0003"
    first_three = [r[f"{play}/agent_001/{k}"].arrival.not_before_ms for k in range(3)]
    assert first_three == [134227.0, 140227.0, 148227.0]
    mains = [x for x in r.values() if x.identity.conversation_id == f"{play}/main"]
    floors = [m.arrival.not_before_ms for m in mains]
    assert 153000.0 in floors and 184000.0 in floors
