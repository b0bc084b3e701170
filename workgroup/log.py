"""Structured logging that behaves like any library's logging.

Every workgroup module logs through a structlog logger wrapped around the
standard library's ``logging.getLogger("workgroup.<module>")``.  Events have
stable, dotted names (``member.joined``, ``group.join_rejected``) and key-value
fields.  Nothing is configured at import time, so:

* an application that configures nothing sees nothing on stdout; warnings and
  errors reach stderr through Python's last-resort handler, as any library's do;
* an application that configures ``logging`` gets workgroup's records under the
  ``workgroup`` logger hierarchy.  A record's message reads
  ``member.joined group=g generation=3``, and ``record.msg`` is the event's dict
  (``record.msg["generation"] == 3``), so structlog's
  ``structlog.stdlib.ProcessorFormatter`` renders the fields with the
  application's own processors;
* a process that just wants readable or JSON logs on stderr calls
  :func:`configure` once (every ``workgroup`` CLI command does)::

      import workgroup.log
      workgroup.log.configure("info")             # or configure("debug", json=True)

:func:`configure` also routes the records of aiokafka (which workgroup drives)
through the same handler, so ``json=True`` output is JSON only: aiokafka's
warnings and errors become lines with ``logger="aiokafka.<module>"``.  Its
"Unable connect to" errors are dropped below debug level: workgroup says the
same once per report (``member.coordinator_unavailable``,
``app.coordinator_unreachable``) with a hint.

workgroup never calls ``structlog.configure``: the application's structlog
configuration stays the application's.  Tests capture events with
:func:`workgroup.testing.capture_logs`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

#: The top of workgroup's logger hierarchy.
ROOT_LOGGER = "workgroup"
#: Libraries whose records :func:`configure` routes through workgroup's handler.
ROUTED_LOGGERS = ("aiokafka",)

#: Event keys passed to ``logging`` as arguments rather than rendered as fields.
_RECORD_KEYS = ("exc_info", "stack_info")


class LogEvent(dict[str, Any]):
    """One event's fields; its ``str()`` is ``event key=value ...``.

    ``logging`` formatters that know nothing of structlog call ``str(record.msg)``
    and get that line; structlog's ``ProcessorFormatter`` copies the dict.
    """

    def __str__(self) -> str:
        parts = [str(self.get("event", ""))]
        for key, value in self.items():
            if key != "event" and key not in _RECORD_KEYS:
                parts.append(f"{key}={_render(value)}")
        return " ".join(parts)


def _render(value: object) -> str:
    if isinstance(value, str) and value and not any(c.isspace() or c in "='\"" for c in value):
        return value
    return repr(value)


def _to_logging(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
    """Hand the event to ``logging`` as the message, the way ``ProcessorFormatter`` expects."""
    exc_info = event_dict.get("exc_info")
    if exc_info is True:
        # Resolved now: a handler may format the record after the ``except`` block.
        exc_info = event_dict["exc_info"] = sys.exc_info()
    kwargs: dict[str, Any] = {"extra": {"_logger": logger, "_name": method_name}}
    if exc_info:
        kwargs["exc_info"] = exc_info
    if event_dict.get("stack_info"):
        kwargs["stack_info"] = True
    return (LogEvent(event_dict),), kwargs


#: The name of this process in every event (``process``), unless the event's
#: context binds one (:func:`set_process`).
_process: list[str | None] = [None]


def set_process(name: str | None) -> None:
    """Name the process in every event from now on (``None``: stop naming it).

    The daemon's runner calls it with its identity; a context binding
    (``structlog.contextvars``) of ``process`` wins over it.
    """
    _process[0] = name


def process_name() -> str | None:
    return _process[0]


def _add_process(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    if _process[0] is not None:
        event_dict.setdefault("process", _process[0])
    return event_dict


#: The processors every workgroup logger runs (one list, shared by reference, so
#: that :func:`workgroup.testing.capture_logs` can swap its contents).
PROCESSORS: list[Processor] = [
    # First: a disabled level costs one ``isEnabledFor`` call and nothing else.
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    _add_process,
    _to_logging,
]


def get_logger(name: str, **initial: Any) -> structlog.stdlib.BoundLogger:
    """A structlog logger over ``logging.getLogger(name)``, bound to ``initial``.

    ``name`` is the module's dotted name (``workgroup.coordinator.server``), so
    that ``logging`` configuration can address each module.
    """
    return structlog.stdlib.BoundLogger(logging.getLogger(name), PROCESSORS, initial)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` installs (so that a second call replaces it)."""


