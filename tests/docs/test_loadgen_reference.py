"""The loadgen reference page documents every public name, with its parameters and members.

The rule: a name of ``loadgen.__all__`` is documented when the page has a level-3 heading that
is exactly that name in a code span (``### `Request` ``). Its section runs from that heading to
the next heading of level 2 or 3. Within it, every parameter of the name's signature (and of
its public methods) and every public method or property must appear as code: in a code span or
a fenced block. A parameter default that is a literal (a number, a string, a bool, None) must be
spelled in the section's fenced signature as it is in the code, and so must every value of a
``Literal`` parameter type.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import loadgen

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "loadgen.md"
NAME_HEADING = re.compile(r"^### `(\w+)`$")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = "```"


def _sections() -> tuple[dict[str, str], list[str]]:
    """Return each documented name's section, and the text of every level-3 heading."""
    sections: dict[str, list[str]] = {}
    headings: list[str] = []
    current: list[str] | None = None
    in_fence = False
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith(FENCE):
            in_fence = not in_fence
        if not in_fence and line.startswith(("## ", "### ")):
            current = None
            if line.startswith("### "):
                headings.append(line)
                match = NAME_HEADING.match(line)
                if match is not None:
                    current = sections.setdefault(match[1], [])
                    current.append("")  # a second heading for one name is caught below
            continue
        if current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}, headings


SECTIONS, HEADINGS = _sections()


def _code(section: str) -> str:
    """The section's code: its fenced blocks and its code spans, one per line."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", section, flags=re.S | re.M)
    return "\n".join([*blocks, *CODE_SPAN.findall(prose)])


def _fenced(section: str) -> str:
    return "\n".join(re.findall(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M))


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


def _signature(obj: object) -> inspect.Signature | None:
    if isinstance(obj, type) and issubclass(obj, BaseException) and "__init__" not in vars(obj):
        return None  # the builtin exception constructor: a message
    try:
        return inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _parameters(fn: object) -> list[inspect.Parameter]:
    signature = _signature(fn)
    if signature is None:
        return []
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _members(cls: type) -> Iterator[tuple[str, object]]:
    """Public methods and properties a loadgen class defines (or inherits from loadgen)."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("loadgen"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            if isinstance(value, (property, classmethod, staticmethod)) or inspect.isfunction(
                value
            ):
                seen.add(name)
                yield name, value


def _callable_of(value: object) -> Callable[..., object] | None:
    if isinstance(value, (classmethod, staticmethod)):
        return value.__func__
    if inspect.isfunction(value):
        return value
    return None


PUBLIC = tuple(loadgen.__all__)
CALLABLES = tuple(
    name
    for name in PUBLIC
    if callable(getattr(loadgen, name))
    and typing.get_origin(getattr(loadgen, name)) is None  # not a Literal or a union alias
    and _signature(getattr(loadgen, name)) is not None
)
CLASSES = tuple(
    name
    for name in PUBLIC
    if isinstance(getattr(loadgen, name), type)
    and not issubclass(getattr(loadgen, name), BaseException)
)


def test_every_public_name_has_a_section() -> None:
    assert sorted(set(PUBLIC) - set(SECTIONS)) == []


def test_every_name_heading_is_a_public_name_documented_once() -> None:
    names = [m[1] for m in map(NAME_HEADING.match, HEADINGS) if m is not None]
    assert [h for h in HEADINGS if NAME_HEADING.match(h) is None] == []
    assert sorted(set(names) - set(PUBLIC)) == []
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_page_covers_all_of_loadgen() -> None:
    # a count that fails loudly when a name is added without a section
    assert len(SECTIONS) == len(PUBLIC) == len(set(PUBLIC))


@pytest.mark.parametrize("name", CALLABLES)
def test_every_parameter_is_named_in_its_section(name: str) -> None:
    code = _code(SECTIONS[name])
    missing = [p.name for p in _parameters(getattr(loadgen, name)) if not _has_word(code, p.name)]
    assert missing == []


