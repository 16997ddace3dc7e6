"""The semantic pipeline with memory forming itself: the enricher's forming consumer (an
extractor, sessions read from the event store) and the lifecycle scheduler (themes, learned
importance), on the real engines."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_enricher.extractor import Extractor
from memledger_enricher.forming_service import Delivery, Forming
from memledger_enricher.session_turns import EventStoreTurns
from memledger_lifecycle.scheduler import Scheduler
from memledger_platform.clock import SystemClock
from memledger_platform.crypto import Keyring, Opener
from memledger_platform.eventstore import EventStore
from memledger_platform.intake_client import IntakeClient
from memledger_query.entrypoints import forming_http
from memledger_schemas.subjects import Subjects
from tests.integration.semantic_support import Pipeline

Nats = tuple[Client, JetStreamContext]


@dataclass
class Formers:
    forming: Forming
    scheduler: Scheduler | None


@asynccontextmanager
async def forming(p: Pipeline, store: EventStore, nats: Nats, subjects: Subjects,
                  extractor: Extractor, *, keyring: Keyring | None = None,
                  scheduler: bool = True, summary_every: int = 0, max_deliveries: int = 5,
                  durable: str = "forming-test", retry_delay: float = 0.2
                  ) -> AsyncIterator[Formers]:
    """The forming consumer (and, with ``scheduler``, the lifecycle scheduler ticking every
    0.2 s) beside pipeline ``p``, whose query app gets the profile and theme routes."""
    nc, js = nats
    opener = Opener(keyring)
    clients = {name: IntakeClient(nc, js, subjects, name, timeout_seconds=20)
               for name in ("enricher", "lifecycle")}
    for client in clients.values():
        await client.start()
    former = Forming(js, subjects, extractor, clients["enricher"],
                     turns=EventStoreTurns(store, opener), opener=opener,
                     summary_every=summary_every, delivery=Delivery(
                         max_deliveries=max_deliveries, durable=durable,
                         retry_delay=retry_delay))
    ticking = Scheduler(js, subjects, clients["lifecycle"], interval_seconds=0.2,
                        opener=opener) if scheduler else None
    p.app.include_router(forming_http.router(p.reader, SystemClock()))
    stop = asyncio.Event()
    jobs: list[Any] = [former.run(stop), *([ticking.run(stop)] if ticking else [])]
    tasks = [asyncio.create_task(job) for job in jobs]
    try:
        yield Formers(former, ticking)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        for client in clients.values():
            await client.close()
