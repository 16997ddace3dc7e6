"""Commands sent over NATS intake, each answered with its committed result: the enricher (its
enrichments) and the query service (the retrievals it audits) are clients of ingest like any
other (DESIGN §1: only ingest writes the event store)."""

import asyncio
import itertools
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from memledger_platform import telemetry
from memledger_schemas.commands import CommandBase
from memledger_schemas.subjects import HDR_REPLY_TO, Subjects


class IntakeClient:
    def __init__(self, nc: Client, js: JetStreamContext, subjects: Subjects, *,
                 timeout_seconds: float = 30.0) -> None:
        self._nc = nc
        self._js = js
        self._subjects = subjects
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
            for command in commands:
                reply_to = f"{self._inbox}.{next(self._tokens)}"
                future: asyncio.Future[dict[str, Any]] = loop.create_future()
                self._waiting[reply_to] = future
                futures.append(future)
                name = type(command).model_fields["command"].default
                # What was set, as set: a null that is required (a retrieval's basis without
                # recorded_at) must be sent; what was left to its default need not be.
                await self._js.publish(
                    self._subjects.intake(tenant, name),
                    command.model_dump_json(exclude_unset=True).encode(),
                    headers=telemetry.inject({HDR_REPLY_TO: reply_to}))
            return list(await asyncio.wait_for(asyncio.gather(*futures), self._timeout))
        finally:
            for future in futures:
                future.cancel()
            self._waiting = {k: f for k, f in self._waiting.items() if not f.done()}

    async def _on_reply(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject, None)
        if future is not None and not future.done():
            future.set_result(orjson.loads(msg.data))
