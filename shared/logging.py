"""structlog configured once: JSON when stdout is not a TTY (production), console otherwise.
Context (``session_id``, ``request_id``, ``call_id``) is bound with contextvars so it travels
through every log line of the work it belongs to. The standard library's loggers (aiokafka,
uvicorn, PyMongo, FastStream) go through structlog's ``ProcessorFormatter`` with the same
processors and renderer: one JSON stream, each line with its ``logger`` name. With tracing on
(``shared.tracing``) a line logged inside a span carries its ``trace_id`` and ``span_id``."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from shared import tracing


def configure_logging(level: str = "INFO", fmt: str = "auto", service: str | None = None) -> None:
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        tracing.log_ids,  # trace_id, span_id inside a span (tracing on)
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # the standard library's records: the same processors and renderer, one line each
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder(),
                           *processors],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    ))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_session_core", False):
            root.removeHandler(old)
    handler._session_core = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # aiokafka/PyMongo INFO is chatty; warnings and errors show
    if service:
        structlog.contextvars.bind_contextvars(service=service)


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)


bind = structlog.contextvars.bind_contextvars
bound = structlog.contextvars.bound_contextvars
clear = structlog.contextvars.clear_contextvars