def _drop_connection_noise(record: logging.LogRecord) -> bool:
    """aiokafka logs one error per refused connection; workgroup reports those itself."""
    if not record.name.startswith("aiokafka"):
        return True
    return not (record.levelno > logging.DEBUG and str(record.msg).startswith("Unable connect to"))


def _traceback_without_locals(sio: Any, exc_info: Any) -> None:
    """Render a traceback as Python does: frames and source lines, never local
    variables (structlog's rich default shows them, and they can hold secrets)."""
    structlog.dev.plain_traceback(sio, exc_info)


#: Directories whose frames are not the user's: workgroup itself, the standard
#: library (asyncio, threading) and installed packages (click, tenacity, aiokafka).
_NOT_USER_DIRS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {
        str(Path(__file__).resolve().parent),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    }
)


def user_frames(exc: BaseException, *, limit: int = 8) -> str:
    """The frames of ``exc``'s traceback that are the user's code (not workgroup's,
    the standard library's or an installed package's), as Python prints them:
    ``File "app.py", line 12, in list_shards`` and the source line.  Never local
    variables.  Empty when no frame is the user's (workgroup's own frames say
    nothing about the user's code).
    """
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if is_user_frame(f.filename)]
    lines = traceback.format_list(mine[-limit:])
    return "".join(lines).rstrip("\n")


def is_user_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` is the user's code (see :func:`user_frames`)."""
    if filename.startswith("<"):
        return not filename.startswith("<frozen")
    return not str(Path(filename).resolve()).startswith(_NOT_USER_DIRS)


def describe_error(exc: BaseException) -> str:
    """``ValueError: bad record in beta`` (the type alone if it says nothing)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def log_loop_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log what ``loop`` cannot hand to anyone (a task's error nobody read, a
    callback that raised) as a ``loop.unhandled_error`` event, not asyncio's raw
    multi-line text on stderr (which would break a JSON log)."""
    loop_log = get_logger(f"{ROOT_LOGGER}.loop")

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        where = context.get("task") or context.get("future") or context.get("handle")
        fields: dict[str, Any] = {"message": context.get("message", "")}
        if isinstance(where, asyncio.Task):
            fields["task"] = where.get_name()
        elif where is not None:
            fields["callback"] = repr(where)
        if isinstance(error, BaseException):
            fields["error"] = describe_error(error)
            fields["exc_info"] = error
        loop_log.error("loop.unhandled_error", **fields)

    loop.set_exception_handler(handle)


def _add_logger_name(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Name the library of a routed record (workgroup's own carry their event name)."""
    record = event_dict.get("_record")
    if record is not None and not record.name.startswith(ROOT_LOGGER):
        event_dict["logger"] = record.name
    return event_dict


def configure(level: str = "info", *, json: bool = False) -> None:
    """Log workgroup's events at ``level`` and above to stderr: readable lines, or
    JSON objects (one per line) with ``json=True``.

    ``level`` is ``"debug"``, ``"info"``, ``"warning"`` or ``"error"``.  Only the
    ``workgroup`` and ``aiokafka`` loggers are configured (aiokafka's at warning
    and above; other libraries' logging is left as it is); calling it again
    replaces the previous settings.  Lines carry an ISO
    timestamp (UTC), the level, the event name and its fields.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}; use debug, info, warning or error")
    renderer: list[Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if json
        else [
            structlog.dev.ConsoleRenderer(
                colors=sys.stderr.isatty(), exception_formatter=_traceback_without_locals
            )
        ]
    )
    stamp: list[Processor] = [
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *stamp,
                *renderer,
            ],
            # Records logged through ``logging`` directly (aiokafka's, and any
            # under "workgroup." that bypass structlog).
            foreign_pre_chain=[_add_logger_name, *stamp],
        )
    )
    handler.addFilter(_drop_connection_noise)
    root = logging.getLogger(ROOT_LOGGER)
    for name in (ROOT_LOGGER, *ROUTED_LOGGERS):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        # The application's own handlers (if any) would print every event a second time.
        logger.propagate = False
    root.setLevel(numeric)
    # aiokafka's info lines are about its internals; its warnings matter.
    for name in ROUTED_LOGGERS:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
