"""structlog over stdlib logging: JSON lines in production, a readable console on a TTY."""

import logging
import sys
from typing import Literal

import structlog


def configure(level: str = "info", fmt: Literal["auto", "json", "console"] = "auto") -> None:
    """Route every logger (ours and libraries') through one structlog formatter on stderr."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=True) if use_console
        else _json_renderer())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name, structlog.processors.TimeStamper(fmt="iso", utc=True)]
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


def _json_renderer() -> structlog.typing.Processor:
    # Tracebacks as structured data, one JSON line per record; never with local variables,
    # which would copy request data (personal data included) into the logs.
    dict_tracebacks = structlog.processors.ExceptionRenderer(
        structlog.tracebacks.ExceptionDictTransformer(show_locals=False))
    json_renderer = structlog.processors.JSONRenderer()

    def render(logger: object, name: str, event: structlog.typing.EventDict) -> str:
        return str(json_renderer(logger, name, dict_tracebacks(logger, name, event)))

    return render
