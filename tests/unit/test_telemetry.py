"""Trace context in and out of W3C ``traceparent`` strings, the shape of batch spans, the log
fields bound where events are handled, and the setting that turns exporting on."""

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, Tracer

from memledger_platform import logs, telemetry
from memledger_platform.settings import Settings, SettingsError, load_settings
from memledger_schemas.subjects import HDR_MSG_ID, HDR_POSITION

A = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
B = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tracer]:
    """A tracer of a provider of this test's own, with tracing switched on."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry._state, "enabled", True)
    yield provider.get_tracer("test")
    provider.shutdown()


def test_a_traceparent_names_a_remote_context_and_a_span_gives_its_own_back() -> None:
    from opentelemetry import trace

    remote = trace.get_current_span(telemetry.context_of(A))
    assert telemetry.traceparent_of(remote) == A
    assert telemetry.traceparent_of(trace.get_current_span(telemetry.context_of("junk"))) is None
    assert telemetry.traceparent_of(INVALID_SPAN) is None


def test_a_batch_of_one_context_is_its_child_and_of_many_a_new_trace_linked_to_each(
        tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    with telemetry.span(tracer, "one", [A, A, None]):
        pass
    with telemetry.span(tracer, "many", [A, B]):
        pass
    one, many = exporter.get_finished_spans()
    assert one.parent is not None
    assert f"{one.parent.span_id:016x}" == A.split("-")[2]
    assert f"{one.context.trace_id:032x}" == A.split("-")[1]
    assert many.parent is None
    assert {f"{link.context.span_id:016x}" for link in many.links} == {
        A.split("-")[2], B.split("-")[2]}


def test_a_message_sent_gets_a_child_context_of_the_stored_one(
        tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    sent = telemetry.child_traceparent(tracer, "publish", A)
    assert sent is not None
    assert sent != A
    assert sent.split("-")[1] == A.split("-")[1]  # the same trace
    [span] = exporter.get_finished_spans()
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == A.split("-")[2]


def test_with_tracing_off_nothing_is_recorded_and_contexts_pass_through_unchanged(
        monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter) -> None:
    monkeypatch.setattr(telemetry._state, "enabled", False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    assert telemetry.child_traceparent(tracer, "publish", A) == A
    with telemetry.span(tracer, "batch", [A, B]) as current:
        assert current is INVALID_SPAN
        assert telemetry.inject({}) == {}
    assert exporter.get_finished_spans() == ()
    assert not telemetry.configure(Settings(otlp_endpoint=None), "memledger-test")


def test_the_commands_a_span_sends_carry_its_context(tracer: Tracer) -> None:
    with telemetry.span(tracer, "enrich", [A]) as current:
        headers = telemetry.inject({"reply": "x"})
    assert headers == {"reply": "x", "traceparent": telemetry.traceparent_of(current)}


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """memledger's JSON logging, into a buffer rather than stderr; then logging as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    logs.configure("info", "json")
    buffer = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(buffer)
    yield buffer
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def test_log_lines_name_the_event_handled_and_the_span_they_were_written_in(
        tracer: Tracer, json_logs: io.StringIO) -> None:
    envelope = {"event_id": "e-1", "global_position": 7, "tenant_id": "acme",
                "correlation_id": "c-9", "payload": {"content": "not logged"}}
    try:
        with (telemetry.span(tracer, "apply", [A]),
              logs.bound_event({HDR_MSG_ID: "e-1", HDR_POSITION: "7"},
                               json.dumps(envelope).encode())):
            logging.getLogger("memledger.test").warning("dead-lettered")
    finally:
        structlog.contextvars.clear_contextvars()
    line = json.loads(json_logs.getvalue().strip().splitlines()[-1])
    assert {k: line[k] for k in ("event_id", "global_position", "tenant", "correlation_id")
            } == {"event_id": "e-1", "global_position": 7, "tenant": "acme",
                  "correlation_id": "c-9"}
    assert line["trace_id"] == A.split("-")[1]
    assert "payload" not in line


def test_an_otlp_endpoint_that_is_not_a_url_fails_start_up_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_OTLP_ENDPOINT", "collector:4318")
    with pytest.raises(SettingsError, match="MEMLEDGER_OTLP_ENDPOINT"):
        load_settings()
    monkeypatch.setenv("MEMLEDGER_OTLP_ENDPOINT", "http://collector:4318")
    assert load_settings().otlp_endpoint == "http://collector:4318"