@pytest.mark.parametrize("name", CALLABLES)
def test_literal_defaults_are_spelled_as_in_the_code(name: str) -> None:
    signature = _fenced(SECTIONS[name])
    wrong = []
    for p in _parameters(getattr(loadgen, name)):
        default = p.default
        if default is inspect.Parameter.empty or not isinstance(
            default, (bool, int, float, str, type(None))
        ):
            continue
        spellings = (
            {repr(default), json.dumps(default)} if isinstance(default, str) else {repr(default)}
        )
        found = any(
            re.search(
                rf"(?<![\w.]){re.escape(p.name)}\b[^=\n]*?=\s*{re.escape(text)}(?![\w.])",
                signature,
            )
            for text in spellings
        )
        if not found:
            wrong.append(f"{p.name}={default!r}")
    assert wrong == []


def _literal_values(obj: object) -> dict[str, tuple[object, ...]]:
    """Parameter -> the values of its ``Literal`` type, for parameters that have one."""
    target = obj.__init__ if isinstance(obj, type) else obj  # type: ignore[misc]
    hints = typing.get_type_hints(target)
    return {
        name: typing.get_args(hint)
        for name, hint in hints.items()
        if typing.get_origin(hint) is typing.Literal
    }


@pytest.mark.parametrize("name", CALLABLES)
def test_every_value_of_a_literal_parameter_is_spelled(name: str) -> None:
    signature = _fenced(SECTIONS[name])
    missing = [
        f"{parameter}={value!r}"
        for parameter, values in _literal_values(getattr(loadgen, name)).items()
        for value in values
        if json.dumps(value) not in signature
    ]
    assert missing == []


def test_literal_parameters_are_found() -> None:
    # the check above has something to check
    assert _literal_values(loadgen.read_weka) == {
        "nested_basis": ("auto", "relative", "absolute"),
        "subagent_join": ("none", "recorded"),
        "pacing": ("recorded", "dependencies"),
    }


@pytest.mark.parametrize("name", CLASSES)
def test_every_public_member_and_its_parameters_are_named(name: str) -> None:
    code = _code(SECTIONS[name])
    missing = []
    for member, value in _members(getattr(loadgen, name)):
        if not _has_word(code, member):
            missing.append(member)
        fn = _callable_of(value)
        if fn is not None:
            missing += [
                f"{member}({p.name})" for p in _parameters(fn) if not _has_word(code, p.name)
            ]
    assert missing == []


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("FORMATS", loadgen.FORMATS),
        ("TERMINAL_STATUSES", loadgen.TERMINAL_STATUSES),
        ("TerminalStatus", typing.get_args(loadgen.TerminalStatus)),
        ("DATASETS", tuple(d.name for d in loadgen.DATASETS)),
    ],
)
def test_constants_list_every_value(name: str, values: tuple[str, ...]) -> None:
    code = _code(SECTIONS[name])
    assert [v for v in values if not _has_word(code, v)] == []


def test_constant_tuples_are_quoted_in_order() -> None:
    for name in ("FORMATS", "TERMINAL_STATUSES"):
        value = getattr(loadgen, name)
        assert "(" + ", ".join(json.dumps(v) for v in value) + ")" in SECTIONS[name]


@pytest.mark.parametrize("name", ["ArrivalProcess", "LengthDistribution"])
def test_type_aliases_list_their_members(name: str) -> None:
    members = [cls.__name__ for cls in typing.get_args(getattr(loadgen, name))]
    assert members
    assert " | ".join(members) in SECTIONS[name]


@pytest.mark.parametrize(
    ("name", "bases"),
    [
        ("TraceFormatError", "ValueError"),
        ("WorkloadConfigError", "ValueError"),
    ],
)
def test_error_sections_state_the_builtin_base(name: str, bases: str) -> None:
    assert issubclass(getattr(loadgen, name), ValueError)
    assert bases in SECTIONS[name]


def test_workload_run_error_is_said_not_to_be_a_value_error() -> None:
    assert not issubclass(loadgen.WorkloadRunError, ValueError)
    assert "Not a `ValueError`" in SECTIONS["WorkloadRunError"]


def test_the_index_links_the_page() -> None:
    index = (PAGE.parents[1] / "index.md").read_text(encoding="utf-8")
    assert "(reference/loadgen.md)" in index
