"""The composition root of the ingest service: builds the adapters from settings and runs the
writer, the NATS intake consumer and the HTTP and gRPC APIs until told to stop. (The relay is a
service of its own: ``memledger_relay``.)"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import ConnectionPool
from starlette.types import ASGIApp

from memledger_ingest.core.erasure import Erasure
from memledger_ingest.core.writer import GroupCommitWriter, WriterLimits, WriterTuning
from memledger_ingest.domain.targets import IndexModel
from memledger_ingest.entrypoints import grpc_api
from memledger_ingest.entrypoints.http import behind, create_app
from memledger_ingest.entrypoints.intake import Intake
from memledger_platform import bus, deployment, grpc_server, http_server, telemetry
from memledger_platform.auth_postgres import open_gate
from memledger_platform.embedding import factory as embedders
from memledger_platform.endpoints import Endpoints, endpoints_from
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import PostgresKeyring, keyring_for
from memledger_platform.limits import RequestLimits
from memledger_platform.settings import DEFAULT_HTTP_PORT, Settings
from memledger_platform.stream_cursor import stream_cursor

log = logging.getLogger(__name__)


@dataclass
class IngestService:
    settings: Settings
    store: PostgresEventStore
    nc: Client
    js: JetStreamContext
    writer: GroupCommitWriter
    intake: Intake
    keyring: PostgresKeyring | None = None
    keyring_pool: ConnectionPool[Any] | None = None
    store_dsn: str | None = None

    @property
    def erasure(self) -> Erasure | None:
        if self.keyring is None:
            return None
        dsn = self.settings.postgres_dsn or self.store_dsn
        return Erasure(self.store, self.keyring, self.writer,
                       (dsn, self.settings.postgres_schema) if dsn else None)


async def build(settings: Settings, endpoints: Endpoints) -> IngestService:
    store = PostgresEventStore(datastore_from_dsn(
        endpoints.postgres_dsn, schema=settings.postgres_schema,
        pool_size=settings.postgres_pool_size), partitions=settings.event_partitions)
    await asyncio.to_thread(store.create_tables)
    nc = await bus.connect(endpoints.nats_url, "memledger-ingest")
    js = nc.jetstream(publish_async_max_pending=settings.relay_batch * 2)
    await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)
    keyring, keyring_pool = await asyncio.to_thread(keyring_for, settings,
                                                    endpoints.postgres_dsn)
    if keyring is None:
        log.warning("no MEMLEDGER_MASTER_KEY: personal data is stored unsealed and subjects "
                    "cannot be erased by crypto-shredding")
    limits = WriterLimits(settings.writer_max_group_events, settings.writer_max_group_bytes,
                          settings.writer_commit_timeout_seconds)
    tuning = WriterTuning(linger_seconds=settings.writer_linger_ms / 1000,
                          clock_skew_seconds=settings.clock_skew_seconds)
    writer = GroupCommitWriter(store, limits=limits, tuning=tuning, keyring=keyring,
                               index=_index_model(settings))
    intake = Intake(nc, js, writer, settings.subjects, batch=settings.intake_batch)
    return IngestService(settings, store, nc, js, writer, intake, keyring, keyring_pool,
                         endpoints.postgres_dsn)


def _index_model(settings: Settings) -> IndexModel:
    """The model of the vector index the vectors service keeps (imports must match it)."""
    model = embedders.model_of(settings)
    return IndexModel(model.model_id, model.dims)


async def serve(settings: Settings, endpoints: Endpoints, stop: asyncio.Event,
                on_ready: Callable[[str], None] | None = None,
                also: ASGIApp | None = None, also_grpc: grpc_server.Register | None = None,
                on_grpc_ready: Callable[[str], None] | None = None) -> None:
    """Run ingest until ``stop`` is set. Shutdown order keeps every accepted write: stop taking
    requests, finish the writer's queue, then disconnect. ``also``, ``also_grpc``: APIs of
    another service to serve beside ingest's on the same ports, behind the same limits (what
    ``memledger up`` composes: one port for users)."""
    service = await build(settings, endpoints)
    sock = http_server.bind(settings.http_host, settings.http_port, fallback=DEFAULT_HTTP_PORT,
                            setting="MEMLEDGER_HTTP_PORT")
    gate = await asyncio.to_thread(open_gate, settings, endpoints.postgres_dsn)
    app = create_app(service.writer, lambda: _health(service), settings.tenant_fallback,
                     gate.gate, service.erasure)
    if also is not None:  # embedded mode: the query API behind the same port
        behind(app, also)
    service.writer.start()
    writes = grpc_server.principal_resolver(gate.gate, "write")
    grpc_apis = [grpc_api.registrar(service.writer, writes, service.erasure)]
    if also_grpc is not None:  # embedded mode: the query API on the same port
        grpc_apis.append(also_grpc)
    rpc, grpc_address = await grpc_server.start(
        grpc_apis, settings.http_host, settings.grpc_port,
        fallback=grpc_server.DEFAULT_GRPC_PORT, setting="MEMLEDGER_GRPC_PORT")
    log.info("ingest gRPC listening on %s", grpc_address)
    if on_grpc_ready is not None:
        on_grpc_ready(grpc_address)
    inputs_stop = asyncio.Event()
    limited = RequestLimits(app, max_body_bytes=settings.http_max_body_bytes,
                            timeout_seconds=settings.http_request_timeout_seconds)
    inputs = [asyncio.create_task(http_server.serve(limited, sock, inputs_stop))]
    if settings.intake_enabled:
        inputs.append(asyncio.create_task(service.intake.run(inputs_stop)))
    if on_ready is not None:
        on_ready(http_server.address(sock))
    await stop.wait()
    await _stop_taking_writes(service, inputs_stop, inputs, rpc)
    # Everything in flight is settled by now; drain() would only wait out its timeout.
    await service.nc.flush()
    await service.nc.close()
    await asyncio.to_thread(service.store.close)
    await asyncio.to_thread(gate.close)
    if service.keyring_pool is not None:
        await asyncio.to_thread(service.keyring_pool.close)


WRITER_STOP_SHARE = 0.5
"""The part of ``MEMLEDGER_STOP_GRACE_SECONDS`` the writer has to commit what it was given
before the stop gives up on the rest (the remainder is for disconnecting)."""


async def _stop_taking_writes(service: IngestService, inputs_stop: asyncio.Event,
                              inputs: list["asyncio.Task[None]"], rpc: grpc.aio.Server
                              ) -> None:
    """Stop taking requests, then finish the writer's queue. A writer that cannot finish in
    its share of the grace period (a commit stuck, or a long queue) is abandoned: what it has
    not committed gets a retryable error, so requests waiting on it end, and the stop never
    waits on a stuck commit."""
    budget = service.settings.stop_grace_seconds * WRITER_STOP_SHARE
    giving_up = asyncio.get_running_loop().call_later(budget, service.writer.abandon)
    try:
        inputs_stop.set()
        await asyncio.gather(*inputs, rpc.stop(grpc_server.GRACE_SECONDS))
        await asyncio.to_thread(service.writer.stop, budget)
    finally:
        giving_up.cancel()


async def run(settings: Settings) -> None:
    """Distributed-mode entry: ingest alone against external PostgreSQL and NATS."""
    from memledger_platform.lifecycle import run_until_signalled

    endpoints = endpoints_from(settings)
    telemetry.configure(settings, "memledger-ingest")
    await deployment.check(settings, endpoints.postgres_dsn, endpoints.nats_url)
    await run_until_signalled(lambda stop: serve(settings, endpoints, stop, _announce),
                              grace_seconds=settings.stop_grace_seconds)


def _announce(url: str) -> None:
    log.info("ingest listening on %s", url)


async def _health(service: IngestService) -> dict[str, Any]:
    """The writer's state (``writer_stuck``: a commit has run past its deadline), the
    committed position beside the relayed one (read from the stream itself, so it also checks
    that the two agree), NATS connectivity and intake dead letters."""
    position = await asyncio.to_thread(service.store.max_position)
    try:
        # partitioned: the furthest any partition's relay got (each publishes only its own)
        relayed: int | None = max([(await stream_cursor(service.js, subjects)).position
                                   for subjects in service.settings.subjects.every_partition()])
    except Exception as error:
        log.warning("health could not read the events stream: %s", error)
        relayed = None
    lag = None if relayed is None else max(0, position - relayed)
    writer = service.writer.state()
    return {"status": "ok" if writer["status"] == "ok" else "writer_stuck", "writer": writer,
            "position": position, "relayed_position": relayed, "relay_lag": lag,
            "nats_connected": service.nc.is_connected,
            "intake_dead_letters": service.intake.dead_letters}
