"""The composition root of the vectors service (``memledger vectors``): the vector projector,
the one writer of the vector index of the configured embedding model.

In the embedded mode it owns the index: it starts the index process, which serves the shard
on a socket in the data directory to every query process as well (ADR 0006). In the
distributed mode the index is a Qdrant server. Either way it records the position it has
written in PostgreSQL after every batch, which query names as its search basis and waits on.
One works per index: it holds a PostgreSQL advisory lease on the model's index of the event
store and stream, and a second one stands by (naming the holder) and takes over when the first
stops, rather than find the shard locked (embedded) or split the events (distributed).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from memledger_platform import bus, deployment, receipts, telemetry
from memledger_platform.consumer_positions import ConsumerPositions
from memledger_platform.crypto import Opener
from memledger_platform.embedding.factory import model_of
from memledger_platform.keyring_postgres import keyring_for
from memledger_platform.lease import Lease, while_leased
from memledger_platform.readmodel import schema
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.factory import open_index, projector_durable
from memledger_platform.vectorindex.port import IndexUnavailable, VectorIndex
from memledger_platform.vectorindex.process import ProcessVectorIndex
from memledger_vectors.consumer import Batching, VectorProjector

log = logging.getLogger(__name__)

KEEPER_SECONDS = 1.0
"""How often the index process is looked at while the projector is idle (it is started again
no sooner than ``process.RESTART_SECONDS`` after its last start)."""


async def serve(settings: Settings, dsn: str, nats_url: str, stop: asyncio.Event) -> None:
    """Project into the index until ``stop`` is set, whenever this service holds the lease on
    it (the index is opened only then: a standby leaves it to the holder)."""
    model = model_of(settings)
    # one lease per index, whatever the partitions (named by the first one's stream)
    events_stream = settings.subjects.of_partition(0).events_stream
    lease = Lease(dsn, "vectors", f"{settings.postgres_schema} {events_stream} "
                  f"{projector_durable(model.model_id)}")
    await while_leased(lease, stop, lambda turn_over: _serve(settings, dsn, nats_url,
                                                             turn_over))


async def _serve(settings: Settings, dsn: str, nats_url: str, stop: asyncio.Event) -> None:
    """Project into the index until ``stop`` is set, then flush it and let it go."""
    model = model_of(settings)
    pool = await asyncio.to_thread(_prepared_pool, dsn, settings.postgres_schema)
    index: VectorIndex | None = None
    keyring_pool: ConnectionPool[Any] | None = None
    nc = None
    try:
        positions = await asyncio.to_thread(ConsumerPositions, pool, settings.postgres_schema)
        keyring, keyring_pool = await asyncio.to_thread(keyring_for, settings, dsn)
        index = await asyncio.to_thread(open_index, settings, model.model_id, model.dims)
        # one consumer and recorded position per partition, into the one index (its single
        # writer, so every partition, whatever MEMLEDGER_EVENT_PARTITION says)
        streams = settings.subjects.every_partition()
        projectors = [VectorProjector(
            subjects, index, model.model_id,
            batching=Batching(settings.vector_batch, settings.vector_pace_ms / 1000),
            durable=projector_durable(model.model_id, subjects.partition
                                      if subjects.partitioned else None),
            opener=Opener(keyring), on_erased=_receipts(pool, settings.postgres_schema),
            positions=positions) for subjects in streams]
        nc = await bus.connect(nats_url, "memledger-vectors")
        js = nc.jetstream()
        await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)
        for subjects in streams:
            log.info("projecting %s into the vector index of %s", subjects.events_stream,
                     model.model_id)
        await asyncio.gather(*(projector.run(js, stop) for projector in projectors),
                             _keep_serving(index, stop))
    finally:
        if nc is not None:
            await nc.close()
        if index is not None:
            await asyncio.to_thread(index.close)
        if keyring_pool is not None:
            await asyncio.to_thread(keyring_pool.close)
        await asyncio.to_thread(pool.close)


def _prepared_pool(dsn: str, base: str) -> ConnectionPool[Any]:
    """A small pool, once the receipts table (where erasures are acknowledged) exists."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.prepare(conn, schema.Names(base))
    return ConnectionPool(dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True})


def _receipts(pool: ConnectionPool[Any], base: str) -> Callable[[str, str, int, int], None]:
    """Records the vector index's part of an erasure receipt."""
    def erased(tenant: str, subject: str, position: int, points: int) -> None:
        with pool.connection() as conn:
            receipts.record(conn, base, tenant, subject, position, "vectors",
                            {"points": points})

    return erased


async def _keep_serving(index: VectorIndex, stop: asyncio.Event) -> None:
    """Start the index process again if it dies while the projector is idle: query processes
    read it although the projector makes no call."""
    if not isinstance(index, ProcessVectorIndex):
        return
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), KEEPER_SECONDS)
        with contextlib.suppress(IndexUnavailable):
            await asyncio.to_thread(index.ensure_running)


async def run(settings: Settings) -> None:
    """Distributed-mode entry: the vectors service alone against external PostgreSQL and NATS."""
    from memledger_platform.lifecycle import run_until_signalled

    if not settings.postgres_dsn or not settings.nats_url:
        raise ValueError("set MEMLEDGER_POSTGRES_DSN and MEMLEDGER_NATS_URL")
    dsn, url = settings.postgres_dsn, settings.nats_url
    telemetry.configure(settings, "memledger-vectors")
    await deployment.check(settings, dsn, url)
    await run_until_signalled(lambda stop: serve(settings, dsn, url, stop),
                              grace_seconds=settings.stop_grace_seconds)
