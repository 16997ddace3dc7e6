"""Which event store and which events stream belong together, so that a replica pointed at the
wrong one says so at start instead of mixing two deployments.

The event store's schema holds one row naming its deployment (an id made on its first start)
and the events stream it is relayed to; the events stream carries the same id in its metadata.
A service that finds the database bound to another stream, or the stream bound to another
database, refuses to start (``DeploymentMismatch``, naming both and the settings to check)."""

import asyncio
import uuid
from dataclasses import replace

import psycopg
from nats.js import JetStreamContext
from psycopg import sql

from memledger_platform import bus
from memledger_platform.pg_locks import creating, exclusively
from memledger_platform.settings import Settings

TABLE = "memledger_deployment"
METADATA_KEY = "memledger_deployment"
_SETTINGS = "MEMLEDGER_POSTGRES_DSN, MEMLEDGER_POSTGRES_SCHEMA and MEMLEDGER_NATS_PREFIX"


class DeploymentMismatch(RuntimeError):
    """The event store and the events stream a service was given belong to different
    deployments; the message names both."""


async def check(settings: Settings, dsn: str, nats_url: str) -> str:
    """Bind the event store of ``settings`` and its events stream to one deployment on their
    first start, or check that they are bound to each other; return the deployment's id."""
    nc = await bus.connect(nats_url, "memledger-deployment-check")
    try:
        js = nc.jetstream()
        await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)
        # Partitioned (docs/adr/0016): the store is bound to its first partition's stream, and
        # every partition's stream to the store (one partition count per deployment's data).
        first, *others = settings.subjects.every_partition()
        deployment = await bind(js, first.events_stream, dsn, settings.postgres_schema)
        for partition in others:
            await _bind_stream(js, partition.events_stream, deployment,
                               settings.postgres_schema)
        return deployment
    finally:
        await nc.close()


async def bind(js: JetStreamContext, stream: str, dsn: str, schema: str) -> str:
    """``check`` on an open connection, for the events stream ``stream`` (which exists)."""
    deployment = await asyncio.to_thread(bind_database, dsn, schema, stream)
    await _bind_stream(js, stream, deployment, schema)
    return deployment


def bind_database(dsn: str, schema: str, stream: str) -> str:
    """The deployment of the event store in ``schema`` (made on first use, bound to
    ``stream``); raises if it is bound to another stream."""
    table = sql.Identifier(schema, TABLE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with exclusively(conn, creating(schema)):
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (one boolean PRIMARY KEY DEFAULT true CHECK (one), "
                "deployment text NOT NULL, events_stream text NOT NULL, "
                "bound_at timestamptz NOT NULL DEFAULT now())").format(table))
        conn.execute(sql.SQL("INSERT INTO {} (deployment, events_stream) VALUES (%s, %s) "
                             "ON CONFLICT DO NOTHING").format(table), (str(uuid.uuid4()), stream))
        row = conn.execute(sql.SQL("SELECT deployment, events_stream FROM {}").format(
            table)).fetchone()
    assert row is not None
    deployment, bound = str(row[0]), str(row[1])
    if bound != stream:
        raise DeploymentMismatch(
            f"the event store in schema {schema!r} is relayed to the events stream {bound!r}, "
            f"not to {stream!r}: this replica is pointed at the wrong database or stream "
            f"(check {_SETTINGS})")
    return deployment


async def _bind_stream(js: JetStreamContext, stream: str, deployment: str, schema: str) -> None:
    info = await js.stream_info(stream)
    metadata = dict(info.config.metadata or {})
    owner = metadata.get(METADATA_KEY)
    if owner == deployment:
        return
    if owner is not None:
        raise DeploymentMismatch(
            f"the events stream {stream!r} belongs to deployment {owner}, but the event store "
            f"in schema {schema!r} is deployment {deployment}: this replica is pointed at the "
            f"wrong database or stream (check {_SETTINGS})")
    await js.update_stream(replace(info.config, metadata={**metadata, METADATA_KEY: deployment}))
