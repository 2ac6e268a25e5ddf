"""Structured logging: library loggers, virtual-time stamping, context, rendering, capture."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from simclock import VirtualEventLoop, configure_logging, get_logger, log_context
from simclock.testing import capture_logs

PACKAGES = ("simclock", "loadgen", "engines", "policies", "replay")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers = list(root.handlers)
    levels = {name: logging.getLogger(name).level for name in PACKAGES}
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    structlog.reset_defaults()


def test_captured_events_carry_event_level_logger_and_bound_values() -> None:
    log = get_logger("replay.example", component="router")
    with capture_logs() as events:
        log.info("placed", request_id="r1", engine=2)
        log.bind(attempt=1).debug("retry")
    assert events == [
        {
            "component": "router",
            "request_id": "r1",
            "engine": 2,
            "event": "placed",
            "logger": "replay.example",
            "level": "info",
        },
        {
            "component": "router",
            "attempt": 1,
            "event": "retry",
            "logger": "replay.example",
            "level": "debug",
        },
    ]


def test_capture_respects_its_level_and_restores_logger_levels() -> None:
    log = get_logger("engines.example")
    before = logging.getLogger("engines").level
    with capture_logs(level="warning") as events:
        log.info("quiet")
        log.warning("loud")
    assert [e["event"] for e in events] == ["loud"]
    assert logging.getLogger("engines").level == before


def test_capture_refuses_an_unknown_level() -> None:
    with pytest.raises(ValueError) as info, capture_logs(level="verbose"):
        pass
    assert str(info.value) == (
        "log level must be debug, info, warning, error or critical, not 'verbose'"
    )


def test_virtual_time_is_stamped_inside_a_running_virtual_loop() -> None:
    log = get_logger("simclock.example")

    async def main() -> None:
        log.info("start")
        await asyncio.sleep(1.5)
        log.info("later")

    loop = VirtualEventLoop(start_ns=7)
    try:
        with capture_logs() as events:
            log.info("outside")
            loop.run_until_complete(main())
    finally:
        loop.close()
    assert [(e["event"], e.get("virtual_time_ns")) for e in events] == [
        ("outside", None),
        ("start", 7),
        ("later", 1_500_000_007),
    ]


def test_log_context_binds_per_task_through_contextvars() -> None:
    log = get_logger("policies.example")

    async def handle(request_id: str, delay_s: float) -> None:
        with log_context(request_id=request_id):
            await asyncio.sleep(delay_s)
            log.info("placed")

    async def main() -> None:
        with log_context(run_id="run-7"):
            await asyncio.gather(handle("a", 2.0), handle("b", 1.0))
        log.info("done")

    loop = VirtualEventLoop()
    try:
        with capture_logs() as events:
            loop.run_until_complete(main())
    finally:
        loop.close()
    assert [(e["event"], e.get("run_id"), e.get("request_id")) for e in events] == [
        ("placed", "run-7", "b"),
        ("placed", "run-7", "a"),
        ("done", None, None),
    ]


@pytest.mark.usefixtures("restore_logging")
def test_json_format_writes_one_sorted_object_per_line() -> None:
    out = io.StringIO()
    configure_logging(format="json", level="info", stream=out)
    log = get_logger("replay.example")
    with log_context(run_id="r"):
        log.info("hello", n=1)
    log.debug("hidden")
    lines = out.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"event": "hello", "level": "info", "logger": "replay.example", "n": 1, "run_id": "r"}
    ]
    assert lines[0].startswith('{"event": "hello"')


@pytest.mark.usefixtures("restore_logging")
def test_auto_format_is_json_when_the_stream_is_not_a_terminal() -> None:
    out = io.StringIO()
    configure_logging(level="warning", stream=out)
    get_logger("loadgen.example").warning("skipped", line=3)
    assert json.loads(out.getvalue())["event"] == "skipped"


@pytest.mark.usefixtures("restore_logging")
def test_console_format_leads_with_the_virtual_time_in_seconds() -> None:
    out = io.StringIO()
    configure_logging(format="console", level="debug", stream=out)
    log = get_logger("engines.example")

    async def main() -> None:
        await asyncio.sleep(2.25)
        log.debug("pass planned", batch_size=3)

    loop = VirtualEventLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    line = out.getvalue().rstrip("\n")
    assert line.startswith("2.250000000s [debug    ] pass planned")
    assert line.endswith("[engines.example] batch_size=3")


@pytest.mark.usefixtures("restore_logging")
def test_configuring_twice_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(format="json", level="info", stream=first)
    configure_logging(format="json", level="info", stream=second)
    get_logger("replay.example").info("once")
    assert first.getvalue() == ""
    assert len(second.getvalue().splitlines()) == 1


@pytest.mark.usefixtures("restore_logging")
def test_structlog_get_logger_goes_the_same_way_once_configured() -> None:
    out = io.StringIO()
    configure_logging(format="json", level="info", stream=out)
    structlog.get_logger("replay.other").info("via structlog")
    assert json.loads(out.getvalue())["logger"] == "replay.other"


def test_configure_logging_refuses_unknown_names() -> None:
    with pytest.raises(ValueError) as info:
        configure_logging(format="xml")  # type: ignore[arg-type]
    assert str(info.value) == "log format must be auto, console or json, not 'xml'"
    with pytest.raises(ValueError) as info:
        configure_logging(level="loud")
    assert str(info.value) == (
        "log level must be debug, info, warning, error or critical, not 'loud'"
    )


def test_unconfigured_library_debug_events_stay_silent(capsys: pytest.CaptureFixture[str]) -> None:
    get_logger("replay.example").debug("nobody sees this")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")
