"""The composition root of the query service: PostgreSQL read models for plain and temporal
reads; the vector index and the query embedder for search and context.

Query keeps nothing of its own, so any number of query processes can serve: the vector index is
read as the vectors service writes it (over the embedded index process's socket, or on a Qdrant
server), and the position a search names and waits on is the one the vector projector records
in PostgreSQL (``IndexProgress``).
"""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

import psycopg
from fastapi import FastAPI
from psycopg_pool import ConnectionPool

from memledger_platform import bus, deployment, grpc_server, http_server, telemetry
from memledger_platform.auth_postgres import OpenGate, open_gate
from memledger_platform.clock import Clock, SystemClock
from memledger_platform.consumer_positions import ConsumerPositions
from memledger_platform.crypto import Opener
from memledger_platform.embedding import factory as embedders
from memledger_platform.embedding.embedder import Embedder
from memledger_platform.eventstore.postgres import (
    EVENTS_TABLE,
    PostgresEventStore,
    datastore_from_dsn,
)
from memledger_platform.intake_client import IntakeClient
from memledger_platform.keyring_postgres import keyring_for
from memledger_platform.limits import RequestLimits
from memledger_platform.readmodel import schema
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.factory import connect_index, projector_durable
from memledger_platform.vectorindex.port import VectorIndex
from memledger_query.core import rerank, when
from memledger_query.core.index_progress import (
    IndexProgress,
    PartitionProgress,
    Progress,
    WrittenNotices,
)
from memledger_query.core.ranking import Recipe
from memledger_query.core.reader import Reader
from memledger_query.core.recorder import IntakeRecorder
from memledger_query.core.semantic import Rerank
from memledger_query.entrypoints import (
    forming_http,
    grpc_api,
    lifecycle_http,
    retrieval_http,
    semantic_http,
)
from memledger_query.entrypoints.http import create_app
from memledger_query.entrypoints.semantic_http import Semantic

QUERY_PORT = 8421
QUERY_GRPC_PORT = 8431


@dataclass
class QueryService:
    app: FastAPI
    pool: ConnectionPool[psycopg.Connection[object]]
    store: PostgresEventStore
    index: VectorIndex
    gate: OpenGate
    grpc: grpc_server.Register
    """Registers the query gRPC API on a server."""
    keyring_pool: ConnectionPool[Any] | None = None
    recorder: IntakeRecorder | None = None
    """Records audited retrievals over the NATS connection ``record_retrievals`` opens."""
    follow: Callable[[asyncio.Event], Awaitable[None]] | None = None
    """Hears the projector's notices (and the vector projector's, unless ``build`` was given its
    ``progress``) until its event is set (run beside the service): a read waiting for
    ``min_position`` is released by the commit that reaches it."""

    async def follow_projection(self, stop: asyncio.Event) -> None:
        if self.follow is not None:
            await self.follow(stop)

    async def record_retrievals(self, settings: Settings, nats_url: str, stop: asyncio.Event
                                ) -> None:
        """Send audited retrievals to intake until ``stop`` is set, over the service's one
        NATS connection (an audited call meanwhile waits for its record)."""
        nc = await bus.connect(nats_url, "memledger-query")
        intake: IntakeClient | None = None
        try:
            js = nc.jetstream()
            await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)
            # An audited call waits for its record: no longer than the call itself may take.
            intake = IntakeClient(nc, js, settings.subjects, "query",
                                  timeout_seconds=settings.http_request_timeout_seconds)
            await intake.start()
            if self.recorder is not None:
                self.recorder.attach(intake)
            await stop.wait()
        finally:
            if self.recorder is not None:
                self.recorder.attach(None)
            if intake is not None:
                await intake.close()
            await nc.close()

    def close(self) -> None:
        self.pool.close()
        self.store.close()
        self.index.close()
        self.gate.close()
        if self.keyring_pool is not None:
            self.keyring_pool.close()


def build(settings: Settings, dsn: str, *, embedder: Embedder | None = None,
          index: VectorIndex | None = None, progress: Progress | None = None,
          clock: Clock | None = None) -> QueryService:
    """The query app over ``dsn`` (its pool opens here; ``close`` it). ``index`` and
    ``progress``: the vector index and how far it has got, if not the vectors service's;
    ``clock``: what "now" is for every read (default: the system's)."""
    clock = clock or SystemClock()
    names = schema.Names(settings.postgres_schema, settings.event_partitions)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.prepare(conn, names)
    pool: ConnectionPool[psycopg.Connection[object]] = ConnectionPool(
        dsn, min_size=2, max_size=settings.postgres_pool_size, open=True,
        kwargs={"autocommit": True})  # connections broken by a restart: ``Reader.run``
    store = PostgresEventStore(datastore_from_dsn(dsn, schema=settings.postgres_schema,
                                                  pool_size=2),
                               partitions=settings.event_partitions)
    embedder = embedder or embedders.from_settings(settings)
    index = index or connect_index(settings, embedder.model_id, embedder.dims)
    written: WrittenNotices | None = None
    if progress is None:
        progress, written = _index_progress(pool, names, embedder.model_id)
    keyring, keyring_pool = keyring_for(settings, dsn)
    reader = Reader(pool, names)
    gate = open_gate(settings, dsn)
    app = create_app(reader, store, settings.tenant_fallback, gate.gate, Opener(keyring),
                     clock)
    recorder = IntakeRecorder()
    reranker = rerank.from_settings(settings)
    semantic = Semantic(index, embedder, progress, reader, recorder=recorder,
                        embed_timeout=settings.query_embed_timeout_seconds, clock=clock,
                        recipe=Recipe(ask_weight=settings.ranking_ask_weight,
                                      anchor_weight=settings.ranking_anchor_weight,
                                      anchor_around_weight=(
                                          settings.ranking_anchor_around_weight)),
                        rerank=None if reranker is None else Rerank(reranker,
                                                                    settings.rerank_depth))
    when.warm()  # the date parser's language data, now rather than in a first search
    add_semantic_routes(app, reader, semantic)
    reads = grpc_server.principal_resolver(gate.gate, "read")
    return QueryService(app, pool, store, index, gate,
                        grpc_api.registrar(reader, store, semantic, reads), keyring_pool,
                        recorder, partial(_follow, reader, written, dsn, names))


