"""Structured logging: one place that configures structlog for workgroup.

Event names are stable, dotted identifiers (``member.joined``,
``group.rebalance_started``) so that logs can be searched and alerted on.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def get_logger(name: str, **initial: Any) -> structlog.stdlib.BoundLogger:
    """Return a logger for one module, bound to ``initial`` context."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name, **initial)
    return logger


def configure(level: str = "info", *, json: bool = False) -> None:
    """Configure structlog for a workgroup process (CLI commands call this once)."""
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelName(level.upper())
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
