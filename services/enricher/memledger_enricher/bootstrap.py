"""The composition root of the enricher: events → embeddings and extractions → ingest."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from memledger_enricher.forming_bootstrap import forming_of
from memledger_enricher.logged import LoggedEmbeddings
from memledger_enricher.service import DURABLE, Enricher, Reading
from memledger_platform import telemetry
from memledger_platform.crypto import Opener
from memledger_platform.embedding import factory as embedders
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.intake_client import ingest_client
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.factory import model_slug
from memledger_schemas.subjects import Subjects

log = logging.getLogger(__name__)


async def serve(settings: Settings, nats_url: str, stop: asyncio.Event) -> None:
    """Enrich until ``stop`` is set."""
    embedder = await asyncio.to_thread(embedders.from_settings, settings)
    # One consumer per model: switching the model re-enriches the whole log with the new one.
    # Sealed personal data is opened with the subjects' keys, kept beside the event store.
    async with ingest_client(settings, nats_url, "enricher") as client, \
            _logged(settings, client.opener) as logged:
        # one consumer of each partition's events stream (one: the events stream)
        enrichers = [Enricher(client.js, subjects, embedder, client.intake,
                              batch=settings.enricher_batch,
                              in_flight=settings.enricher_in_flight,
                              durable=f"{DURABLE}-{model_slug(embedder.model_id)}",
                              reading=Reading(client.opener, logged))
                     for subjects in _served(settings)]
        for subjects in _served(settings):
            log.info("enriching %s with %s", subjects.events_stream, embedder.model_id)
        async with forming_of(settings, client) as forming:
            await asyncio.gather(*(enricher.run(stop) for enricher in enrichers),
                                 *(one.run(stop) for one in forming))


@asynccontextmanager
async def _logged(settings: Settings, opener: Opener) -> AsyncIterator[LoggedEmbeddings | None]:
    """Where imports' embeddings are looked up: the event store, when there is a PostgreSQL
    DSN (closed on the way out)."""
    if not settings.postgres_dsn:
        yield None
        return
    store = await asyncio.to_thread(PostgresEventStore, datastore_from_dsn(
        settings.postgres_dsn, schema=settings.postgres_schema, pool_size=1))
    try:
        yield LoggedEmbeddings(store, opener)
    finally:
        store.close()


def _served(settings: Settings) -> list[Subjects]:
    return [settings.subjects.of_partition(i) for i in settings.served_partitions]


async def run(settings: Settings) -> None:
    """Distributed-mode entry: the enricher alone against an external NATS."""
    from memledger_platform.lifecycle import run_until_signalled

    if not settings.nats_url:
        raise ValueError("set MEMLEDGER_NATS_URL")
    url = settings.nats_url
    telemetry.configure(settings, "memledger-enricher")
    await run_until_signalled(lambda stop: serve(settings, url, stop),
                              grace_seconds=settings.stop_grace_seconds)
