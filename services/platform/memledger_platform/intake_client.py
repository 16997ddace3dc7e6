"""Commands sent over NATS intake by memledger's own services, each answered with its committed
result: the enricher (its enrichments), the lifecycle scheduler (archives and merges by policy)
and the query service (the retrievals it audits) are clients of ingest (only ingest writes the
event store). Each sends on its own subject, ``<prefix>.svc.<service>.<tenant>.<command>``:
ingest takes the service token as the sender, so only that service's NATS user may publish
there. Several commands go in one message (``SERVICE_MANY``): one publish, fetch, ack and reply
each cost intake as much as the command's commit."""

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from memledger_platform import bus, telemetry
from memledger_platform.crypto import Opener
from memledger_platform.keyring_postgres import keyring_for
from memledger_platform.settings import Settings
from memledger_schemas.commands import MAX_BATCH, SERVICE_COMMANDS, CommandBase
from memledger_schemas.subjects import HDR_REPLY_TO, SERVICE_MANY, Subjects

MESSAGE_BYTES = 1024 * 1024
"""Commands per message are bounded by this size (under NATS's ``max_payload``) and by
``MAX_BATCH``."""


class IntakeClient:
    """The intake client of ``service`` (a key of ``SERVICE_COMMANDS``)."""

    def __init__(self, nc: Client, js: JetStreamContext, subjects: Subjects, service: str, *,
                 timeout_seconds: float = 30.0) -> None:
        if service not in SERVICE_COMMANDS:
            raise ValueError(f"{service!r} is not one of memledger's services "
                             f"({', '.join(sorted(SERVICE_COMMANDS))})")
        self._nc = nc
        self._js = js
        self._subjects = subjects
        self._service = service
        self._timeout = timeout_seconds
        self._inbox = nc.new_inbox()
        self._tokens = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_reply)

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def send(self, tenant: str, commands: list[CommandBase]) -> list[dict[str, Any]]:
        """Publish ``commands`` to intake and wait for every result (a result body, or a
        problem body for a refused command). ``TimeoutError`` if ingest does not answer in
        time: send them again, with the same idempotency keys."""
        futures = []
        loop = asyncio.get_running_loop()
        try:
            publishes = []
            messages = self._messages(tenant, commands)
            for subject, body, _ in messages:
                reply_to = f"{self._inbox}.{next(self._tokens)}"
                future: asyncio.Future[dict[str, Any]] = loop.create_future()
                self._waiting[reply_to] = future
                futures.append(future)
                publishes.append(self._js.publish(
                    subject, body, headers=telemetry.inject({HDR_REPLY_TO: reply_to})))
            # All in flight at once: one stream acknowledgement's round trip per message, in
            # turn, was most of an enrichment batch's time. Intake settles a fetched batch
            # concurrently anyway, so the commands were never applied in the order sent.
            await asyncio.gather(*publishes)
            replies = await asyncio.wait_for(asyncio.gather(*futures), self._timeout)
            return _results(replies, [many for _, _, many in messages])
        finally:
            for future in futures:
                future.cancel()
            self._waiting = {k: f for k, f in self._waiting.items() if not f.done()}

    def _messages(self, tenant: str, commands: list[CommandBase]
                  ) -> list[tuple[str, bytes, int]]:
        """(subject, body, commands of several or 0) of each message: one command on its own
        subject, several in messages of ``SERVICE_MANY``."""
        # What was set, as set: a null that is required (a retrieval's basis without
        # recorded_at) must be sent; what was left to its default need not be.
        bodies = [c.model_dump_json(exclude_unset=True).encode() for c in commands]
        if len(commands) == 1:
            name = type(commands[0]).model_fields["command"].default
            return [(self._subjects.service_intake(self._service, tenant, name), bodies[0], 0)]
        subject = self._subjects.service_intake(self._service, tenant, SERVICE_MANY)
        messages: list[tuple[str, bytes, int]] = []
        chunk: list[bytes] = []
        size = 0
        for command, body in zip(commands, bodies, strict=True):
            named = orjson.dumps({**orjson.loads(body),
                                  "command": type(command).model_fields["command"].default})
            if chunk and (size + len(named) > MESSAGE_BYTES or len(chunk) == MAX_BATCH):
                messages.append((subject, _many(chunk), len(chunk)))
                chunk, size = [], 0
            chunk.append(named)
            size += len(named) + 1
        messages.append((subject, _many(chunk), len(chunk)))
        return messages

    async def _on_reply(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject, None)
        if future is not None and not future.done():
            future.set_result(orjson.loads(msg.data))


def _many(bodies: list[bytes]) -> bytes:
    return b'{"commands":[' + b",".join(bodies) + b"]}"


def _results(replies: list[dict[str, Any]], several: list[int]) -> list[dict[str, Any]]:
    """Each command's result, in order: a message of several answers with their list, or
    with one problem for all of them when it was refused whole."""
    results: list[dict[str, Any]] = []
    for reply, count in zip(replies, several, strict=True):
        if not count:
            results.append(reply)
        else:
            results.extend(reply["results"] if "results" in reply else [reply] * count)
    return results


@dataclass(frozen=True)
class IngestClientSession:
    """What a service that reads the events stream and writes through intake holds: its
    JetStream context, its intake client and an opener of sealed personal data."""

    js: JetStreamContext
    intake: IntakeClient
    opener: Opener


@asynccontextmanager
async def ingest_client(settings: Settings, nats_url: str, service: str
                        ) -> AsyncIterator[IngestClientSession]:
    """Connect as ``memledger-<service>``, make sure the streams exist, start the service's
    intake client and open the keyring (beside the event store, when there is one); close them
    all on the way out."""
    nc = await bus.connect(nats_url, f"memledger-{service}")
    js = nc.jetstream()
    await bus.ensure_streams(js, settings.subjects, settings.nats_stream_replicas)
    intake = IntakeClient(nc, js, settings.subjects, service,
                          timeout_seconds=settings.enricher_reply_timeout_seconds)
    await intake.start()
    keyring, pool = (await asyncio.to_thread(keyring_for, settings, settings.postgres_dsn)
                     if settings.postgres_dsn else (None, None))
    try:
        yield IngestClientSession(js, intake, Opener(keyring))
    finally:
        await intake.close()
        await nc.close()
        if pool is not None:
            pool.close()
