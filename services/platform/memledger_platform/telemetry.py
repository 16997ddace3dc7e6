"""OpenTelemetry for every service: ``configure`` once per process (from its composition root),
W3C trace context in and out of headers, span helpers shaped for memledger's batches, and the
few metrics it records.

Without ``MEMLEDGER_OTLP_ENDPOINT`` nothing is set up: the API's no-op tracer and meter stay,
``enabled()`` is false and the hot paths skip tracing altogether (a client's ``traceparent`` is
then stored and forwarded unchanged). With it, spans leave in batches from a background thread
and metrics every ``OTEL_METRIC_EXPORT_INTERVAL`` ms (60 s by default), both by OTLP/HTTP.

One write's trace: the HTTP request's server span is the parent of the writer's commit span and,
through the ``traceparent`` stored in the event, of the relay's publish span, whose context the
NATS message carries to the projector, the vector projector and the enricher (whose commands
carry the enricher's span on to intake and the writer again). A commit shared by several
requests, or a consumer batch of several messages, is a new trace linked to each of theirs.
"""

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from nats.aio.msg import Msg
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memledger_platform.settings import Settings
from memledger_schemas.subjects import HDR_MSG_ID, HDR_POSITION, HDR_TRACEPARENT

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter


@dataclass
class _State:
    enabled: bool = False


_state = _State()
log = logging.getLogger(__name__)
_propagator = TraceContextTextMapPropagator()
_meter = metrics.get_meter("memledger")
EVENTS_WRITTEN = _meter.create_counter(
    "memledger.events.written", unit="{event}", description="events committed by the writer")
EVENTS_PUBLISHED = _meter.create_counter(
    "memledger.events.published", unit="{event}", description="events the relay published")
EVENTS_CONSUMED = _meter.create_counter(
    "memledger.events.consumed", unit="{event}",
    description="event messages handled, by consumer (projector, vectors, enricher)")
DEAD_LETTERS = _meter.create_counter(
    "memledger.dead_letters", unit="{message}",
    description="messages sent to the dead-letter stream, by source")
CONSUMER_PENDING = _meter.create_gauge(
    "memledger.consumer.pending", unit="{event}",
    description="events of the stream not yet delivered to the consumer (its lag), as of its "
    "last batch")


def configure(settings: Settings, service_name: str, *,
              exporter: "SpanExporter | None" = None) -> bool:
    """Set up tracing and metrics for this process; return whether tracing is on. Spans and
    metrics go to ``settings.otlp_endpoint``; ``exporter`` (a test's in-memory one) also gets
    every span as it ends. Neither: nothing is set up. Calling it again adds exporters."""
    endpoint = settings.otlp_endpoint
    if endpoint is None and exporter is None:
        return False
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = _tracer_provider(service_name)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if endpoint is not None:
        _export_otlp(provider, endpoint.rstrip("/"))
    _state.enabled = True
    return True


def _tracer_provider(service_name: str) -> "TracerProvider":
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    trace.set_tracer_provider(provider)
    return provider


