"""The whole semantic pipeline in one test process, on the real engines: writer, NATS intake,
relay, PostgreSQL projector, enricher, vector projector (Qdrant Edge) and the query app."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import ConnectionPool

from memledger_enricher.service import Enricher, Reading
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import create_app as create_ingest_app
from memledger_ingest.entrypoints.intake import Intake
from memledger_platform import receipts
from memledger_platform.auth import TENANT_HEADER, Gate
from memledger_platform.crypto import Keyring, Opener
from memledger_platform.embedding.embedder import Embedder
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.intake_client import IntakeClient
from memledger_platform.readmodel import schema
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from memledger_projector.core.store import tune
from memledger_projector.entrypoints.consumer import Projector
from memledger_query.core.reader import Reader
from memledger_query.core.recorder import IntakeRecorder
from memledger_query.entrypoints import retrieval_http, semantic_http
from memledger_query.entrypoints.http import create_app
from memledger_query.entrypoints.semantic_http import Semantic
from memledger_relay.relay import Relay
from memledger_schemas.commands import CommandBase
from memledger_schemas.subjects import Subjects
from memledger_vectors.consumer import Batching, VectorProjector


@dataclass
class Pipeline:
    writer: GroupCommitWriter
    enricher: Enricher
    vectors: VectorProjector
    index: QdrantEdgeVectorIndex
    app: Any
    ingest_app: Any
    reader: Reader
    semantic: Semantic | None = None
    """Search and context (for a gRPC server over the same pipeline)."""

    def client(self, tenant: str | None = None, key: str | None = None) -> httpx.AsyncClient:
        """A client of the query app as ``tenant`` (header) and/or with an API ``key``."""
        return _client(self.app, tenant, key)

    def writer_client(self, tenant: str | None = None, key: str | None = None
                      ) -> httpx.AsyncClient:
        """A client of the ingest app."""
        return _client(self.ingest_app, tenant, key)


async def write(p: Pipeline, *commands: CommandBase, tenant: str = "acme") -> dict[str, Any]:
    """Commit ``commands`` as one submission: the last one's position and ids."""
    result = (await p.writer.submit(tenant, list(commands)))[-1]
    return {"position": result.position, **result.ids}


def _client(app: Any, tenant: str | None, key: str | None) -> httpx.AsyncClient:
    headers = {TENANT_HEADER: tenant} if tenant else {}
    if key:
        headers["authorization"] = f"Bearer {key}"
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memledger",
                             headers=headers, timeout=30)


async def _no_health() -> dict[str, Any]:
    return {"status": "ok"}


@asynccontextmanager
async def pipeline(dsn: str, store: PostgresEventStore, base: str, nats: tuple[Client,
                   JetStreamContext], subjects: Subjects, writer: GroupCommitWriter,
                   embedder: Embedder, vectors_dir: Path, gate: Gate | None = None,
                   keyring: Keyring | None = None) -> AsyncIterator[Pipeline]:
    """Every service of the pipeline; with a ``keyring`` they open sealed personal data (the
    ``writer`` must then seal with it) and report erasures to the receipts table."""
    nc, js = nats
    names = schema.Names(base)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.ensure_pointer(conn, names)
        receipts.ensure(conn, base)
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    index = QdrantEdgeVectorIndex(vectors_dir, embedder.dims)
    client, audits = (IntakeClient(nc, js, subjects, service, timeout_seconds=20)
                      for service in ("enricher", "query"))
    await client.start()
    await audits.start()
    enricher = Enricher(js, subjects, embedder, client, batch=16,
                        reading=Reading(Opener(keyring)))

    def erased(tenant: str, subject: str, position: int, points: int) -> None:
        with pool.connection() as conn:
            receipts.record(conn, base, tenant, subject, position, "vectors", {"points": points})

    vectors = VectorProjector(subjects, index, embedder.model_id, batching=Batching(64),
                              opener=Opener(keyring), on_erased=erased)
    reader = Reader(pool, names)
    app = create_app(reader, store, "default", gate, Opener(keyring))
    semantic = Semantic(index, embedder, vectors, reader, recorder=IntakeRecorder(audits))
    app.include_router(semantic_http.router(semantic))
    app.include_router(retrieval_http.router(semantic))
    ingest_app = create_ingest_app(writer, _no_health, "default", gate)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(job) for job in (
        Intake(nc, js, writer, subjects, batch=32).run(stop),
        Relay(store, js, subjects, batch=200, poll_seconds=0.05).run(stop),
        Projector(lambda: tune(psycopg.connect(dsn, autocommit=True)), js, subjects, names,
                  batch=200, opener=Opener(keyring)).run(stop),
        enricher.run(stop), vectors.run(js, stop))]
    try:
        yield Pipeline(writer, enricher, vectors, index, app, ingest_app, reader, semantic)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await client.close()
        await audits.close()
        index.close()
        pool.close()
