"""Both APIs of memledger over one set of real engines, for tests that compare them: the
ingest HTTP app with the query app behind it (as ``memledger up`` serves them) and a gRPC
server with both servicers, on the writer, relay, projector and vector projector of the
test's own schema and streams."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx
import psycopg
from google.protobuf import json_format
from google.protobuf.message import Message
from nats.aio.client import Client
from nats.js import JetStreamContext
from starlette.routing import Mount

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints import grpc_api as ingest_grpc
from memledger_ingest.entrypoints.http import create_app
from memledger_platform import bus, grpc_server
from memledger_platform.auth import Gate
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.readmodel import schema
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from memledger_projector.core.store import tune
from memledger_projector.entrypoints.consumer import Projector
from memledger_query import bootstrap
from memledger_relay.relay import Relay
from memledger_schemas.grpc.v1 import ingest_pb2_grpc, query_pb2_grpc
from memledger_schemas.subjects import Subjects
from memledger_vectors.consumer import Batching, VectorProjector
from tests.integration.ingest_support import running
from tests.integration.read_support import drop_read_models
from tests.support import delete_streams

TENANT = "acme"
M = TypeVar("M", bound=Message)


@dataclass
class Apis:
    http: httpx.AsyncClient
    ingest: "ingest_pb2_grpc.IngestAsyncStub"  # stubs for type checkers only
    query: "query_pb2_grpc.QueryAsyncStub"
    address: str
    metadata: tuple[tuple[str, str], ...] = ((grpc_server.TENANT_METADATA, TENANT),)


async def _healthy() -> dict[str, Any]:
    return {"status": "ok"}


@asynccontextmanager
async def both_apis(dsn: str, store: PostgresEventStore, base: str,
                    nats: tuple[Client, JetStreamContext], subjects: Subjects,
                    writer: GroupCommitWriter, vectors_dir: Path) -> AsyncIterator[Apis]:
    _, js = nats
    embedder = HashingEmbedder()
    settings = Settings(postgres_schema=base, nats_prefix=subjects.prefix, embedder="hashing",
                        home=vectors_dir.parent)
    index = QdrantEdgeVectorIndex(vectors_dir, embedder.dims)
    vectors = VectorProjector(subjects, index, embedder.model_id,
                              batching=Batching(settings.vector_batch))
    query = await asyncio.to_thread(bootstrap.build, settings, dsn, embedder=embedder,
                                    index=index, progress=vectors)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(job) for job in (
        Relay(store, js, subjects, batch=200, poll_seconds=0.05).run(stop),
        Projector(lambda: tune(psycopg.connect(dsn, autocommit=True)), js, subjects,
                  schema.Names(base), batch=200).run(stop),
        vectors.run(js, stop))]
    writes = grpc_server.principal_resolver(Gate(None, "default"), "write")
    server, address = await grpc_server.start(
        [ingest_grpc.registrar(writer, writes), query.grpc], "127.0.0.1", 0, fallback=0,
        setting="MEMLEDGER_GRPC_PORT")
    app = create_app(writer, _healthy, "default")
    app.routes.append(Mount("/", app=query.app))
    try:
        async with grpc.aio.insecure_channel(address) as channel, httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://memledger",
                headers={grpc_server.TENANT_METADATA: TENANT}, timeout=30) as http:
            yield Apis(http, ingest_pb2_grpc.IngestStub(channel),
                       query_pb2_grpc.QueryStub(channel), address)
    finally:
        stop.set()
        await server.stop(0)
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await asyncio.to_thread(query.close)
        with psycopg.connect(dsn, autocommit=True) as conn:
            drop_read_models(conn, base)


@asynccontextmanager
async def apis_of_their_own(dsn: str, nats_url: str, home: Path) -> AsyncIterator[Apis]:
    """``both_apis`` on a schema, streams and writer of their own (made here, dropped after):
    for a module whose tests share one pipeline (each test's own would be started per test)."""
    base, subjects = f"t_{uuid.uuid4().hex[:12]}", Subjects(prefix=f"t{uuid.uuid4().hex[:10]}")
    store = PostgresEventStore(datastore_from_dsn(dsn, schema=base))
    store.create_tables()
    nc = await bus.connect(nats_url, "memledger-test")
    js = nc.jetstream()
    await bus.ensure_streams(js, subjects)
    try:
        async with running(GroupCommitWriter(store)) as writer, \
                both_apis(dsn, store, base, (nc, js), subjects, writer, home / "vectors") as found:
            yield found
    finally:
        await delete_streams(js, subjects)
        await nc.close()
        store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{base}" CASCADE')


def as_message(body: dict[str, Any], message: M) -> M:
    """An HTTP JSON answer as the gRPC message of the same answer."""
    return json_format.ParseDict(body, message)


def as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
