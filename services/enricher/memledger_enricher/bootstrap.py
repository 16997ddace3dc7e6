"""The composition root of the enricher: events → embeddings and extractions → ingest."""

import asyncio
import logging

from memledger_enricher import embedders
from memledger_enricher.service import DURABLE, Enricher
from memledger_platform import bus, telemetry
from memledger_platform.crypto import Opener
from memledger_platform.intake_client import IntakeClient
from memledger_platform.keyring_postgres import keyring_for
from memledger_platform.settings import Settings
from memledger_platform.vectorindex.factory import model_slug

log = logging.getLogger(__name__)


async def serve(settings: Settings, nats_url: str, stop: asyncio.Event) -> None:
    """Enrich until ``stop`` is set."""
    embedder = await asyncio.to_thread(embedders.from_settings, settings)
    nc = await bus.connect(nats_url, "memledger-enricher")
    js = nc.jetstream()
    await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)
    intake = IntakeClient(nc, js, settings.subjects,
                          timeout_seconds=settings.enricher_reply_timeout_seconds)
    await intake.start()
    # One consumer per model: switching the model re-enriches the whole log with the new one.
    # Sealed personal data is opened with the subjects' keys, kept beside the event store.
    keyring, pool = (await asyncio.to_thread(keyring_for, settings, settings.postgres_dsn)
                     if settings.postgres_dsn else (None, None))
    enricher = Enricher(js, settings.subjects, embedder, intake, batch=settings.enricher_batch,
                        durable=f"{DURABLE}-{model_slug(embedder.model_id)}",
                        opener=Opener(keyring))
    log.info("enriching %s with %s", settings.subjects.events_stream, embedder.model_id)
    try:
        await enricher.run(stop)
    finally:
        await intake.close()
        await nc.close()
        if pool is not None:
            pool.close()


async def run(settings: Settings) -> None:
    """Distributed-mode entry: the enricher alone against an external NATS."""
    from memledger_platform.lifecycle import run_until_signalled

    if not settings.nats_url:
        raise ValueError("set MEMLEDGER_NATS_URL")
    url = settings.nats_url
    telemetry.configure(settings, "memledger-enricher")
    await run_until_signalled(lambda stop: serve(settings, url, stop))
