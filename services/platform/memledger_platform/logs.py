"""structlog over stdlib logging: JSON lines in production, a readable console on a TTY.

Where events are handled, their id, position, tenant and correlation id are bound to the log
context (``bound_event``), and every line written inside a span carries its trace and span ids.
"""

import logging
import sys
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Literal

import orjson
import structlog
from opentelemetry import trace

from memledger_schemas.subjects import HDR_MSG_ID, HDR_POSITION


def configure(level: str = "info", fmt: Literal["auto", "json", "console"] = "auto") -> None:
    """Route every logger (ours and libraries') through one structlog formatter on stderr."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=True) if use_console
        else _json_renderer())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name, structlog.processors.TimeStamper(fmt="iso", utc=True),
        _trace_ids]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(), cache_logger_on_first_use=True)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=shared))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("nats", "uvicorn.error", "psycopg.pool", "httpx"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def bound_event(headers: Mapping[str, str] | None, data: bytes = b"", **more: Any
                ) -> AbstractContextManager[None]:
    """Bind, while a message is handled, the log fields that name the event it carries: id and
    position from the relay's headers, tenant and correlation id from the envelope in ``data``
    (when it parses; for the rare paths, such as dead letters: it parses the message again)."""
    fields: dict[str, Any] = {}
    if headers:
        position = headers.get(HDR_POSITION, "")
        fields.update(event_id=headers.get(HDR_MSG_ID),
                      global_position=int(position) if position.isdigit() else None)
    try:
        envelope = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        envelope = None
    if isinstance(envelope, dict):
        fields.update({name: envelope.get(key) for name, key in _ENVELOPE_FIELDS})
    fields.update(more)
    return structlog.contextvars.bound_contextvars(
        **{k: v for k, v in fields.items() if v is not None})


_ENVELOPE_FIELDS = (("event_id", "event_id"), ("global_position", "global_position"),
                    ("tenant", "tenant_id"), ("correlation_id", "correlation_id"))


def _trace_ids(_: object, __: str, event: structlog.typing.EventDict
               ) -> structlog.typing.EventDict:
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event.setdefault("trace_id", f"{context.trace_id:032x}")
        event.setdefault("span_id", f"{context.span_id:016x}")
    return event


def _json_renderer() -> structlog.typing.Processor:
    # Tracebacks as structured data, one JSON line per record; never with local variables,
    # which would copy request data (personal data included) into the logs.
    dict_tracebacks = structlog.processors.ExceptionRenderer(
        structlog.tracebacks.ExceptionDictTransformer(show_locals=False))
    json_renderer = structlog.processors.JSONRenderer()

    def render(logger: object, name: str, event: structlog.typing.EventDict) -> str:
        return str(json_renderer(logger, name, dict_tracebacks(logger, name, event)))

    return render