def _export_otlp(provider: "TracerProvider", base: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{base}/v1/traces")))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(f"{base}/v1/metrics"))
    metrics.set_meter_provider(MeterProvider(resource=provider.resource, metric_readers=[reader]))


def tracer(name: str) -> Tracer:
    """The tracer of a module (bound to the provider ``configure`` sets, whenever it does)."""
    return trace.get_tracer(name)


def enabled() -> bool:
    """Whether spans are recorded in this process (``configure`` found somewhere to send them)."""
    return _state.enabled


def observe(name: str, description: str, read: Callable[[], int | None]) -> None:
    """A gauge read when metrics are collected, in the exporter's thread (``read`` returns
    ``None``, or raises, when it cannot tell: nothing is reported then)."""
    def callback(_: CallbackOptions) -> Iterable[Observation]:
        try:
            value = read()
        except Exception as error:
            log.debug("gauge %s not read: %r", name, error)
            return []
        return [] if value is None else [Observation(value)]

    _meter.create_observable_gauge(name, [callback], unit="{event}", description=description)


# --- W3C trace context ------------------------------------------------------------------------

def context_of(traceparent: str | None) -> Context:
    """The trace context a W3C ``traceparent`` names; an empty one (a new trace) for none or a
    malformed one."""
    if not traceparent:
        return Context()
    return _propagator.extract({HDR_TRACEPARENT: traceparent}, context=Context())


def traceparent_of(span: Span) -> str | None:
    """The W3C ``traceparent`` of ``span`` (``None``: no trace, tracing off)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def current_traceparent() -> str | None:
    return traceparent_of(trace.get_current_span())


def inject(headers: dict[str, str]) -> dict[str, str]:
    """``headers``, with the current span's ``traceparent`` when there is one."""
    traceparent = current_traceparent()
    if traceparent is not None:
        headers[HDR_TRACEPARENT] = traceparent
    return headers


# --- spans --------------------------------------------------------------------------------------

def span(tracer: Tracer, name: str, traceparents: Sequence[str | None], *,
         kind: SpanKind = SpanKind.CONSUMER, attributes: Attributes = None
         ) -> AbstractContextManager[Span]:
    """A span, current while it lasts, for work done on behalf of ``traceparents``' contexts: the
    child of their context when they share one, else the root of a new trace linked to each
    (messaging conventions: a batch has many parents). A no-op when tracing is off."""
    if not _state.enabled:
        return nullcontext(INVALID_SPAN)
    distinct = {t for t in traceparents if t}
    if len(distinct) <= 1:
        return tracer.start_as_current_span(name, context_of(next(iter(distinct), None)), kind,
                                            attributes)
    links = [Link(c) for t in distinct
             if (c := trace.get_current_span(context_of(t)).get_span_context()).is_valid]
    return tracer.start_as_current_span(name, Context(), kind, attributes, links)


def child_traceparent(tracer: Tracer, name: str, traceparent: str | None, *,
                      kind: SpanKind = SpanKind.PRODUCER, attributes: Attributes = None
                      ) -> str | None:
    """A span of no duration of its own (a message sent), the child of ``traceparent``; its
    ``traceparent``, to go with the message. Tracing off, or no parent: ``traceparent``."""
    if not _state.enabled or not traceparent:
        return traceparent
    sent = tracer.start_span(name, context_of(traceparent), kind, attributes)
    sent.end()
    return traceparent_of(sent) or traceparent


@contextmanager
def consuming(tracer: Tracer, consumer: str, msgs: Sequence[Msg]) -> Iterator[Span]:
    """Around the handling of a fetched batch of event messages: a span (``consumer`` batch,
    see ``span``), the log fields that name the events, the consumed counter and the pending
    gauge."""
    headers = [m.headers or {} for m in msgs]
    positions = [h[HDR_POSITION] for h in headers if HDR_POSITION in h]
    fields: dict[str, Any] = {"consumer": consumer, "messages": len(msgs)}
    if positions:
        fields.update(first_position=int(positions[0]), last_position=int(positions[-1]))
    if len(msgs) == 1:
        fields.update(event_id=headers[0].get(HDR_MSG_ID), global_position=fields.get(
            "last_position"))
    attributes = {f"memledger.{k}": v for k, v in fields.items() if v is not None}
    _record_pending(consumer, msgs)
    with (span(tracer, f"{consumer} handle", [h.get(HDR_TRACEPARENT) for h in headers],
               attributes=attributes) as current,
          structlog.contextvars.bound_contextvars(**fields)):
        yield current
    EVENTS_CONSUMED.add(len(msgs), {"consumer": consumer})


def _record_pending(consumer: str, msgs: Sequence[Msg]) -> None:
    try:
        pending = msgs[-1].metadata.num_pending
    except (AttributeError, ValueError, IndexError):  # not a JetStream message
        return
    CONSUMER_PENDING.set(pending, {"consumer": consumer})


class TracingMiddleware:
    """A server span per HTTP request, the child of the caller's ``traceparent`` header, named
    ``METHOD /route/{template}`` (as soon as a router has matched), current while the app runs;
    one per request where such apps are nested. Tracing off: a pass-through. (The query app
    needs none: FastAPI traces its requests itself, with the same tracer provider.)"""

    def __init__(self, app: ASGIApp, tracer: Tracer | None = None) -> None:
        self._app = app
        self._tracer = tracer or trace.get_tracer("memledger.http")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _state.enabled or scope["type"] != "http" or _TRACED in scope:
            await self._app(scope, receive, send)
            return
        scope[_TRACED] = True
        method = scope["method"]
        header = next((v for k, v in scope["headers"] if k == b"traceparent"), None)
        with self._tracer.start_as_current_span(
                method, context_of(header and header.decode("latin-1")), SpanKind.SERVER,
                {"http.request.method": method, "url.path": scope["path"]}) as current:
            try:
                await self._app(scope, receive, _status_to(current, send))
            finally:
                _name_after_route(current, method, scope)


_TRACED = "memledger.traced"


def _name_after_route(current: Span, method: str, scope: Scope) -> None:
    template = getattr(scope.get("route"), "path", None)
    if template:
        current.update_name(f"{method} {template}")
        current.set_attribute("http.route", template)


def _status_to(current: Span, send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            status = message["status"]
            current.set_attribute("http.response.status_code", status)
            if status >= 500:
                current.set_status(Status(StatusCode.ERROR))
        await send(message)

    return sending
