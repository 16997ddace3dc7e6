"""The composition root of the lifecycle service (``memledger lifecycle``): the scheduler,
connected to NATS as a client of ingest."""

import asyncio
import logging

from memledger_lifecycle.scheduler import Scheduler
from memledger_platform import telemetry
from memledger_platform.intake_client import ingest_client
from memledger_platform.settings import Settings

log = logging.getLogger(__name__)


async def serve(settings: Settings, nats_url: str, stop: asyncio.Event) -> None:
    """Schedule until ``stop`` is set."""
    async with ingest_client(settings, nats_url, "lifecycle") as client:
        # one scheduler per partition's events stream (its tenants' spaces)
        schedulers = [Scheduler(client.js, settings.subjects.of_partition(i), client.intake,
                                interval_seconds=settings.lifecycle_interval_seconds,
                                opener=client.opener) for i in settings.served_partitions]
        for i in settings.served_partitions:
            log.info("lifecycle scheduler on %s, every %s s",
                     settings.subjects.of_partition(i).events_stream,
                     settings.lifecycle_interval_seconds)
        await asyncio.gather(*(scheduler.run(stop) for scheduler in schedulers))


async def run(settings: Settings) -> None:
    """Distributed-mode entry: the lifecycle scheduler alone against an external NATS."""
    from memledger_platform.lifecycle import run_until_signalled

    if not settings.nats_url:
        raise ValueError("set MEMLEDGER_NATS_URL")
    url = settings.nats_url
    telemetry.configure(settings, "memledger-lifecycle")
    await run_until_signalled(lambda stop: serve(settings, url, stop),
                              grace_seconds=settings.stop_grace_seconds)
