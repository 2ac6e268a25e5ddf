"""The readers leave what they built in the collector's oldest generation (no young
collection walks a workload just read), and leave objects frozen by the process alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import loadgen
from loadgen._fields import collector_paused

from .conftest import MOONCAKE


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def _young() -> set[int]:
    return {id(o) for o in gc.get_objects(generation=0)} | {
        id(o) for o in gc.get_objects(generation=1)
    }


@pytest.mark.usefixtures("collector_on")
def test_a_reading_is_left_in_the_oldest_generation() -> None:
    workload = loadgen.read_mooncake(MOONCAKE)
    young = _young()
    request = workload.requests[0]
    assert gc.isenabled()
    assert id(request) not in young
    assert id(workload.requests) not in young
    assert any(o is request for o in gc.get_objects(generation=2))


@pytest.mark.usefixtures("collector_on")
def test_objects_frozen_by_the_process_stay_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    held = [object()]  # a tracked container, frozen below
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        # the count itself may drop while the block runs (a frozen object that dies leaves
        # the permanent generation): the calls tell whether the reader unfroze anything
        calls: list[str] = []
        monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
        monkeypatch.setattr(gc, "unfreeze", lambda: calls.append("unfreeze"))
        with collector_paused():
            made = [[n] for n in range(100)]
        assert calls == []  # neither frozen again nor unfrozen
        assert gc.isenabled()
        assert made[0] == [0] and held
    finally:
        monkeypatch.undo()
        gc.unfreeze()


@pytest.mark.usefixtures("collector_on")
def test_without_frozen_objects_the_reading_is_frozen_and_unfrozen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if gc.get_freeze_count():  # pragma: no cover - another test left objects frozen
        gc.unfreeze()
    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: calls.append("unfreeze"))
    with collector_paused():
        pass
    assert calls == ["freeze", "unfreeze"]


def test_a_paused_collector_stays_paused() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