async def _follow(reader: Reader, written: WrittenNotices | None, dsn: str, names: schema.Names,
                  stop: asyncio.Event) -> None:
    """The projector's notices for reads, the vector projector's for searches."""
    following = [reader.follow(dsn, stop)]
    if written is not None:
        following.append(written.follow(dsn, names.written, stop))
    await asyncio.gather(*following)


def add_semantic_routes(app: FastAPI, reader: Reader, semantic: Semantic) -> None:
    """The routes beyond ``create_app``'s: search, context, the retrieval audit, the lifecycle
    and forming reads."""
    for router in (semantic_http.router(semantic), retrieval_http.router(semantic),
                   lifecycle_http.router(reader, semantic.clock),
                   forming_http.router(reader, semantic.clock)):
        app.include_router(router)


def unconnected_app() -> FastAPI:
    """The query app with every route ``build`` gives it, over nothing (no pool, index or
    embedder): for reading its routes and OpenAPI document, never for serving."""
    nothing: Any = None
    app = create_app(nothing, nothing, None)
    add_semantic_routes(app, nothing, SimpleNamespace(  # type: ignore[arg-type]
        index=None, progress=None, reader=None, run=None, clock=SystemClock()))
    return app


def _index_progress(pool: ConnectionPool[Any], names: schema.Names, model_id: str
                    ) -> tuple[Progress, WrittenNotices]:
    """The position the vector projector of ``model_id`` records as written (of the
    request's tenant's partition, if the events are partitioned), and what hears its
    notices."""
    positions = ConsumerPositions(pool, names.base)
    if names.partitions == 1:
        durable = projector_durable(model_id)
        progress = IndexProgress(lambda: positions.written(durable))
        return progress, WrittenNotices({durable: progress})
    # a partition's reach runs on through the log past what it has written: read, not heard
    each = {projector_durable(model_id, i): IndexProgress(partial(
        positions.written_through, projector_durable(model_id, i), i, EVENTS_TABLE),
        exact=False) for i in range(names.partitions)}
    return PartitionProgress(list(each.values())), WrittenNotices(each)


async def serve(settings: Settings, dsn: str, nats_url: str, stop: asyncio.Event,
                on_ready: Callable[[str], None] | None = None) -> None:
    """The query service on its own ports, HTTP and gRPC (distributed mode)."""
    service = await asyncio.to_thread(build, settings, dsn)
    sock = http_server.bind(settings.http_host, settings.http_port, fallback=QUERY_PORT,
                            setting="MEMLEDGER_HTTP_PORT")
    rpc, grpc_address = await grpc_server.start(
        [service.grpc], settings.http_host, settings.grpc_port, fallback=QUERY_GRPC_PORT,
        setting="MEMLEDGER_GRPC_PORT")
    if on_ready is not None:
        on_ready(http_server.address(sock))
        on_ready(f"gRPC {grpc_address}")
    recording = asyncio.create_task(service.record_retrievals(settings, nats_url, stop))
    following = asyncio.create_task(service.follow_projection(stop))
    try:
        await http_server.serve(RequestLimits(
            service.app, max_body_bytes=settings.http_max_body_bytes,
            timeout_seconds=settings.http_request_timeout_seconds), sock, stop)
    finally:
        stop.set()
        await rpc.stop(grpc_server.GRACE_SECONDS)
        await asyncio.gather(recording, following)
        await asyncio.to_thread(service.close)


async def run(settings: Settings) -> None:
    from memledger_platform.lifecycle import run_until_signalled

    if not settings.postgres_dsn or not settings.nats_url:
        raise ValueError("set MEMLEDGER_POSTGRES_DSN and MEMLEDGER_NATS_URL")
    dsn, url = settings.postgres_dsn, settings.nats_url
    telemetry.configure(settings, "memledger-query")
    await deployment.check(settings, dsn, url)
    await run_until_signalled(lambda stop: serve(settings, dsn, url, stop, print),
                              grace_seconds=settings.stop_grace_seconds)
