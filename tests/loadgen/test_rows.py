"""Parsing Mooncake-style files into columns (``loadgen._rows``) gives what the JSON
decoder gives line by line, whichever shortcut the text allows.

The shortcuts (``hash_ids`` lists cut out of the text and read by numpy, the rest parsed
as one JSON array) are taken only where the text proves them equal to parsing each line
alone; everything else goes the slower way. Each test compares the two ways, and the
whole reading with the record-by-record reader (the oracle).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import loadgen
from loadgen import ContentInterner, TraceFormatError
from loadgen import _rows as rows
from loadgen._agentic import read_agentic_records
from loadgen._mooncake import read_records

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _columns_both_ways(data: bytes) -> tuple[Any, Any, bool]:
    """``row_columns`` as it runs, the same with no list cut out, and whether it cut."""
    cut = rows._cut_ids(data.removeprefix(b"\xef\xbb\xbf")) is not None
    fast = rows.row_columns(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rows, "_cut_ids", lambda data: None)
        slow = rows.row_columns(data)
    return fast, slow, cut


def _same_columns(a: rows.RowColumns | None, b: rows.RowColumns | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert a.lines == b.lines
    assert a.present == b.present
    for name in ("prompts", "outputs", "counts", "raw"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype == np.int64
        assert left.tolist() == right.tolist(), name
    assert a.stamps.cells() == b.stamps.cells()
    assert repr(a.stamps.cells()) == repr(b.stamps.cells())  # -0.0 too


def _read_both_ways(path: Path) -> None:
    """``read_mooncake`` equals the record reader, or both raise the same error."""
    try:
        slow = read_records(str(path), path.stem, 4, False, ContentInterner(), delta=False)
    except TraceFormatError as error:
        with pytest.raises(TraceFormatError) as info:
            loadgen.read_mooncake(path, block_size=4)
        assert str(info.value) == str(error)
        return
    assert loadgen.read_mooncake(path, block_size=4) == slow


def _write(text: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="rows")) / "t.jsonl"
    path.write_bytes(text.encode("utf-8"))
    return path


def _row(ids: str, extra: str = "") -> str:
    return f'{{"timestamp": 1, "input_length": 8, "output_length": 2, "hash_ids": {ids}{extra}}}'


CUT = [
    "[1, 2, 3]",
    "[1,2,3]",
    "[]",
    "[ 1, 2]",
    "[1,  2]",
    "[0, 10, 100]",
    "[999999999999999999]",
]
NOT_CUT = [
    "[1 ,2]",
    "[1, 2 ]",
    "[ ]",
    "[1,\t2]",
    "[1000000000000000000]",
    "[9223372036854775807]",
    "[9223372036854775808]",
    "[01]",
    "[00, 1]",
    "[1, 007]",
    "[1,,2]",
    "[1,]",
    "[,1]",
    "[1 2]",
    "[-1]",
    "[+1]",
    "[1.0]",
    "[1e3]",
    "[true]",
    '["1"]',
    "[[1]]",
    "[1, 2, ]",
    "[1, , 2]",
    "[ , 1]",
    "[1,\t,2]",
    "[\t]",
    "[1,\x0b2]",
]


@pytest.mark.parametrize("ids", CUT + NOT_CUT)
def test_each_spelling_of_a_list_reads_as_the_json_decoder_reads_it(ids: str) -> None:
    text = _row("[4, 5]") + "\n" + _row(ids) + "\n"
    fast, slow, cut = _columns_both_ways(text.encode())
    assert cut == (ids in CUT)
    _same_columns(fast, slow)
    _read_both_ways(_write(text))


@pytest.mark.parametrize(
    "text",
    [
        # a hash_ids key inside another object: more keys than lists of rows
        _row("[1]", ', "meta": {"hash_ids": [7]}') + "\n",
        '{"meta": {"hash_ids": [7]}, "timestamp": 1, "input_length": 8, "output_length": 2}\n',
        # the row's own key not cut (spelled otherwise, no list) and another one cut
        '{"hash_ids" : 0, "meta": {"hash_ids": [7]}, "timestamp": 1, "input_length": 8, '
        '"output_length": 2}\n',
        '{"hash\\u005fids": 0, "meta": {"hash_ids": [7]}, "timestamp": 1, "input_length": 8, '
        '"output_length": 2}\n',
        # the key twice (the decoder keeps the last), or as a value
        _row("[1]", ', "hash_ids": [2, 3]') + "\n",
        _row("[1]", ', "hash_ids": "x"') + "\n",
        _row("[1]", ', "session_id": "hash_ids"') + "\n",
        # other spellings of the key: compact, spaced, escaped
        _row("[1]").replace('"hash_ids": ', '"hash_ids":') + "\n",
        _row("[1]") + "\n" + _row("[2]").replace('"hash_ids": ', '"hash_ids":') + "\n",
        _row("[1]").replace('"hash_ids": ', '"hash_ids" : ') + "\n",
        _row("[1]").replace('"hash_ids"', '"hash\\u005fids"') + "\n",
        _row("[1]").replace('"hash_ids"', '"hash\\u005fids"') + "\n" + _row("[2]") + "\n",
        # a backslash anywhere (a string with an escaped quote)
        _row("[1]", ', "session_id": "a\\"b"') + "\n",
        # a row without the key
        _row("[1]") + "\n" + '{"timestamp": 1, "input_length": 8, "output_length": 2}\n',
        # a list spread over two lines
        _row("[1,\n2]") + "\n",
    ],
)
def test_lists_that_are_not_the_rows_own_are_not_cut_out(text: str) -> None:
    fast, slow, _ = _columns_both_ways(text.encode())
    _same_columns(fast, slow)
    _read_both_ways(_write(text))


def test_the_bundled_trace_is_cut_and_parsed_as_one_array() -> None:
    with loadgen.open_binary(loadgen.dataset_path("mooncake-conversation")) as stream:
        data = stream.read()
    cut = rows._cut_ids(data)
    assert cut is not None
    assert rows._as_array(cut[0].decode()) is not None
    fast, slow, _ = _columns_both_ways(data)
    _same_columns(fast, slow)
    assert fast is not None and fast.raw.size == 288_500


# --- lines parsed as one JSON array ------------------------------------------------------

ROW = _row("[1]")
LINE_PIECES = [
    ROW,
    ROW,
    ROW + " ",
    " " + ROW,
    ROW + "\r",
    "",
    "  ",
    ROW + ", " + ROW,
    ROW + "," + ROW,
    ROW + " ," + ROW,
    ROW + ROW,
    '{"session_id": "}", ' + ROW[1:],
    '{"session_id": "a},{b", ' + ROW[1:],
    '{"meta": {"x": 1}, ' + ROW[1:],
    '{"meta": [{"x": 1}',
    '{"x": 2}], ' + ROW[1:],
    ROW[:-1] + ",",
    '"output_length": 3}',
    "[1, 2]",
    "\ufeff" + ROW,
]


@SETTINGS
@example([ROW + ", " + ROW, '{"meta": [{"x": 1}', '{"x": 2}], ' + ROW[1:]], True)
@example([ROW + "," + ROW, '{"session_id": "}", ' + ROW[1:]], False)
@example(['{"session_id": "}', '"}'], True)
@given(st.lists(st.sampled_from(LINE_PIECES), min_size=1, max_size=6), st.booleans())
def test_parsing_as_one_array_equals_parsing_each_line(lines: list[str], newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if newline else "")
    whole = rows._as_array(text)
    each = rows.parse_objects(text)
    if whole is not None:
        assert each is not None
        assert whole == each[0]
        assert each[1] == list(range(1, len(whole) + 1))
    assert rows._parse(text) == each
    _read_both_ways(_write(text))


# --- whole files, randomly spelled --------------------------------------------------------


@st.composite
def spelled_rows(draw: st.DrawFn, agentic: bool) -> str:
    """Valid-looking rows written by different JSON writers: separators, spaces inside
    lists, key order, ids of every size, escapes, sometimes a bad list."""
    lines: list[str] = []
    count = draw(st.integers(1, 8))
    for index in range(count):
        ids = draw(
            st.lists(
                st.one_of(st.integers(0, 40), st.sampled_from([10**17, 10**18 - 1, 2**63 - 1])),
                max_size=5,
            )
        )
        row: dict[str, Any] = {
            "timestamp": draw(st.sampled_from([0, 1, 2.5])),
            "input_length": draw(st.integers(1, 4 * max(len(ids), 1) + 3)),
            "output_length": draw(st.integers(0, 5)),
            "hash_ids": ids,
        }
        if draw(st.booleans()):
            row["session_id"] = draw(st.sampled_from(["a", "b", 'c"d', "é", "hash_ids"]))
        if agentic:
            row["request_id"] = f"r{index}"
            if index and draw(st.booleans()):
                row["wait_for"] = [f"r{draw(st.integers(0, index - 1))}"]
                row["delay"] = draw(st.sampled_from([0, 1.5]))
        keys = draw(st.permutations(list(row)))
        separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" , ", " : ")]))
        text = json.dumps({k: row[k] for k in keys}, separators=separators, ensure_ascii=False)
        if draw(st.integers(0, 5)) == 0:  # respell the list
            spelled = draw(st.sampled_from(["[1 ,2]", "[ 1,2 ]", "[01]", "[-1]", "[1,, 2]"]))
            text = text.replace(json.dumps(ids, separators=(separators[0], ":")), spelled, 1)
        lines.append(text)
    return "\n".join(lines) + "\n"


@SETTINGS
@given(spelled_rows(agentic=False))
def test_randomly_spelled_mooncake_files_read_as_record_by_record(text: str) -> None:
    fast, slow, _ = _columns_both_ways(text.encode())
    _same_columns(fast, slow)
    _read_both_ways(_write(text))


@SETTINGS
@given(spelled_rows(agentic=True))
def test_randomly_spelled_agentic_files_read_as_record_by_record(text: str) -> None:
    path = _write(text)
    try:
        slow = read_agentic_records(str(path), "t", 4, ContentInterner())
    except TraceFormatError as error:
        with pytest.raises(TraceFormatError) as info:
            loadgen.read_agentic(path, block_size=4)
        assert str(info.value) == str(error)
        return
    fast = loadgen.read_agentic(path, block_size=4)
    assert fast == slow
    assert repr(fast) == repr(slow)


def test_numbers_keep_absent_cells_apart_from_zeros() -> None:
    numbers = rows.number_column([1, None, 2.5, -0.0], 10.0)
    assert numbers is not None
    assert numbers.values.tolist() == [1.0, 0.0, 2.5, -0.0]
    assert numbers.given.tolist() == [True, False, True, True]
    assert repr(numbers.cells()) == repr([1.0, None, 2.5, -0.0])
    assert rows.number_column([1, True], 10.0) is None
    assert rows.number_column([11], 10.0) is None
