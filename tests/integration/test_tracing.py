"""One HTTP write is one connected trace, on the real engines: ingest's request span, the
writer's commit, the relay's publish and, through the NATS headers, the projector, the vector
projector and the enricher, whose own write goes back through intake in the same trace."""

from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import telemetry
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.settings import Settings
from memledger_schemas.subjects import Subjects
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import eventually

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CALLER_SPAN_ID = 0x00F067AA0BA902B7
CALLER = f"00-{TRACE_ID:032x}-{CALLER_SPAN_ID:016x}-01"


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span this process ends from now on. The tracer provider is set once per process,
    so tracing stays on for later tests; only the keeping of spans stops."""
    exporter = InMemorySpanExporter()
    assert telemetry.configure(Settings(otlp_endpoint=None), "memledger-test",
                               exporter=exporter)
    yield exporter
    exporter.shutdown()


@pytest.fixture
async def running(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                  nats_js: tuple[Client, JetStreamContext], subjects: Subjects,
                  writer: GroupCommitWriter, tmp_path: Path,
                  spans: InMemorySpanExporter) -> AsyncIterator[Pipeline]:
    async with pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                        writer, HashingEmbedder(), tmp_path / "vectors") as found:
        yield found


def _in_trace(spans: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans()
            if s.context is not None and s.context.trace_id == TRACE_ID]


def _one(spans: Sequence[ReadableSpan], name: str, parent: ReadableSpan | int) -> ReadableSpan:
    parent_id = parent if isinstance(parent, int) else parent.context.span_id
    found = [s for s in spans if s.name == name and s.parent is not None
             and s.parent.span_id == parent_id]
    assert len(found) == 1, f"not one {name} under {parent_id:016x} in:\n{_tree(spans)}"
    return found[0]


def _tree(spans: Sequence[ReadableSpan]) -> str:
    """The spans as an indented tree (children under their parent, in start order)."""
    ids = {s.context.span_id for s in spans if s.context is not None}
    lines: list[str] = []

    def under(parent: int | None, depth: int) -> None:
        for s in sorted(spans, key=lambda s: s.start_time or 0):
            own = s.parent.span_id if s.parent is not None else None
            if (own if own in ids else None) == parent and s.context is not None:
                lines.append(f"{'  ' * depth}{s.name} ({s.kind.name.lower()})")
                under(s.context.span_id, depth + 1)

    under(None, 0)
    return "\n".join(lines)


async def test_one_http_write_is_one_trace_from_the_request_through_every_consumer(
        running: Pipeline, spans: InMemorySpanExporter) -> None:
    async with running.writer_client() as ingest, running.client() as query:
        created = await ingest.post("/v1/spaces", json={"space_id": "traced"})
        assert created.status_code == 201, created.text
        # Every consumer past the space's event, so that the write comes in a batch of its own.
        settled = await query.get("/v1/spaces/traced/changes",
                                  params={"min_position": 1, "wait_ms": 10_000})
        assert settled.status_code == 200, settled.text
        assert await running.vectors.wait_for(1, 10)
        written = await ingest.post("/v1/spaces/traced/memories", headers={
            "traceparent": CALLER}, json={"kind": "fact", "content": "The sky is blue"})
        assert written.status_code == 201, written.text
        [event_id] = written.json()["event_ids"]
        read = await query.get(f"/v1/spaces/traced/items/{written.json()['ids']['item_id']}",
                               headers={"traceparent": CALLER},
                               params={"min_position": written.json()["position"]})
        assert read.status_code == 200, read.text

    async def enriched_and_projected() -> list[ReadableSpan]:
        found = _in_trace(spans)
        names = [s.name for s in found]
        assert names.count("writer commit") == 2, names  # the write, the enricher's
        assert names.count("projector handle") == 2, names  # each projected
        return found

    trace = await eventually(enriched_and_projected, timeout=30)
    request = _one(trace, "POST /v1/spaces/{space_id}/memories", CALLER_SPAN_ID)
    assert request.kind is SpanKind.SERVER
    assert request.attributes is not None
    assert request.attributes["http.response.status_code"] == 201
    _one(trace, "writer commit", request)
    publish = _one(trace, "relay publish", request)
    assert publish.kind is SpanKind.PRODUCER
    assert publish.attributes is not None
    assert publish.attributes["memledger.event_id"] == event_id
    _one(trace, "projector handle", publish)
    _one(trace, "vectors handle", publish)
    enricher = _one(trace, "enricher handle", publish)
    # the enricher's command went through intake with its context: its commit and publish
    _one(trace, "writer commit", enricher)
    learned = _one(trace, "relay publish", enricher)
    _one(trace, "projector handle", learned)
    # and a read: the query app's request span, in the caller's trace too
    _one(trace, "GET /v1/spaces/{space_id}/items/{item_id}", CALLER_SPAN_ID)
