"""The composition root of the relay, the single publisher of the events stream.

It runs as its own process (``memledger relay``; ``memledger up`` supervises it as a child), so
that publishing uses a core of its own rather than the ingest process's interpreter. It wakes on
the NOTIFY that every event-store commit sends, and polls as a fallback (a lost notification,
or a listener reconnecting, delays an event by at most ``MEMLEDGER_RELAY_POLL_SECONDS``).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable

from memledger_platform import bus, deployment, notices, telemetry
from memledger_platform.endpoints import Endpoints, endpoints_from
from memledger_platform.eventstore.postgres import (
    EVENTS_TABLE,
    PostgresEventStore,
    datastore_from_dsn,
)
from memledger_platform.lease import Lease
from memledger_platform.settings import Settings
from memledger_platform.stream_cursor import Cursor
from memledger_relay.relay import Relay

log = logging.getLogger(__name__)


async def serve(settings: Settings, endpoints: Endpoints, stop: asyncio.Event) -> None:
    """Relay until ``stop`` is set, then publish what is committed and disconnect. With the
    events partitioned, one relay per partition this process serves, each under its own
    lease and chaining its own stream."""
    store = PostgresEventStore(datastore_from_dsn(
        endpoints.postgres_dsn, schema=settings.postgres_schema, pool_size=2),
        partitions=settings.event_partitions)
    await asyncio.to_thread(store.create_tables)
    nc = await bus.connect(endpoints.nats_url, "memledger-relay")
    js = nc.jetstream()
    relays = [Relay(store, js, settings.subjects.of_partition(i), batch=settings.relay_batch,
                    poll_seconds=settings.relay_poll_seconds)
              for i in settings.served_partitions]
    await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)
    telemetry.observe("memledger.relay.lag", "events committed but not yet published",
                      lambda: max(0, store.max_position() - max(
                          relay.cursor.position for relay in relays)))
    def wake() -> None:
        for relay in relays:
            relay.notify(0)

    listener = asyncio.create_task(listen_for_commits(endpoints.postgres_dsn, EVENTS_TABLE, wake))
    try:
        await asyncio.gather(*(_lead(relay, endpoints, settings, stop) for relay in relays))
    finally:
        listener.cancel()
        await nc.flush()
        await nc.close()
        await asyncio.to_thread(store.close)


async def _lead(relay: Relay, endpoints: Endpoints, settings: Settings,
                stop: asyncio.Event) -> None:
    """Publish one stream while this process holds its lease."""
    stream = relay.subjects.events_stream
    # at most one relay publishes a stream; another stands by, naming it (the lease)
    lease = Lease(endpoints.postgres_dsn, "relay", f"{settings.postgres_schema} {stream}")
    try:
        while await lease.acquire(stop):
            log.info("relay publishing %s to %s", EVENTS_TABLE, stream)
            relay.cursor = Cursor()  # where the stream stands, read again after any standby
            await relay.run(await lease.while_held(stop))
            if stop.is_set():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(_drain(relay), 10.0)
                break
            log.warning("relay lost its lease on %s (its PostgreSQL session ended); "
                        "taking it again", stream)
    finally:
        await lease.release()


async def run(settings: Settings) -> None:
    """Distributed-mode entry: the relay alone against external PostgreSQL and NATS."""
    from memledger_platform.lifecycle import run_until_signalled

    endpoints = endpoints_from(settings)
    telemetry.configure(settings, "memledger-relay")
    await deployment.check(settings, endpoints.postgres_dsn, endpoints.nats_url)
    await run_until_signalled(lambda stop: serve(settings, endpoints, stop),
                              grace_seconds=settings.stop_grace_seconds)


async def listen_for_commits(dsn: str, channel: str, on_commit: Callable[[], None]) -> None:
    """Call ``on_commit`` for every NOTIFY on ``channel`` (and whenever listening starts
    again); reconnect forever (until cancelled) after any connection failure."""
    await notices.listen(dsn, channel, lambda _: on_commit())


async def _drain(relay: Relay) -> None:
    while await relay.relay_once():
        pass
