"""workgroup logs as a library should: silent by default, ``logging`` underneath."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog

from workgroup.log import LogEvent, get_logger
from workgroup.testing import capture_logs

LOG_THREE_LEVELS = (
    "from workgroup.log import get_logger\n"
    "log = get_logger('workgroup.example')\n"
    "log.debug('example.debugged', group='g')\n"
    "log.info('example.joined', group='g', generation=3)\n"
    "log.warning('example.slow', group='g', waited_ms=1500)\n"
)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )


def test_unconfigured_logging_prints_nothing_on_stdout() -> None:
    done = run_python("import workgroup\n" + LOG_THREE_LEVELS)
    assert done.stdout == ""
    # Python's last-resort handler: warnings and worse, on stderr, nothing else.
    assert done.stderr.splitlines() == ["example.slow group=g waited_ms=1500"]


def test_configure_logs_every_level_to_stderr() -> None:
    done = run_python("import workgroup.log\nworkgroup.log.configure('debug')\n" + LOG_THREE_LEVELS)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 3
    events = ("example.debugged", "example.joined", "example.slow")
    for line, event in zip(lines, events, strict=True):
        assert event in line
    assert "generation=3" in lines[1]


def test_configure_json_writes_one_object_per_event() -> None:
    done = run_python(
        "import workgroup.log\nworkgroup.log.configure('info', json=True)\n" + LOG_THREE_LEVELS
    )
    events = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["level"]) for e in events] == [
        ("example.joined", "info"),
        ("example.slow", "warning"),
    ]
    assert events[0]["generation"] == 3
    assert events[0]["timestamp"].endswith("Z")


def test_configure_rejects_an_unknown_level() -> None:
    from workgroup.log import configure

    with pytest.raises(ValueError, match="verbose"):
        configure("verbose")


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Records of ``workgroup.tests.log`` as an application's handler receives them."""
    logger = logging.getLogger("workgroup.tests.log")
    handler = Records()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def test_records_carry_the_event_name_and_fields(records: list[logging.LogRecord]) -> None:
    log = get_logger("workgroup.tests.log", group="g")
    log.info("member.joined", generation=3, member_id="a b")
    (record,) = records
    assert record.name == "workgroup.tests.log"
    assert record.levelno == logging.INFO
    assert record.getMessage() == "member.joined group=g generation=3 member_id='a b'"
    assert isinstance(record.msg, LogEvent)
    assert record.msg == {
        "event": "member.joined",
        "group": "g",
        "generation": 3,
        "member_id": "a b",
    }


def test_exceptions_reach_logging_with_their_traceback(records: list[logging.LogRecord]) -> None:
    log = get_logger("workgroup.tests.log")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("store.failed", path="/x")
    (record,) = records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[0] is RuntimeError
    assert record.getMessage() == "store.failed path=/x"


def test_levels_follow_the_logging_configuration(records: list[logging.LogRecord]) -> None:
    logging.getLogger("workgroup.tests.log").setLevel(logging.WARNING)
    log = get_logger("workgroup.tests.log")
    log.info("member.joined")
    log.warning("member.slow")
    assert [r.getMessage() for r in records] == ["member.slow"]


def test_capture_logs_sees_every_level_and_keeps_logging_quiet(
    records: list[logging.LogRecord],
) -> None:
    logging.getLogger("workgroup.tests.log").setLevel(logging.ERROR)
    log = get_logger("workgroup.tests.log", group="g")
    with capture_logs() as logs:
        log.debug("member.heartbeat", generation=1)
    assert logs == [
        {"event": "member.heartbeat", "log_level": "debug", "group": "g", "generation": 1}
    ]
    assert records == []
    log.error("member.failed")
    assert len(records) == 1


def test_an_application_using_structlogs_processor_formatter_gets_the_fields() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.stdlib.add_log_level,
                structlog.processors.JSONRenderer(sort_keys=True),
            ]
        )
    )
    logger = logging.getLogger("workgroup.tests.formatter")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        get_logger("workgroup.tests.formatter").info("group.joined", group="g", generation=3)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert json.loads(out.getvalue()) == {
        "event": "group.joined",
        "generation": 3,
        "group": "g",
        "level": "info",
    }


def test_configure_routes_aiokafka_records_so_json_output_is_json_only() -> None:
    done = run_python(
        "import logging, workgroup.log\n"
        "workgroup.log.configure('info', json=True)\n"
        "logging.getLogger('aiokafka.conn').info('connected (internals)')\n"
        "logging.getLogger('aiokafka.conn').error('Unable connect to \"127.0.0.1:1\": refused')\n"
        "logging.getLogger('aiokafka.producer').warning('metadata for %s is stale', 'topic-a')\n"
        + LOG_THREE_LEVELS
    )
    events = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    routed = [e for e in events if e.get("logger", "").startswith("aiokafka")]
    # Its info lines are internals; its per-connection errors are workgroup's to report.
    assert [(e["logger"], e["level"], e["event"]) for e in routed] == [
        ("aiokafka.producer", "warning", "metadata for topic-a is stale")
    ]
    assert "timestamp" in routed[0]
    assert [e["event"] for e in events if "logger" not in e] == ["example.joined", "example.slow"]


def test_the_process_name_is_in_every_event_once_set(records: list[logging.LogRecord]) -> None:
    from workgroup.log import set_process

    log = get_logger("workgroup.tests.log")
    set_process("vm-42")
    try:
        log.info("example.named")
        with structlog.contextvars.bound_contextvars(process="etl-1"):
            log.info("example.bound")  # a runner's own tasks: its binding wins
    finally:
        set_process(None)
    log.info("example.unnamed")
    assert [r.getMessage() for r in records] == [
        "example.named process=vm-42",
        "example.bound process=etl-1",
        "example.unnamed",
    ]


def test_a_task_error_nobody_read_is_one_json_line_under_log_loop_errors() -> None:
    script = (
        "import asyncio, gc, workgroup.log\n"
        "workgroup.log.configure('info', json=True)\n"
        "async def fails():\n"
        "    raise ValueError('nobody reads this')\n"
        "async def main():\n"
        "    {install}\n"
        "    task = asyncio.get_running_loop().create_task(fails(), name='orphan')\n"
        "    await asyncio.sleep(0)\n"
        "    del task\n"
        "    gc.collect()\n"
        "asyncio.run(main())\n"
    )
    raw = run_python(script.format(install="pass")).stderr
    assert "Task exception was never retrieved" in raw.splitlines()  # asyncio's own text
    done = run_python(
        script.format(install="workgroup.log.log_loop_errors(asyncio.get_running_loop())")
    )
    events = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    assert len(events) == 1, events
    event = events[0]
    assert (event["event"], event["level"], event["task"]) == (
        "loop.unhandled_error",
        "error",
        "orphan",
    )
    assert event["message"] == "Task exception was never retrieved"
    assert event["error"] == "ValueError: nobody reads this"
    assert 'File "<string>", line 4, in fails' in event["exception"]
