"""The composition root of the projector: events stream → PostgreSQL read models."""

import asyncio
import logging
from typing import Any

import psycopg

from memledger_platform import bus, deployment, telemetry
from memledger_platform.crypto import Opener
from memledger_platform.keyring_postgres import keyring_for
from memledger_platform.lease import Lease, while_leased
from memledger_platform.readmodel import schema
from memledger_platform.settings import Settings
from memledger_projector.core.store import tune
from memledger_projector.entrypoints.consumer import Projector
from memledger_schemas.subjects import Subjects

log = logging.getLogger(__name__)


async def serve(settings: Settings, dsn: str, nats_url: str, stop: asyncio.Event) -> None:
    """Project until ``stop`` is set, while this projector holds the lease on the read models
    of its event store and stream (another projector on them stands by, naming the holder).
    With the events partitioned, one projector per partition this process serves, each with
    its own checkpoint and its own lease (named by its partition's stream)."""
    names = schema.Names(settings.postgres_schema, settings.event_partitions)
    version = await asyncio.to_thread(_prepare, dsn, names)
    nc = await bus.connect(nats_url, "memledger-projector")
    js = nc.jetstream()
    streams = [settings.subjects.of_partition(i) for i in settings.served_partitions]
    await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)

    def connect() -> psycopg.Connection[Any]:
        return tune(psycopg.connect(dsn, autocommit=True))

    keyring, pool = await asyncio.to_thread(keyring_for, settings, dsn)
    projectors = [Projector(connect, js, subjects, names, batch=settings.projector_batch,
                            opener=Opener(keyring)) for subjects in streams]

    async def lead(subjects: Subjects, projector: Projector) -> None:
        lease = Lease(dsn, "projector", f"{settings.postgres_schema} {subjects.events_stream}")

        async def project(turn_over: asyncio.Event) -> None:
            log.info("projecting %s into %s", subjects.events_stream, names.schema(version))
            await projector.run(turn_over)

        await while_leased(lease, stop, project)

    try:
        await asyncio.gather(*(lead(subjects, projector)
                               for subjects, projector in zip(streams, projectors, strict=True)))
    finally:
        await nc.close()
        if pool is not None:
            pool.close()


async def run(settings: Settings) -> None:
    """Distributed-mode entry: the projector alone against external PostgreSQL and NATS."""
    from memledger_platform.lifecycle import run_until_signalled

    if not settings.postgres_dsn or not settings.nats_url:
        raise ValueError("set MEMLEDGER_POSTGRES_DSN and MEMLEDGER_NATS_URL")
    dsn, url = settings.postgres_dsn, settings.nats_url
    telemetry.configure(settings, "memledger-projector")
    await deployment.check(settings, dsn, url)
    await run_until_signalled(lambda stop: serve(settings, dsn, url, stop),
                              grace_seconds=settings.stop_grace_seconds)


def _prepare(dsn: str, names: schema.Names) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return schema.prepare(conn, names)
