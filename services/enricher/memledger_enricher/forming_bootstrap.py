"""The forming consumer as the settings ask for it: its extractor, and the event store it
reads sessions from for their summaries (none without a PostgreSQL DSN: no summaries)."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from memledger_enricher import extractors
from memledger_enricher.forming_service import DURABLE, Delivery, Forming
from memledger_enricher.session_turns import EventStoreTurns
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.intake_client import IngestClientSession
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.factory import model_slug

log = logging.getLogger(__name__)


@asynccontextmanager
async def forming_of(settings: Settings, client: IngestClientSession
                     ) -> AsyncIterator[list[Forming]]:
    """The forming consumers, one per partition's events stream (none with
    ``MEMLEDGER_EXTRACTOR=off``); their event store is closed on the way out."""
    extractor = extractors.from_settings(settings)
    if extractor is None:
        yield []
        return
    store = None
    if settings.postgres_dsn:
        store = await asyncio.to_thread(PostgresEventStore, datastore_from_dsn(
            settings.postgres_dsn, schema=settings.postgres_schema, pool_size=1))
    # One consumer per extractor and prompt: a new one reads the whole log again.
    version = f"{extractor.extractor_id}/{extractor.prompt_version}"
    try:
        log.info("forming memories with %s (%s)", extractor.extractor_id,
                 extractor.prompt_version)
        yield [Forming(client.js, settings.subjects.of_partition(i), extractor, client.intake,
                       turns=EventStoreTurns(store, client.opener) if store else None,
                       opener=client.opener, summary_every=settings.extractor_summary_every,
                       delivery=Delivery(max_deliveries=settings.extractor_max_deliveries,
                                         durable=f"{DURABLE}-{model_slug(version)}"))
               for i in settings.served_partitions]
    finally:
        if store is not None:
            store.close()
